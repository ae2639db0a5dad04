"""Images and masks for structure-preserving editing: user inputs to tensors, and mask handling.

Mask convention (Gong et al., WACV 2026): **1 where structure must be preserved**, 0 where the edit
may change it; ``invert=True`` flips it.

    >>> img = to_image_tensor(PIL.Image.open("photo.png"))      # (1, 3, H, W) float32 in [0, 1]
    >>> m = load_mask("mask.png", size=(512, 512))             # (1, 1, 512, 512) in [0, 1]
"""
from __future__ import annotations

import cv2
import numpy as np
from PIL import Image
import torch
import torch.nn.functional as F

from vision.kernels import guided_filter

from .attention_control import attention_input, attention_output  # shared with the editing pipeline's processor


def to_image_tensor(image) -> torch.Tensor:
    """PIL image, (H, W[, C]) array or ((1,) C, H, W) tensor -> (1, 3, H, W) float32 in [0, 1].

    Non-RGB images are converted (gray is repeated, alpha dropped, palette/CMYK converted by PIL).
    uint8 arrays are divided by 255; float tensors with negative values are taken as [-1, 1]
    (the diffusers convention), other floats as [0, 1].
    """
    if isinstance(image, Image.Image):
        image = np.asarray(image.convert("RGB"))
    if isinstance(image, np.ndarray):
        arr = image
        if arr.ndim == 2:
            arr = arr[..., None]
        if arr.ndim != 3:
            raise ValueError(f"an image array must be (H, W) or (H, W, C), got shape {arr.shape}")
        scale = 255.0 if arr.dtype == np.uint8 else (65535.0 if arr.dtype == np.uint16 else 1.0)
        t = torch.from_numpy(np.ascontiguousarray(arr).astype(np.float32) / scale).permute(2, 0, 1)[None]
    elif isinstance(image, torch.Tensor):
        t = image.detach()
        if t.dim() == 3:
            t = t[None]
        if t.dim() != 4 or t.shape[0] != 1:
            raise ValueError(f"an image tensor must be (C, H, W) or (1, C, H, W), got {tuple(t.shape)}")
        if t.dtype == torch.uint8:
            t = t.float() / 255
        t = t.float().cpu()
        if t.numel() and float(t.min()) < 0:
            t = (t + 1) / 2
    else:
        raise ValueError(f"unsupported image type {type(image).__name__}; pass a PIL image, array or tensor")
    c = t.shape[1]
    if c == 1:
        t = t.expand(-1, 3, -1, -1)
    elif c == 4:
        t = t[:, :3]
    elif c != 3:
        raise ValueError(f"an image must have 1, 3 or 4 channels, got {c}")
    if not torch.isfinite(t).all():
        raise ValueError("the image has NaN or Inf values")
    return t.clamp(0, 1).contiguous()


def load_mask(mask, size=None, *, invert: bool = False, threshold: float | None = None) -> torch.Tensor:
    """A user mask -> (1, 1, H, W) float32 in [0, 1] (1 = preserve structure).

    Args:
        mask: a path, PIL image (any mode; converted to gray), (H, W) / (H, W, C) array (uint8 /255,
            bool, float in [0, 1]) or tensor (H, W), (1, H, W) or (1, 1, H, W).
        size: optional (H, W) to resize to (bilinear, so edges stay soft).
        invert: flip the mask (preserve where it was 0).
        threshold: optional binarisation after resizing.
    """
    if isinstance(mask, str) or hasattr(mask, "__fspath__"):
        with Image.open(mask) as im:
            mask = np.asarray(im.convert("L"))
    if isinstance(mask, Image.Image):
        mask = np.asarray(mask.convert("L"))
    if isinstance(mask, np.ndarray):
        arr = mask
        if arr.ndim == 3:
            arr = arr[..., :3].mean(-1) if arr.dtype != np.uint8 else arr[..., :3].astype(np.float32).mean(-1)
            if mask.dtype == np.uint8:
                arr = arr / 255.0
        elif arr.dtype == np.uint8:
            arr = arr.astype(np.float32) / 255.0
        m = torch.from_numpy(np.asarray(arr, dtype=np.float32))
    elif isinstance(mask, torch.Tensor):
        m = mask.detach().cpu()
        m = m.float() / 255 if m.dtype == torch.uint8 else m.float()
    else:
        raise ValueError(f"unsupported mask type {type(mask).__name__}; pass a path, PIL image, array or tensor")
    while m.dim() > 2 and m.shape[0] == 1:
        m = m[0]
    if m.dim() == 3:  # (C, H, W) colour mask
        m = m.mean(0)
    if m.dim() != 2:
        raise ValueError(f"a mask must be (H, W), (1, H, W) or (1, 1, H, W), got {tuple(mask.shape)}")
    if not torch.isfinite(m).all():
        raise ValueError("the mask has NaN or Inf values")
    if float(m.max()) > 1.0 + 1e-6:
        if float(m.max()) <= 255.0:
            m = m / 255.0
        else:
            raise ValueError(f"mask values must lie in [0, 1] or [0, 255], got max {float(m.max()):g}")
    if float(m.min()) < 0:
        raise ValueError(f"mask values must be >= 0, got min {float(m.min()):g}")
    m = m[None, None]
    if size is not None and tuple(m.shape[-2:]) != tuple(size):
        m = F.interpolate(m, size=tuple(int(s) for s in size), mode="bilinear", align_corners=False)
    m = m.clamp(0, 1)
    if threshold is not None:
        m = (m >= threshold).float()
    if invert:
        m = 1 - m
    return m.contiguous()


