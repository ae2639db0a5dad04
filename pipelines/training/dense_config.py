"""What a dense-prediction run is: :class:`DenseConfig` (the run folder's config.json, the options of
``vision finetune``) and the names of the run folder's files (the folder: :mod:`.dense_model`).

No torch here: the ``vision finetune`` command line reads its defaults from :class:`DenseConfig` without loading
the model code.

    >>> cfg = DenseConfig(task="depth", backbone="vig_tiny_patch16_224", head="token-local", lora_rank=16)
    >>> DenseConfig.from_json(cfg.to_json()) == cfg
    True
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

from .run_config import parse_config

CONFIG = "config.json"
BASE = "base.safetensors"
BASE_FORMAT = "vision-finetune-base/2"  # base.safetensors holding the plain timm backbone (LoRA runs)
BASE_REFERENCE = "../" + BASE  # adapter_config.json's base_model_name_or_path: the base weights, from RUN/adapter
WEIGHTS = "model.safetensors"
ADAPTER = "adapter"  # RUN/adapter: LoRA runs' adapters as peft writes them
MERGED = "merged"  # RUN/merged: --merge's complete run with the adapters folded in


@dataclass
class DenseConfig:
    """What a run is: the task, the model, and how it was trained (the CLI's options)."""
    task: str = "depth"
    backbone: str = "vig_tiny_patch16_224"
    head: str = "token-local"
    img_size: int = 128
    lora_rank: int = 16          # 0: the whole backbone is trainable (no LoRA)
    lora_alpha: float | None = None  # LoRA scale alpha / rank; default alpha = rank
    lora_dropout: float = 0.0
    lora_targets: list | str | None = None  # module-name suffixes, or one full-match regex; default every Linear
    pretrained: str | None = None  # a local file, a cached timm name or a cached hf-hub: name (never downloaded)
    epochs: int = 10
    batch_size: int = 8
    lr: float = 1e-3
    backbone_lr: float | None = None  # default lr / 10 for a fully trainable backbone, lr for LoRA
    weight_decay: float = 0.05
    warmup: float = 0.05          # share of the steps with a linear warmup
    ema: float = 0.999            # 0: no EMA
    clip: float = 1.0
    tta: bool = True
    select_best: bool = True      # model.safetensors = the epoch with the best validation primary metric
    seed: int = 0
    limit: int | None = None
    max_minutes: float | None = None
    stop_after: int | None = None  # end after this epoch, on the schedule of ``epochs`` (resume continues it)
    grad_accum: int = 1           # micro-batches per optimiser step
    mixed_precision: str | None = None  # no / fp16 / bf16; None: what `accelerate config` / launch set
    cpu: bool = False             # force the CPU even when CUDA or MPS is present
    log_with: str | None = None   # an accelerate tracker (tensorboard, wandb, ...)
    data: str | None = None
    val_fraction: float = 0.1     # shares of the data's names (by a hash of each) held out for validation
    test_fraction: float = 0.1    # ... and for `vision evaluate --split test`; the rest trains
    extra: dict = field(default_factory=dict)  # extra timm.create_model kwargs (e.g. depth=2 for a tiny model)
    head_kwargs: dict = field(default_factory=dict)  # extra head arguments (e.g. cells=4 for local-linear)
    task_kwargs: dict = field(default_factory=dict)  # task field overrides (e.g. gradient_weight=0.5)

    @classmethod
    def from_json(cls, text: str, where: str = CONFIG) -> "DenseConfig":
        """The config ``text`` holds, every key checked against the allow-list of :mod:`.run_config` (types,
        bounds, no download switches); anything else is one ValueError line naming ``where`` and the key."""
        return cls(**parse_config(text, where))

    @property
    def fractions(self) -> tuple[float, float, float]:
        """(train, val, test) shares of the data, as :class:`vision.data.dense.DenseSamples` takes them."""
        return (1.0 - self.val_fraction - self.test_fraction, self.val_fraction, self.test_fraction)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=1)
