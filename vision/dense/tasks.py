"""Dense-prediction tasks: what the head outputs, how it is trained, decoded, flipped and scored.

Each task is a dataclass with the head's ``out_channels``, the field of a rendered scene that holds its
target (``vision.data.RenderedScenes`` fields), and methods ``make_target``, ``valid_mask``, ``loss``,
``decode``, ``metrics``, ``flip`` and ``mean_baseline``. The head's nonlinearity lives here, as in
ReChannel (Wang et al. 2026): log-depth with SILog, unnormalised normals with 1 - cos plus an angle,
tanh alpha, logits with BCE / CE.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from . import losses, metrics
from .losses import align_scale_shift, as_mask, work


def _batched(x: torch.Tensor) -> torch.Tensor:
    if not isinstance(x, torch.Tensor) or x.dim() not in (3, 4):
        raise ValueError(f"expected a (C, H, W) or (B, C, H, W) tensor, got "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    return x[None] if x.dim() == 3 else x


def _targets(train_targets) -> Iterable[torch.Tensor]:
    if isinstance(train_targets, torch.Tensor):
        return [_batched(train_targets)]
    return (_batched(t) for t in train_targets)


@dataclass
class Task:
    """Base of the tasks. Shapes: raw head output (B, out_channels, H, W); targets (B, C, H, W) as made by
    :meth:`make_target` from the scene field ``target_field``; masks (B, 1, H, W) bool.

    ``primary_metric`` is the key of :meth:`metrics` used to pick checkpoints, ``lower_is_better`` its
    direction; ``flip_negate`` lists raw channels whose sign flips under a horizontal image flip.
    """

    name: str
    out_channels: int
    target_field: str
    primary_metric: str
    lower_is_better: bool
    flip_negate: tuple = ()

    def __call__(self, **overrides) -> "Task":
        """A copy with some fields changed: ``TASKS["semantic"](out_channels=21)``."""
        return replace(self, **overrides)

    def make_target(self, field: torch.Tensor) -> torch.Tensor:
        """The training target from the scene field: (C, H, W) or (B, C, H, W) -> float32 (B, C, H, W)."""
        return _batched(field).float()

    def valid_mask(self, target: torch.Tensor) -> torch.Tensor:
        """Pixels that carry a target: finite everywhere by default."""
        return torch.isfinite(target).all(1, keepdim=True)

    def _mask(self, target, valid):
        return self.valid_mask(target) if valid is None else as_mask(valid, target) & self.valid_mask(target)

    def loss(self, pred_raw: torch.Tensor, target: torch.Tensor, valid=None) -> torch.Tensor:
        raise NotImplementedError

    def decode(self, pred_raw: torch.Tensor) -> torch.Tensor:
        return pred_raw

    def metrics(self, decoded: torch.Tensor, target: torch.Tensor, valid=None) -> dict[str, float]:
        raise NotImplementedError

    def flip(self, pred_raw: torch.Tensor) -> torch.Tensor:
        """The raw output of the horizontally flipped image, mapped back: flipped along W and, for the
        channels in ``flip_negate`` (the normal's x), negated."""
        out = pred_raw.flip(-1)
        if self.flip_negate:
            sign = torch.ones(out.shape[1], dtype=out.dtype, device=out.device)
            sign[list(self.flip_negate)] = -1
            out = out * sign[:, None, None]
        return out

    def mean_baseline(self, train_targets) -> torch.Tensor:
        """The "predict the training mean" prediction, in decoded space, as a (1, C, 1, 1) tensor to
        ``expand`` to a target's shape: the mean over all valid training pixels. ``train_targets``: a
        target tensor or an iterable of them (made by :meth:`make_target`)."""
        total, count = 0.0, 0
        for t in _targets(train_targets):
            m = self.valid_mask(t).expand_as(t)
            total = total + torch.where(m, t.double(), torch.zeros((), dtype=torch.float64)).sum((0, 2, 3))
            count = count + m[:, :1].sum()
        if not torch.is_tensor(count) or int(count) == 0:
            raise ValueError("no valid training pixels")
        return (total / count).float().reshape(1, -1, 1, 1)


@dataclass
class DepthTask(Task):
    """Metric depth: raw output is log-depth (metres), trained with SILog; decode = exp.
    Target: the ``depth`` field (camera z in metres, 0 = no surface); valid where depth > 0."""

    name: str = "depth"
    out_channels: int = 1
    target_field: str = "depth"
    primary_metric: str = "abs_rel"
    lower_is_better: bool = True
    variance_focus: float = 0.85
    gradient_weight: float = 0.0  # weight of the multi-scale gradient matching of the log-depth residual

    def valid_mask(self, target):
        return torch.isfinite(target) & (target > 0)

    def loss(self, pred_raw, target, valid=None):
        mask = self._mask(target, valid)
        loss = losses.silog_loss(pred_raw, target, mask, self.variance_focus)
        if self.gradient_weight:
            t = work(target)
            log_t = torch.log(torch.where(mask, t, torch.ones_like(t)))
            loss = loss + self.gradient_weight * losses.gradient_matching_loss(work(pred_raw) - log_t, mask)
        return loss

    def decode(self, pred_raw):
        return torch.exp(work(pred_raw).clamp(-20, 20))

    def metrics(self, decoded, target, valid=None):
        return metrics.depth_metrics(decoded, target, self._mask(target, valid))


@dataclass
class RelativeDepthTask(DepthTask):
    """Relative (affine-invariant) depth as in MiDaS: raw output is disparity up to an unknown scale and
    shift, trained with the scale-and-shift-invariant loss against ``1 / depth``. Metrics align the
    output to the true disparity per image (least squares on valid pixels), clamp it at
    ``1 / max_depth`` and score ``1 / aligned`` with the depth metrics."""

    name: str = "relative-depth"
    max_depth: float = 1e3

    def loss(self, pred_raw, target, valid=None):
        mask = self._mask(target, valid)
        disparity = torch.where(mask, 1 / torch.where(mask, target, torch.ones_like(target)), torch.zeros_like(target))
        return losses.scale_shift_invariant_loss(pred_raw, disparity, mask)

    def decode(self, pred_raw):
        return work(pred_raw)

    def align(self, decoded, target, valid=None) -> torch.Tensor:
        """Depth from the relative output: aligned in disparity to ``1 / target`` per image, then inverted."""
        mask = self._mask(target, valid)
        disparity = torch.where(mask, 1 / torch.where(mask, target, torch.ones_like(target)), torch.zeros_like(target))
        d = decoded.detach().double()
        s, t = align_scale_shift(d, disparity.double(), mask)
        aligned = s[:, None, None, None] * d + t[:, None, None, None]
        return 1 / aligned.clamp_min(1 / self.max_depth)

    def metrics(self, decoded, target, valid=None):
        return metrics.depth_metrics(self.align(decoded, target, valid), target, self._mask(target, valid))

    def mean_baseline(self, train_targets):
        total, count = 0.0, 0
        for t in _targets(train_targets):
            m = self.valid_mask(t)
            total = total + (1 / t.double()[m]).sum()
            count = count + int(m.sum())
        if not count:
            raise ValueError("no valid training pixels")
        return (total / count).float().reshape(1, 1, 1, 1)


@dataclass
class NormalsTask(Task):
    """Surface normals: raw output is an unnormalised 3-vector, trained with ``1 - cos`` plus the angle
    (radians); decode = normalise. Target: ``camnormal`` (camera space: x right, y up, z to the viewer;
    0 where no surface); valid where ``|n| > 0.5``. A horizontal flip negates x."""

    name: str = "normals"
    out_channels: int = 3
    target_field: str = "camnormal"
    primary_metric: str = "mean_angle"
    lower_is_better: bool = True
    flip_negate: tuple = (0,)
    angular_weight: float = 1.0
    gradient_weight: float = 0.0  # weight of the multi-scale gradient matching of the unit-normal residual

    def valid_mask(self, target):
        return torch.isfinite(target).all(1, keepdim=True) & (target.norm(dim=1, keepdim=True) > 0.5)

    def loss(self, pred_raw, target, valid=None):
        mask = self._mask(target, valid)
        loss = losses.normal_loss(pred_raw, target, mask, self.angular_weight)
        if self.gradient_weight:
            residual = F.normalize(work(pred_raw), dim=1, eps=1e-8) - torch.where(mask, work(target), 0.0)
            loss = loss + self.gradient_weight * losses.gradient_matching_loss(residual, mask)
        return loss

    def decode(self, pred_raw):
        return F.normalize(work(pred_raw), dim=1, eps=1e-8)

    def metrics(self, decoded, target, valid=None):
        return metrics.normal_metrics(decoded, target, self._mask(target, valid))

    def mean_baseline(self, train_targets):
        return F.normalize(super().mean_baseline(train_targets), dim=1)


@dataclass
class AlphaTask(Task):
    """Alpha matting: raw output r, alpha = (tanh(r) + 1) / 2 in [0, 1]; L1 + gradient loss on alpha.
    Target: an ``alpha`` field in [0, 1] (plain folder layout)."""

    name: str = "alpha"
    out_channels: int = 1
    target_field: str = "alpha"
    primary_metric: str = "sad"
    lower_is_better: bool = True
    gradient_weight: float = 1.0

    def loss(self, pred_raw, target, valid=None):
        return losses.alpha_loss(self.decode(pred_raw), target, self._mask(target, valid), self.gradient_weight)

    def decode(self, pred_raw):
        return (torch.tanh(work(pred_raw)) + 1) / 2

    def metrics(self, decoded, target, valid=None):
        return metrics.alpha_metrics(decoded, target, self._mask(target, valid))


@dataclass
class BinaryTask(Task):
    """Binary (foreground) segmentation: raw output is a logit, BCE; decode = sigmoid probability.
    Target: foreground = ``segment > 0`` (instance ids; any mask with 0 = background works too)."""

    name: str = "binary"
    out_channels: int = 1
    target_field: str = "segment"
    primary_metric: str = "iou"
    lower_is_better: bool = False

    def make_target(self, field):
        return (_batched(field) > 0).float()

    def loss(self, pred_raw, target, valid=None):
        return losses.binary_loss(pred_raw, target, self._mask(target, valid))

    def decode(self, pred_raw):
        return torch.sigmoid(work(pred_raw))

    def metrics(self, decoded, target, valid=None):
        return metrics.binary_metrics(decoded, target, self._mask(target, valid))


@dataclass
class SemanticTask(Task):
    """Semantic segmentation: raw output is K logits, cross-entropy; decode = argmax class id (B, 1, H, W).
    Target: the ``semantic`` field (class ids, index into ``vision.data.CLASSES``: 12 classes, 0 =
    background); ``ignore_index`` pixels do not count."""

    name: str = "semantic"
    out_channels: int = 12
    target_field: str = "semantic"
    primary_metric: str = "miou"
    lower_is_better: bool = False
    ignore_index: int = 255

    def make_target(self, field):
        return _batched(field).long()

    def valid_mask(self, target):
        return target != self.ignore_index

    def loss(self, pred_raw, target, valid=None):
        return losses.semantic_loss(pred_raw, target, self._mask(target, valid), self.ignore_index)

    def decode(self, pred_raw):
        return pred_raw.argmax(1, keepdim=True)

    def metrics(self, decoded, target, valid=None):
        return metrics.semantic_metrics(decoded, target, self._mask(target, valid), self.out_channels,
                                        self.ignore_index)

    def mean_baseline(self, train_targets):
        """The most frequent training class, as a (1, 1, 1, 1) class id."""
        counts = torch.zeros(self.out_channels, dtype=torch.float64)
        for t in _targets(train_targets):
            ids = t[self.valid_mask(t)].long()
            counts += torch.bincount(ids.clamp(0, self.out_channels - 1), minlength=self.out_channels).double()
        if counts.sum() == 0:
            raise ValueError("no valid training pixels")
        return counts.argmax().reshape(1, 1, 1, 1)


@dataclass
class AlbedoTask(Task):
    """Albedo (diffuse reflectance, RGB in [0, 1]): L1 on ``sigmoid(raw)`` (``output="sigmoid"``, default) or
    on the raw output (``"linear"``). Target: the ``albedo`` field."""

    name: str = "albedo"
    out_channels: int = 3
    target_field: str = "albedo"
    primary_metric: str = "l1"
    lower_is_better: bool = True
    output: str = "sigmoid"

    def __post_init__(self):
        if self.output not in ("sigmoid", "linear"):
            raise ValueError(f"output must be 'sigmoid' or 'linear', got {self.output!r}")

    def loss(self, pred_raw, target, valid=None):
        return losses.l1_loss(self.decode(pred_raw), target, self._mask(target, valid))

    def decode(self, pred_raw):
        return torch.sigmoid(work(pred_raw)) if self.output == "sigmoid" else work(pred_raw)

    def metrics(self, decoded, target, valid=None):
        return metrics.albedo_metrics(decoded, target, self._mask(target, valid))


# name -> task instance with default settings; ``TASKS[name](**overrides)`` gives a modified copy
TASKS = {"depth": DepthTask(), "normals": NormalsTask(), "alpha": AlphaTask(), "binary": BinaryTask(),
         "semantic": SemanticTask(), "albedo": AlbedoTask(), "relative-depth": RelativeDepthTask()}


def get_task(name: str, **overrides) -> Task:
    """``TASKS[name]`` with the given field overrides (e.g. ``out_channels`` for semantic); unknown names are
    a ValueError."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose from {', '.join(TASKS)}")
    return TASKS[name](**overrides)


def predict_with_flip(task: Task, predict: Callable[[torch.Tensor], torch.Tensor], image: torch.Tensor) -> torch.Tensor:
    """Horizontal-flip test-time augmentation in raw output space: the mean of ``predict(image)`` and
    ``task.flip(predict(image.flip(-1)))``."""
    return (predict(image) + task.flip(predict(image.flip(-1)))) / 2
