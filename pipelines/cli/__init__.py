"""The ``vision`` command line.

One plug-in protocol for commands and benches (``vision bench WHAT``), in :mod:`vision.pipelines.plugins`: a module
exposes ``DESCRIPTION`` (and optionally a shorter ``HELP`` for the command list, and ``EPILOG`` with examples),
``add_arguments(parser)`` and ``run(args) -> int``; it is named in ``COMMANDS`` (or ``bench.BENCHES``) and imported
only when the command line is built, so a missing optional dependency of one command never breaks the others.
``vision COMMAND ...`` builds only that command's parser (the others are listed by name), so a command starts
without importing what its siblings need (torch, for most). A command whose product's extra is not installed says
which in one line (``vision edit needs the [edit] extra ...: pip install "locallinear-vision[edit]"``) and exits
with 2 (:mod:`vision.pipelines.extras`).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from vision.pipelines.extras import missing_extra
from vision.pipelines.plugins import Parser, add_plugin
from vision import __version__

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
    parser = Parser(
        prog="vision",
        description="locallinear-vision: local linear models as fast operators, and the tools built on them.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )

    parser.add_argument("--version", action="version", version=f"locallinear-vision {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name)
            continue
        try:
            add_plugin(sub, name, importlib.import_module(module))
        except ImportError as err:  # a missing optional dependency disables this command only
            line = missing_extra((name,), err)
            q = sub.add_parser(name, help=f"(unavailable: {line or err})", description=line)
            q.set_defaults(func=_unavailable, import_error=err)
    return parser


def _parse(parser: argparse.ArgumentParser, words: list[str]) -> argparse.Namespace:
    """``parser.parse_args(words)``, except that words no option takes are refused by the (sub)command they were
    given to (``vision predict: error: unrecognized arguments: --bogus (options: vision predict --help)``), not by
    ``vision`` itself as argparse does."""
    args, extra = parser.parse_known_args(words)
    if extra:
        _innermost(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _innermost(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command ``args`` ran: ``vision``'s, a command's or a bench's."""
    while True:
        chosen = [a.choices[getattr(args, a.dest)] for a in parser._actions
                  if isinstance(a, argparse._SubParsersAction) and getattr(args, a.dest, None) in a.choices]
        if not chosen:
            return parser
        parser = chosen[0]


def _unavailable(args) -> int:
    raise args.import_error  # main reports it: the extra to install, or the import error itself


def _words(args) -> tuple[str, ...]:
    """The command's words (``("edit",)``, ``("bench", "denoise")``), for the lines that name the command."""
    what = getattr(args, "what", None)
    return (args.command,) + ((what,) if isinstance(what, str) else ())


def main(argv: list[str] | None = None) -> int:
    """Run ``vision`` with ``argv`` (default: this process's command line) and return its exit code. In a
    process of its own (``argv`` None), a command stopped by SIGTERM ends the process here, see :func:`leave_now`."""
    try:
        return _main(argv)
    except BaseException as err:
        stop = _termination(err)
        if stop is None:
            raise
        if argv is None:
            leave_now(stop.code if isinstance(stop.code, int) else 1)
        if stop is err:
            raise
        raise stop from None  # a caller sees the SIGTERM exit, not what it interrupted