# ----------------------------------------------------------------------------- masks from cross-attention
class _StoreCrossAttention:
    """Attention processor that computes attention explicitly and keeps the cross-attention maps,
    summed over heads, layers and steps, per query length (one entry per UNet grid).

    It is also an attention *observer*: StructurePreservingEditPipeline's attention control calls
    :meth:`record` of the processors it replaces, so a dry run of that pipeline stores the
    cross-attention it really uses."""

    def __init__(self, store: dict):
        self.store = store

    def record(self, probs: torch.Tensor, heads: int) -> None:
        """Add cross-attention probabilities ``probs`` (B * heads, Q, K) to the store."""
        q = probs.shape[1]
        maps = probs.float().view(-1, heads, *probs.shape[1:]).sum(1)  # (B, Q, K)
        total, count = self.store.get(q, (0.0, 0))
        self.store[q] = (total + maps, count + heads)

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, temb=None,
                 *args, **kwargs):
        residual, hidden_states, shape = attention_input(attn, hidden_states, temb)
        batch, seq, _ = hidden_states.shape if encoder_hidden_states is None else encoder_hidden_states.shape
        attention_mask = attn.prepare_attention_mask(attention_mask, seq, batch)
        if attn.group_norm is not None:
            hidden_states = attn.group_norm(hidden_states.transpose(1, 2)).transpose(1, 2)
        query = attn.to_q(hidden_states)
        cross = encoder_hidden_states is not None
        if not cross:
            encoder_hidden_states = hidden_states
        elif attn.norm_cross:
            encoder_hidden_states = attn.norm_encoder_hidden_states(encoder_hidden_states)
        key, value = attn.to_k(encoder_hidden_states), attn.to_v(encoder_hidden_states)
        query, key, value = attn.head_to_batch_dim(query), attn.head_to_batch_dim(key), attn.head_to_batch_dim(value)
        probs = attn.get_attention_scores(query, key, attention_mask)
        if cross:
            self.record(probs, attn.heads)
        hidden_states = attn.batch_to_head_dim(torch.bmm(probs, value))
        return attention_output(attn, hidden_states, residual, shape)



def word_token_indices(tokenizer, prompt: str, words) -> list[int]:
    """Positions (in the padded prompt's ids, BOS at 0) of the tokens of each of ``words``."""
    ids = tokenizer(prompt, padding="max_length", max_length=tokenizer.model_max_length, truncation=True).input_ids
    found = []
    for word in ([words] if isinstance(words, str) else words):
        w = tokenizer(word, add_special_tokens=False).input_ids
        hits = [i for i in range(1, len(ids) - len(w) + 1) if ids[i:i + len(w)] == w]
        if not w or not hits:
            raise ValueError(f"the word {word!r} is not in the prompt {prompt!r}")
        for i in hits:
            found.extend(range(i, i + len(w)))
    return sorted(set(found))


