"""What ``vision denoise`` tells its user: the setup each mode needs (a frame without it stops the run with one
line saying how to turn it on in Blender), warnings said once per run, and the progress stream
(``--progress json``: one JSON object per line on stdout, read by the Blender add-on and by farm scripts).

Example of the stream (one object per line; ``event`` says which)::

    {"event": "start", "frames": 3, "out": "out"}
    {"event": "info", "message": "[ViewLayer] color <- ViewLayer.Combined.RGB, ..."}
    {"event": "frame", "index": 1, "total": 3, "input": "f_0001.exr", "output": "out/f_0001.exr", "status": "denoised", "seconds": 0.41}
    {"event": "done", "denoised": 3, "skipped": 0, "warnings": 0, "out": "out", "summary": "denoised 3 frame(s), ..."}
"""
from __future__ import annotations

import json
import logging
import re
import sys

from tqdm import tqdm

from vision.data.fields import IN_BLENDER  # where each pass is turned on in Blender, said by the line that stops a run
from vision.kernels.runtime import get_verbosity

SAVE_AS = "saved as OpenEXR MultiLayer (Output Properties > Output > File Format)"
# what every mode needs: the regression's two main guides (Cycles' Denoising Data holds both, and depth)
NEEDED = ("albedo", "normal")


def missing_setup(rf, temporal: bool, phase, allow_no_guides: bool = False, static_camera: bool = False
                  ) -> str | None:
    """One line naming what the frame ``rf`` (:class:`vision.data.render_layers.RenderFile`) lacks for the mode and
    how to turn it on in Blender, or None when it has what the mode needs.

    Every mode needs albedo and normal (``--allow-no-guides`` lets a frame without them through: the regression then
    only blurs); ``--temporal`` also needs motion vectors (Cycles' Vector pass; ``--static-camera`` takes frames
    without them as a still shot), except with ``--phase``, whose temporal filter assumes a static camera anyway.

    Example:
        >>> missing_setup(read_render_file("plain.exr"), temporal=False, phase=None)   # doctest: +SKIP
        'no albedo, normal buffers: ... View Layer Properties > Passes > Data > Denoising Data, ...'
    """
    lacks: dict[str, list[str]] = {}
    for layer in rf.layers:
        names = [] if allow_no_guides else [g for g in NEEDED if g not in layer.sources]
        if temporal and phase is None and not static_camera and "motion" not in layer.sources:
            names.append("motion")
        for name in names:
            lacks.setdefault(name, []).append(layer.name)
    if not lacks:
        return None
    where = sorted({n for layers in lacks.values() for n in layers if n})
    layers = f" (view layer {', '.join(where)})" if where else ""
    parts, flags = [], []
    guides = [g for g in NEEDED if g in lacks]
    if guides:
        loss = "the denoiser would only blur" if len(guides) == len(NEEDED) else "the denoiser needs it"
        parts.append(f"no {' or '.join(guides)} buffer{layers}: {loss}; in Blender turn on {IN_BLENDER['albedo']}")
        flags.append(f"give {' and '.join('--' + g for g in guides)} PATTERN from other files, or --allow-no-guides "
                     "to denoise without them")
    if "motion" in lacks:
        where = "" if guides else layers
        parts.append(f"{'and no' if guides else 'no'} motion vectors for --temporal{where}; in Blender turn on "
                     f"{IN_BLENDER['motion']}")
        flags.append("--static-camera if neither the camera nor anything in view moves")
    return f"{'; '.join(parts)}, {SAVE_AS}; or {', or '.join(flags)}"


def _kind(text: str) -> str:
    """What makes two warnings the same kind: their words, without the numbers that change from frame to frame."""
    return re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", text)


class Report:
    """Where the run's lines go: human text (stdout for information, stderr for warnings) or, with
    ``--progress json``, one JSON object per line on stdout; warnings said once per run (the first frame that
    gives each kind is named; the last line counts the rest), none under ``-q`` (the summary counts them)."""

    def __init__(self, json_stream: bool = False, quiet: bool = False):
        self.json = json_stream
        self.quiet = quiet
        self.kinds: dict[str, list] = {}  # kind -> [first frame, first text, frames that gave it]
        self.count = 0

    def emit(self, event: str, **fields) -> None:
        print(json.dumps({"event": event, **fields}), file=sys.stdout, flush=True)

    def info(self, text: str) -> None:
        if self.json:
            self.emit("info", message=text)
        else:
            tqdm.write(f"vision denoise: {text}", file=sys.stdout)

    def warning(self, text: str, frame=None) -> None:
        """A warning, said the first time its kind comes (``frame`` named), counted the other times."""
        kind = _kind(text)
        self.count += 1
        seen = self.kinds.get(kind)
        if seen is not None:
            seen[2] += 1
            return
        self.kinds[kind] = [frame, text, 1]
        self._say(text if frame is None else f"{frame}: {text}")

    def _say(self, text: str) -> None:
        if self.quiet or get_verbosity() > logging.WARNING:
            return
        if self.json:
            self.emit("warning", message=text)
        else:
            tqdm.write(f"vision denoise: warning: {text}", file=sys.stderr)

    def finish(self) -> str:
        """Say how many more frames gave each warning already said; returns the summary's clause on warnings."""
        for frame, text, times in self.kinds.values():
            if times > 1:
                self._say(f"{times - 1} more frame(s) after {frame} gave the same warning ({text[:60]}...)")
        if self.quiet and self.count:
            return f"; {self.count} warning(s) not shown (-q)"
        return ""
