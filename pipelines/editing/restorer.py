"""Pixel-space SPL restoration of a clean latent: decode, optimise against the source, encode.

Shared by the stock-pipeline guidance (:mod:`.spl_guidance`), its callback form and
:class:`StructurePreservingEditPipeline`. One guided stage is one VAE decode and one VAE encode; with
``enable_model_cpu_offload`` the VAE's offload hook would move the denoiser to the CPU on each of them
(and the next denoiser step back), so the stage runs with the VAE hook's "offload the previous model"
link suspended: the VAE joins the denoiser on the device for the guided steps, the denoiser stays put,
and the pipeline's own final decode offloads as usual.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from vision.restore import restore_structure

from .config import LATENT_UPDATES, StructurePreservationConfig  # noqa: F401 (LATENT_UPDATES re-exported)
from .masks import load_mask, to_image_tensor

ASPECT_TOLERANCE = 0.02  # relative; larger differences between source and output aspect are an error


def source_tensor(image) -> torch.Tensor:
    """PIL image(s), array or (B, 3, H, W) / (3, H, W) tensor -> (B, 3, H, W) float32 in [0, 1]."""
    if isinstance(image, (list, tuple)):
        parts = [source_tensor(i) for i in image]
        sizes = {tuple(p.shape[-2:]) for p in parts}
        if len(sizes) > 1:
            raise ValueError(f"the source images have different sizes {sorted(sizes)}; pass one size")
        return torch.cat(parts)
    if isinstance(image, torch.Tensor) and image.dim() == 4 and image.shape[0] > 1:
        t = image.detach().float().cpu() / (255.0 if image.dtype == torch.uint8 else 1.0)
        return ((t + 1) / 2 if float(t.min()) < 0 else t).clamp(0, 1)
    return to_image_tensor(image)


@contextlib.contextmanager
def offload_link_suspended(vae):
    """Within the block, calling ``vae`` does not offload the model before it in the offload sequence.

    ``enable_model_cpu_offload`` gives each model an accelerate ``CpuOffload`` hook whose ``prev_module_hook``
    is offloaded when the model runs; the link is restored on exit, so the pipeline's own decode behaves as
    before. Without offload hooks this does nothing.
    """
    hook = getattr(vae, "_hf_hook", None)
    hooks = list(getattr(hook, "hooks", None) or ([hook] if hook is not None else []))
    saved = [(h, h.prev_module_hook) for h in hooks if getattr(h, "prev_module_hook", None) is not None]
    for h, _ in saved:
        h.prev_module_hook = None
    try:
        yield
    finally:
        for h, prev in saved:
            h.prev_module_hook = prev


class _NoBar:
    def update(self, n=1):
        pass

    def close(self):
        pass


def spl_progress_bar(pipe, total: int):
    """A bar over ``total`` SPL SGD steps from the pipeline's own ``progress_bar``, so
    ``pipe.set_progress_bar_config`` (``disable=True`` among the rest) applies to it too."""
    if total <= 0:
        return _NoBar()
    bar = pipe.progress_bar(total=total)
    desc = (getattr(pipe, "_progress_bar_config", None) or {}).get("desc")
    bar.set_description(f"{desc} (SPL guidance)" if desc else "SPL guidance", refresh=False)
    return bar


def aspect_check(src_hw, out_hw):
    (h, w), (H, W) = src_hw, out_hw
    if abs((w / h) / (W / H) - 1) > ASPECT_TOLERANCE:
        raise ValueError(f"the structure source is {h}x{w} (HxW) but the output is {H}x{W}: the aspect ratio "
                         f"differs ({w / h:.3f} vs {W / H:.3f}), and stretching it would guide towards distorted "
                         "edges; pass a source with the image's aspect (crop or pad it), or leave the source "
                         "unset so the call's own image is used")


class LatentRestorer:
    """Decode a clean latent, restore its structure in pixel space with SPL + colour loss, encode it.

    Holds the source (``(B, 3, H, W)`` in [0, 1]; a batch is tiled over the output batch, as img2img
    pipelines tile their init image), the optional mask and the loss settings; the reference inside the
    sampling loop is the source's VAE round trip (cached per size), post-processing uses the source.
    A source of another size is resized to the output (bicubic, antialiased); one of another aspect
    ratio raises ValueError when ``check_aspect`` (the default).
    """

    def __init__(self, source_image, config: StructurePreservationConfig | None = None, *, mask=None,
                 check_aspect: bool = True, steps: int | None = None, spl_weight: float | None = None,
                 color_weight: float | None = None, invert_mask: bool | None = None, latent_update: str | None = None,
                 radius: int | None = None, eps: float | None = None, post_process_steps: int | None = None):
        # the keyword arguments (the older signature; ``steps`` is ``steps_per_guidance``) change the config;
        # without them it is ``config`` itself, which goes on whole (its ``loss`` to restore_structure)
        self.config = cfg = StructurePreservationConfig.from_options(
            config, steps_per_guidance=steps, spl_weight=spl_weight, color_weight=color_weight,
            invert_mask=invert_mask, latent_update=latent_update, radius=radius, eps=eps,
            post_process_steps=post_process_steps)
        self.source = source_tensor(source_image)
        self.mask = None if mask is None else load_mask(mask, self.source.shape[-2:], invert=cfg.invert_mask)
        self.check_aspect = check_aspect
        self._references: dict = {}
        self.vae = None
        self.decode_fn = None  # the VAE's own decode (not the post-processing wrapper)

    # the settings by name (read-only views of ``config``)
    steps = property(lambda self: self.config.steps_per_guidance, doc="SGD steps per guided step.")
    post_steps = property(lambda self: self.config.post_steps, doc="SGD steps of post-processing.")
    spl_weight = property(lambda self: self.config.spl_weight)
    color_weight = property(lambda self: self.config.color_weight)
    radius = property(lambda self: self.config.radius)
    eps = property(lambda self: self.config.eps)
    latent_update = property(lambda self: self.config.latent_update)

    # latents <-> VAE space, as the pipelines do it
    def _stats(self, like):
        cfg = self.vae.config
        mean, std = getattr(cfg, "latents_mean", None), getattr(cfg, "latents_std", None)
        if mean is None or std is None:
            return None
        c = like.shape[1]
        return (torch.tensor(mean, device=like.device, dtype=like.dtype).view(1, c, 1, 1),
                torch.tensor(std, device=like.device, dtype=like.dtype).view(1, c, 1, 1))

    def _to_vae(self, z):
        cfg, stats = self.vae.config, self._stats(z)
        if stats is not None:
            return z * stats[1] / cfg.scaling_factor + stats[0]
        return z / cfg.scaling_factor + (getattr(cfg, "shift_factor", None) or 0.0)

    def _from_vae(self, h):
        cfg, stats = self.vae.config, self._stats(h)
        if stats is not None:
            return (h - stats[0]) * cfg.scaling_factor / stats[1]
        return (h - (getattr(cfg, "shift_factor", None) or 0.0)) * cfg.scaling_factor

    @torch.no_grad()
    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Latents (B, C, h, w) -> images (B, 3, H, W) float32 in [0, 1]."""
        with offload_link_suspended(self.vae):
            out = self.decode_fn(self._to_vae(z).to(self.vae.dtype), return_dict=False)[0]
        return ((out.float() + 1) / 2).nan_to_num(0.5).clamp(0, 1)

    @torch.no_grad()
    def encode(self, img: torch.Tensor) -> torch.Tensor:
        """Images in [0, 1] -> latents (posterior mean: deterministic, no extra noise per guided step)."""
        with offload_link_suspended(self.vae):
            enc = self.vae.encode((img * 2 - 1).to(self.vae.dtype))
        dist = getattr(enc, "latent_dist", None)
        h = dist.mean if dist is not None else (enc.latents if hasattr(enc, "latents") else enc[0])
        return self._from_vae(h.float())

    def _resized_source(self, shape, device):
        src = self.source.to(device)
        if tuple(src.shape[-2:]) != tuple(shape[-2:]):
            if self.check_aspect:
                aspect_check(tuple(src.shape[-2:]), tuple(shape[-2:]))
            src = F.interpolate(src, size=tuple(shape[-2:]), mode="bicubic", antialias=True,
                                align_corners=False).clamp(0, 1)
        return src

    def _mask_at(self, shape, device):
        if self.mask is None:
            return None
        m = self.mask.to(device)
        if tuple(m.shape[-2:]) != tuple(shape[-2:]):
            m = F.interpolate(m, size=tuple(shape[-2:]), mode="bilinear", align_corners=False).clamp(0, 1)
        return m

    def reference(self, shape, device) -> torch.Tensor:
        """The source's VAE round trip at ``shape``'s size: the in-loop target (SPL does not chase detail
        the VAE cannot hold)."""
        key = (tuple(shape[-2:]), str(device))
        if key not in self._references:
            src = self._resized_source(shape, device)
            self._references[key] = self.decode(self.encode(src))
        return self._references[key]

    def restore(self, target: torch.Tensor, image: torch.Tensor, steps: int) -> torch.Tensor:
        b, s = image.shape[0], target.shape[0]
        if s == 1:
            target = target.expand(b, -1, -1, -1)
        elif s != b:
            if b % s:
                raise ValueError(f"{s} source images cannot be matched to a batch of {b} outputs")
            target = target.repeat(b // s, 1, 1, 1)
        return restore_structure(target, image, mask=self._mask_at(image.shape, image.device), steps=steps,
                                 config=self.config.loss, value_range=(0.0, 1.0))

    @torch.no_grad()
    def optimise_latent(self, x0: torch.Tensor) -> torch.Tensor:
        """One guided SPL stage: decode ``x0``, restore against the reference, encode. Returns float32 latents."""
        x0 = x0.float()
        img = self.decode(x0)
        opt = self.restore(self.reference(img.shape, img.device), img, self.config.steps_per_guidance)
        if self.config.latent_update == "replace":  # the published code: the re-encoded image is the new x0 ...
            new = self.encode(opt)
            if self.mask is None:
                return new
            # ... but only inside the mask: outside it the latent stays bit-exact, so the VAE round trip
            # cannot blur the region the user left free (the loss there is zero anyway)
            m = F.interpolate(self._mask_at(img.shape, x0.device), size=tuple(x0.shape[-2:]), mode="area")
            return x0 + m * (new - x0)
        # only the optimisation's own change goes back into the latent: with no change x0 stays bit-exact
        both = self.encode(torch.cat([opt, img]))
        return x0 + (both[: len(img)] - both[len(img):])

    @torch.no_grad()
    def post_process(self, decoded: torch.Tensor) -> torch.Tensor:
        """Post-processing: the decoded output (in [-1, 1]) restored against the source itself."""
        img = ((decoded.float() + 1) / 2).nan_to_num(0.5).clamp(0, 1)
        out = self.restore(self._resized_source(img.shape, img.device), img, self.config.post_steps)
        return (out * 2 - 1).to(decoded.dtype)
