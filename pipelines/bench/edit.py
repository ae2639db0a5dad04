"""``vision bench edit``: the cost of one guided SPL stage against one UNet step, SD1.5 architectures.

Builds the real Stable Diffusion 1.5 UNet and VAE architectures from their configs with random weights
(nothing is downloaded; timing does not depend on the weights) and times, at the given resolution:
one UNet step (batch 2, as with classifier-free guidance; and batch 1, as with LCM) and one guided SPL
stage of :class:`vision.pipelines.editing.spl_guidance.LatentRestorer` (VAE decode, ``--spl-steps`` fused
SPL + colour optimisation steps, VAE encode). The target is an SPL stage <= 1 UNet step at fp16
on CUDA; on CPU only the ratio means anything.
"""
from __future__ import annotations

import time

from diffusers import AutoencoderKL, UNet2DConditionModel  # the [edit] extra: `vision bench edit` says so without it
import torch

from vision.pipelines.editing.spl_guidance import LatentRestorer

from .timing import format_time, print_table, resolve_device, set_threads, time_interleaved

# Stable Diffusion 1.5 (runwayml/stable-diffusion-v1-5) unet/config.json and vae/config.json
SD15_UNET = dict(sample_size=64, in_channels=4, out_channels=4, layers_per_block=2,
                 block_out_channels=(320, 640, 1280, 1280), cross_attention_dim=768, attention_head_dim=8,
                 down_block_types=("CrossAttnDownBlock2D",) * 3 + ("DownBlock2D",),
                 up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * 3, norm_num_groups=32)
SD15_VAE = dict(sample_size=512, in_channels=3, out_channels=3, latent_channels=4, layers_per_block=2,
                block_out_channels=(128, 256, 512, 512), down_block_types=("DownEncoderBlock2D",) * 4,
                up_block_types=("UpDecoderBlock2D",) * 4, norm_num_groups=32, scaling_factor=0.18215)


def run(args) -> int:
    if args.size % 8 or args.size < 64:
        raise ValueError(f"--size must be a multiple of 8 and at least 64, got {args.size}")
    for name, value in (("--repeat", args.repeat), ("--threads", args.threads), ("--spl-steps", args.spl_steps)):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    _, device = resolve_device(args.device)
    set_threads(args.threads)
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.float16 if device.type == "cuda" else torch.float32)
    torch.manual_seed(0)
    unet = UNet2DConditionModel(**SD15_UNET).to(device, dtype).eval().requires_grad_(False)
    vae = AutoencoderKL(**SD15_VAE).to(device, dtype).eval().requires_grad_(False)
    s, lat = args.size, args.size // 8
    source = torch.rand(1, 3, s, s)
    restorer = LatentRestorer(source, steps=args.spl_steps)
    restorer.vae, restorer.decode_fn = vae, vae.decode
    x0 = torch.randn(1, 4, lat, lat, device=device)
    text = torch.randn(2, 77, 768, device=device, dtype=dtype)
    z2 = torch.randn(2, 4, lat, lat, device=device, dtype=dtype)
    t = torch.tensor(500, device=device)
    restorer.reference((1, 3, s, s), device)  # cached once per size, as in sampling

    def unet_cfg():
        with torch.no_grad():
            unet(z2, t, encoder_hidden_states=text)

    def unet_one():
        with torch.no_grad():
            unet(z2[:1], t, encoder_hidden_states=text[:1])

    def spl_stage():
        restorer.optimise_latent(x0)

    def decode_only():
        restorer.decode(x0)

    print(f"SD1.5 architectures (random weights), {s} x {s}, {dtype}, {device}"
          + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""), flush=True)
    times = time_interleaved({"unet-cfg": unet_cfg, "unet-1": unet_one, "spl-stage": spl_stage,
                              "vae-decode": decode_only}, device=device, repeat=args.repeat,
                             budget=10.0 if device.type == "cpu" else 3.0,
                             clock=time.process_time if device.type == "cpu" else time.perf_counter)
    for key, value in times.items():
        if isinstance(value, Exception):
            raise RuntimeError(f"{key} failed: {value}")
    ref = times["unet-cfg"]
    rows = [
        {"what": "UNet step, batch 2 (CFG)", "time": format_time(times["unet-cfg"]), "ratio": "1.00"},
        {"what": "UNet step, batch 1 (LCM)", "time": format_time(times["unet-1"]),
         "ratio": f"{times['unet-1'] / ref:.2f}"},
        {"what": f"SPL stage (decode + {args.spl_steps} steps + encode)", "time": format_time(times["spl-stage"]),
         "ratio": f"{times['spl-stage'] / ref:.2f}"},
        {"what": "  of which VAE decode", "time": format_time(times["vae-decode"]),
         "ratio": f"{times['vae-decode'] / ref:.2f}"},
    ]
    print_table(rows, ["what", "time", "ratio"], title="ratio = time / UNet step (batch 2)"
                + ("; CPU times are process CPU seconds (all threads), robust to other load"
                   if device.type == "cpu" else ""))
    verdict = times["spl-stage"] <= times["unet-cfg"]
    print(f"SPL stage / UNet step (CFG) = {times['spl-stage'] / ref:.2f}; "
          f"/ UNet step (batch 1) = {times['spl-stage'] / times['unet-1']:.2f}"
          + ("" if device.type == "cpu" else f"; target <= 1: {'met' if verdict else 'NOT met'}"))
    return 0
