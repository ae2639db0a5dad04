"""The ``vision`` command line.

One plug-in protocol for commands and benches (``vision bench WHAT``), in :mod:`vision.pipelines.plugins`: a module
exposes ``DESCRIPTION`` (and optionally a shorter ``HELP`` for the command list, and ``EPILOG`` with examples),
``add_arguments(parser)`` and ``run(args) -> int``; it is named in ``COMMANDS`` (or ``bench.BENCHES``) and imported
only when the command line is built, so a missing optional dependency of one command never breaks the others.
``vision COMMAND ...`` builds only that command's parser (the others are listed by name), so a command starts
without importing what its siblings need (torch, for most).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from vision.pipelines.plugins import add_plugin

# name -> module (DESCRIPTION, add_arguments, run); later commands add their line here.
COMMANDS = {
    "demo": "vision.pipelines.cli.demo",
    "bench": "vision.pipelines.bench",
    "restore-structure": "vision.pipelines.cli.restore_structure",
    "render-scenes": "vision.pipelines.cli.render_scenes",
    "edit": "vision.pipelines.cli.edit",
    "denoise": "vision.pipelines.cli.denoise",
    "finetune": "vision.pipelines.cli.finetune",
    "predict": "vision.pipelines.cli.predict",
    "evaluate": "vision.pipelines.cli.evaluate",
    "train-denoiser": "vision.pipelines.cli.train_denoiser",
    "blender-addon": "vision.pipelines.cli.blender_addon",
}

EPILOG = """examples:
  vision demo                      # run every bundled demo, results in ./vision-demo/
  vision bench guided-filter       # time ours against OpenCV, kornia and a cumsum implementation
  vision blender-addon -o vision_denoise.zip   # the Blender add-on that sets up and denoises animations
  vision COMMAND --help            # options and an example for each command
"""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``vision`` parser; with ``only`` (a command name) the other commands are placeholders."""
    parser = argparse.ArgumentParser(
        prog="vision",
        description="locallinear-vision: local linear models as fast operators, and the tools built on them.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from vision import __version__

    parser.add_argument("--version", action="version", version=f"locallinear-vision {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name)
            continue
        try:
            add_plugin(sub, name, importlib.import_module(module))
        except ImportError as err:  # a missing optional dependency disables this command only
            q = sub.add_parser(name, help=f"(unavailable: {err})")
            q.set_defaults(func=lambda args, err=err: print(f"vision: this command is unavailable here: {err}") or 2)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        if argv is None:  # the process is the command's own (not a caller's that runs main in process)
            tune_for_denoising(words)
        parser = build_parser(words[0] if words and words[0] in COMMANDS else None)
        args = parser.parse_args(words)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        level = "debug" if getattr(args, "verbose", False) else "warning" if getattr(args, "quiet", False) else None
        try:
            if level is None:
                return int(args.func(args) or 0)
            from vision.kernels.runtime import verbosity

            with verbosity(level):  # this command only (main may run in a caller's process)
                return int(args.func(args) or 0)
        except (ValueError, FileNotFoundError, FileExistsError) as err:
            # Bad input is the user's to fix: one clear line, no traceback.
            print(f"vision {args.command}: error: {err}", file=sys.stderr)
            return 2
        except OSError as err:  # permissions, full disks, folders where files belong: the system's words
            where = f"{err.filename}: " if getattr(err, "filename", None) else ""
            print(f"vision {args.command}: error: {where}{err.strerror or err}", file=sys.stderr)
            return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


# commands whose CPU work alternates between PyTorch's OpenMP threads and numba's (TBB) threads: the denoisers
DENOISING_COMMANDS = (("denoise",), ("bench", "denoise"))


def tune_for_denoising(words: list[str]) -> None:
    """Tune this process for the denoising commands (``words``: the command line), before torch is loaded:

    - ``OMP_WAIT_POLICY=PASSIVE`` unless the environment says otherwise (OpenMP reads it once, at load): FLNR on
      CPU runs its network in PyTorch and its per-pixel stages as numba loops on another thread pool, and by
      default PyTorch's OpenMP workers spin for a while after every op on the cores the numba loops then need;
    - glibc's malloc keeps freed memory for reuse (``mallopt``: no mmap below 256 MB, no trimming): each frame
      allocates the same few-MB tensors again, and fresh pages from the kernel cost page faults on first touch.

    At 1280x720 on 2 threads: 67 ms per frame, 58 with the first, 42-46 with both (BENCHMARKS.md, 2026-12-05)."""
    if not any(tuple(words[:len(c)]) == c for c in DENOISING_COMMANDS):
        return
    if "torch" not in sys.modules and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL("libc.so.6")
            libc.mallopt(-3, 256 << 20)  # M_MMAP_THRESHOLD
            libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD
        except (OSError, AttributeError):  # not glibc (musl): its allocator as it is
            pass


def torch_device(text: str | None, flag: str = "--device"):
    """The torch device a ``--device`` value names (None: cuda when available, else cpu), refused with
    one line when it is malformed or absent from this machine, before anything is loaded onto it."""
    import torch

    if text is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise ValueError(f"{flag} {text}: not a device name (use cpu, cuda, cuda:N or mps)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{flag} {text}: no CUDA GPU is usable here; use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"{flag} {text}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif device.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ValueError(f"{flag} {text}: MPS is not available here; use --device cpu")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"{flag} {text}: unsupported device type; use cpu, cuda or mps")
    return device


def read_input(reader, path, flag: str, what: str = "image"):
    """``reader(path)`` with any failure to decode the file reported as one line naming ``flag`` and the
    path as given (decoders raise ValueError, RuntimeError or OSError with their own wording)."""
    try:
        return reader(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"{flag} {path}: no such {what} file") from None
    except (ValueError, RuntimeError, OSError) as err:
        text = (str(err).strip().splitlines() or [type(err).__name__])[0]
        if text.startswith(f"{path}: "):  # the decoder named the file already
            raise ValueError(f"{flag} {text}") from None
        raise ValueError(f"{flag} {path}: not a readable {what} ({text})") from None


if __name__ == "__main__":
    sys.exit(main())