def _termination(err: BaseException | None) -> BaseException | None:
    """The SIGTERM exit (an exception with ``leave_now``) that ``err`` is or carries. A signal handler's exception
    raised while numba's dispatcher was running comes out as a SystemError ("returned a result with an exception
    set") whose context is the handler's exception."""
    seen = set()
    while err is not None and id(err) not in seen:
        if getattr(err, "leave_now", False):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def leave_now(code: int) -> None:
    """End this process with ``code`` at once: flush stdout and stderr, then ``os._exit``, skipping the
    interpreter's shutdown. Used after SIGTERM, once the command has unwound (its ``finally`` blocks removed
    unfinished outputs): the shutdown runs exit handlers such as numba's TBB finalizer, which can spin for ever
    when TBB's workers do not come back, so a terminated process would never end."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a broken pipe: nothing more to say
            pass
    os._exit(code)


def _main(argv: list[str] | None) -> int:
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        if argv is None:  # the process is the command's own (not a caller's that runs main in process)
            tune_for_denoising(words)
        parser = build_parser(words[0] if words and words[0] in COMMANDS else None)
        args = _parse(parser, words)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        level = "debug" if getattr(args, "verbose", False) else "warning" if getattr(args, "quiet", False) else None
        prog = _innermost(parser, args).prog  # "vision bench denoise": the command every line below names
        try:
            if level is None:
                return int(args.func(args) or 0)
            # lazy: vision.kernels.runtime loads torch, which `vision blender-addon` never needs
            from vision.kernels.runtime import verbosity

            with verbosity(level):  # this command only (main may run in a caller's process)
                return int(args.func(args) or 0)
        except ImportError as err:  # a product's extra not installed: which one, in one line
            line = missing_extra(_words(args), err)
            if line is None and getattr(args, "import_error", None) is err:  # the command's module did not import
                line = f"{prog}: unavailable here: {err}"
            if line is None:  # not a missing extra: a fault of ours, with its traceback
                raise
            print(line, file=sys.stderr)
            return 2
        except (ValueError, FileNotFoundError, FileExistsError) as err:
            # Bad input is the user's to fix: one clear line, no traceback.
            print(f"{prog}: error: {err}", file=sys.stderr)
            return 2
        except OSError as err:  # permissions, full disks, folders where files belong: the system's words
            where = f"{err.filename}: " if getattr(err, "filename", None) else ""
            print(f"{prog}: error: {where}{err.strerror or err}", file=sys.stderr)
            return 2
        except RuntimeError as err:  # Path.resolve's way (before Python 3.13) to say that links lead in a circle
            if not str(err).startswith("Symlink loop from "):
                raise
            where = str(err)[len("Symlink loop from "):]
            print(f"{prog}: error: {where}: symbolic links that lead to each other (a loop)",
                  file=sys.stderr)
            return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


# commands whose CPU work alternates between PyTorch's OpenMP threads and numba's threads: the denoisers
DENOISING_COMMANDS = (("denoise",), ("bench", "denoise"), ("bench", "denoise-sequences"))


def tune_for_denoising(words: list[str]) -> None:
    """Tune this process for the denoising commands (``words``: the command line), before torch is loaded:

    - ``OMP_WAIT_POLICY=PASSIVE`` unless the environment says otherwise (OpenMP reads it once, at load): FLNR on
      CPU runs its network in PyTorch and its per-pixel stages as numba loops on another thread pool, and by
      default PyTorch's OpenMP workers spin for a while after every op on the cores the numba loops then need;
    - glibc's malloc keeps freed memory for reuse (``mallopt``: no mmap below 256 MB, no trimming): each frame
      allocates the same few-MB tensors again, and fresh pages from the kernel cost page faults on first touch.

    At 1280x720 on 2 threads: 67 ms per frame, 58 with the first, 42-46 with both (CHANGELOG.md, 0.3.0)."""
    if not any(tuple(words[:len(c)]) == c for c in DENOISING_COMMANDS):
        return
    if "torch" not in sys.modules and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    if sys.platform.startswith("linux"):
        import ctypes  # lazy: 3-9 ms that `vision --help` and the other commands start without

        try:
            libc = ctypes.CDLL("libc.so.6")
            libc.mallopt(-3, 256 << 20)  # M_MMAP_THRESHOLD
            libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD
        except (OSError, AttributeError):  # not glibc (musl): its allocator as it is
            pass


def torch_device(text: str | None, flag: str = "--device"):
    """The torch device a ``--device`` value names (None: cuda when available, else cpu), refused with
    one line when it is malformed or absent from this machine, before anything is loaded onto it."""
    import torch  # lazy: `vision COMMAND --help` builds the parsers without torch

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