def upsample_mask(mask: torch.Tensor, guide: torch.Tensor, eps: float = 1e-2) -> torch.Tensor:
    """Upsample a rough (B, 1, h, w) mask to ``guide``'s size: x2 per level, each level guided-filtered
    with the gray guide at that size (radius 1, 2, 3, ... as in Gong et al.'s mask upsampling)."""
    gray = guide.float().mean(1, keepdim=True)
    H, W = gray.shape[-2:]
    m, radius = mask.float(), 1
    while m.shape[-2] < H or m.shape[-1] < W:
        size = (min(H, m.shape[-2] * 2), min(W, m.shape[-1] * 2))
        m = F.interpolate(m, size=size, mode="bicubic", align_corners=False).clamp(0, 1)
        g = F.interpolate(gray, size=size, mode="area") if size != (H, W) else gray
        if min(size) >= 2 * radius + 1:
            m = guided_filter(g, m, radius, eps).clamp(0, 1)
        radius += 1
    return m


THRESHOLDS = ("otsu", "mean")


def refine_attention_map(maps: torch.Tensor, *, gamma: float = 1.0, threshold: float | str | None = "otsu",
                         normalise: str = "minmax") -> torch.Tensor:
    """Normalise rough cross-attention maps, apply a gamma and threshold them (adaptively by default).

    Args:
        maps: (B, 1, h, w) non-negative maps (e.g. the 16 x 16 maps of a word).
        gamma: exponent on the normalised map (> 1 keeps only the strongest responses, < 1 widens).
        threshold: a number in [0, 1], ``"otsu"`` (per map, Otsu's threshold on the normalised map,
            OpenCV) or ``"mean"`` (per map, its mean), or None to keep the map soft.
        normalise: ``"minmax"`` (to [0, 1] per map) or ``"max"`` (divide by the maximum).

    Returns (B, 1, h, w) float32 in [0, 1] (0 / 1 when thresholded). A flat map (no contrast) gives 1.

        >>> m = refine_attention_map(rough, gamma=2.0, threshold="otsu")
    """
    if maps.dim() != 4 or maps.shape[1] != 1:
        raise ValueError(f"maps must be (B, 1, h, w), got {tuple(maps.shape)}")
    if not torch.isfinite(maps).all():
        raise ValueError("the attention maps have NaN or Inf values")
    if not gamma > 0:
        raise ValueError(f"gamma must be > 0, got {gamma}")
    if normalise not in ("minmax", "max"):
        raise ValueError(f"normalise must be 'minmax' or 'max', got {normalise!r}")
    if isinstance(threshold, str) and threshold not in THRESHOLDS:
        raise ValueError(f"threshold must be a number, one of {THRESHOLDS} or None, got {threshold!r}")
    m = maps.float()
    flat = m.flatten(1)
    hi = flat.amax(1).view(-1, 1, 1, 1)
    lo = flat.amin(1).view(-1, 1, 1, 1) if normalise == "minmax" else torch.zeros_like(hi)
    span = hi - lo
    m = torch.where(span > 1e-12 * hi.abs().clamp_min(1e-30), (m - lo) / span.clamp_min(1e-30), torch.ones_like(m))
    m = m.clamp(0, 1) ** gamma
    if threshold is None:
        return m
    if threshold == "mean":
        level = m.flatten(1).mean(1).view(-1, 1, 1, 1)
    elif threshold == "otsu":
        levels = []
        for one in m:
            u8 = np.ascontiguousarray((one[0].cpu().numpy() * 255).round().astype(np.uint8))
            t, _ = cv2.threshold(u8, 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
            levels.append((t + 0.5) / 255)  # OpenCV keeps values > t
        level = torch.tensor(levels, dtype=m.dtype, device=m.device).view(-1, 1, 1, 1)
    else:
        level = float(threshold)
        if not 0.0 <= level <= 1.0:
            raise ValueError(f"threshold must lie in [0, 1], got {threshold}")
    return (m >= level).float()


@torch.no_grad()
def attention_mask(pipe, words, *, prompt: str, guide_image, resolution: int = 16,
                   threshold: float | str | None = 0.5, gamma: float = 1.0, batch_index: int = -1,
                   invert: bool = False, words_from: str | None = None, **call_kwargs) -> torch.Tensor:
    """A mask from the cross-attention of ``words`` of ``prompt``, stored during a dry run of ``pipe``.

    Runs ``pipe(prompt=prompt, output_type="latent", **call_kwargs)`` with processors that keep the
    cross-attention maps (summed over heads, layers and steps) of the UNet grid with the token count
    nearest ``resolution``^2 (16 x 16 for SD1.5 at 512 x 512, as published), averages the maps of
    the words' tokens for the batch entry ``batch_index`` (-1: the conditional branch of a CFG pipeline;
    for StructurePreservingEditPipeline 0 is the source branch, -1 the target), normalises by the
    maximum, thresholds (None keeps it soft) and upsamples x2 per level with a guided filter guided by
    ``guide_image``. ``threshold="otsu"`` or ``"mean"`` (adaptive, per map) or ``gamma != 1`` refine the
    map with :func:`refine_attention_map` instead (min-max normalised, gamma, adaptive threshold).
    Returns (1, 1, H, W) in [0, 1], 1 = preserve (``invert`` flips it).
    ``words_from``: the prompt the words are looked up in (default ``prompt``); pass the source prompt
    with ``batch_index=0`` for source words of StructurePreservingEditPipeline (``source_prompt=`` then
    goes in ``call_kwargs``). A dry run with guidance attached also runs the guidance; run it before.
    """
    unet = getattr(pipe, "unet", None)
    if unet is None:
        raise ValueError("attention masks need a pipeline with a UNet (cross-attention at a 16 x 16 grid)")
    tokens = word_token_indices(pipe.tokenizer, words_from or prompt, words)
    store: dict = {}
    saved = unet.attn_processors
    unet.set_attn_processor(_StoreCrossAttention(store))
    try:
        pipe(prompt=prompt, output_type="latent", **call_kwargs)
    finally:
        unet.set_attn_processor(saved)
    if not store:
        raise ValueError("the dry run saw no cross-attention; attention masks need a UNet with cross-attention")
    guide = to_image_tensor(guide_image)
    H, W = guide.shape[-2:]
    q = min(store, key=lambda n: abs(n - resolution ** 2))
    rh = max(1, round((q * H / W) ** 0.5))
    rw = q // rh
    if rh * rw != q:
        raise ValueError(f"cannot lay {q} attention tokens on a grid with the image's aspect {W} x {H}")
    total, count = store[q]
    maps = total / count  # (B, Q, K)
    rough = maps[batch_index, :, tokens].mean(-1).view(1, 1, rh, rw)
    if isinstance(threshold, str) or gamma != 1.0:
        rough = refine_attention_map(rough, gamma=gamma, threshold=threshold)
    else:
        rough = rough / rough.amax().clamp_min(1e-12)
        if threshold is not None:
            rough = (rough >= threshold).float()
    m = upsample_mask(rough, guide)
    return 1 - m if invert else m


def words_mask(pipe, mask_words, prompt: str, source_prompt, control: dict, padded, strength: float, steps: int,
               seed: int, invert_mask: bool, mask_threshold: float) -> torch.Tensor:
    """``vision edit --mask-words``: the (1, 1, h, w) mask of ``mask_words`` from the cross-attention of a dry run
    without guidance on ``padded`` (1, 3, h, w). With ``source_prompt`` (a StructurePreservingEditPipeline,
    ``control`` its attention-control arguments) the words may all come from the source prompt instead.

        >>> m = words_mask(pipe, ["cat"], "a cat", None, {}, image, 0.6, 8, 0, False, 0.5)   # (1, 1, h, w)
    """
    where = dict(batch_index=-1)
    if source_prompt is not None:
        def has_all(text):
            try:
                word_token_indices(pipe.tokenizer, text, mask_words)
                return True
            except ValueError:
                return False

        if not has_all(prompt):
            if not has_all(source_prompt):
                raise ValueError(f"--mask-words {' '.join(mask_words)!r} must all be words of --prompt "
                                 f"{prompt!r} or all of --source-prompt {source_prompt!r}")
            where = dict(batch_index=0, words_from=source_prompt)  # the source branch's maps
        where.update(source_prompt=source_prompt, structure_preservation=False, **control)
    return attention_mask(pipe, mask_words, prompt=prompt, guide_image=padded, image=padded,
                          strength=strength, num_inference_steps=steps,
                          generator=torch.Generator().manual_seed(seed), invert=invert_mask,
                          threshold=mask_threshold, **where)
