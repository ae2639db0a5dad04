"""Running ``vision denoise`` in a background process and reading its progress stream.

Pure Python, without ``bpy``: Blender's Python has no torch, so the add-on starts the ``vision`` command
(installed with locallinear-vision in any Python) and reads ``--progress json`` (one JSON object per line on
stdout). A Cancel stops the command with SIGTERM, on which it removes its unfinished output file and exits;
the frames already written stay.

Example::

    job = Job(denoise_command("vision", ["/r/0001.exr", "/r/0002.exr"], "/r/denoised", temporal=True))
    while job.running():
        for event in job.poll():
            print(event)          # {"event": "frame", "index": 1, "total": 2, ...}
        time.sleep(0.1)
    print(job.returncode, job.error)
"""
from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time


def find_vision(configured: str = "") -> str | None:
    """The ``vision`` executable: ``configured`` when given (a path, or a name looked up on PATH), else ``vision``
    on PATH; None when it does not exist."""
    name = (configured or "").strip() or "vision"
    if os.sep in name or (os.altsep and os.altsep in name):
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    return shutil.which(name)


def child_env() -> dict:
    """The environment for the command: Blender's own Python settings removed, so ``vision`` runs on its own."""
    env = dict(os.environ)
    for key in ("PYTHONHOME", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONNOUSERSITE"):
        env.pop(key, None)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def check_vision(configured: str = "", timeout: float = 120.0) -> tuple[bool, str]:
    """(works, one line): whether ``vision --version`` runs from the configured path (the preferences' Test)."""
    exe = find_vision(configured)
    if exe is None:
        where = configured.strip() or "vision on PATH"
        return False, (f"{where}: not found; install locallinear-vision (pip install locallinear-vision) and set "
                       "its vision command in the add-on's preferences")
    try:
        done = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=timeout, env=child_env())
    except (OSError, subprocess.TimeoutExpired) as err:
        return False, f"{exe}: could not run ({err})"
    text = (done.stdout or done.stderr).strip().splitlines()
    if done.returncode != 0:
        return False, f"{exe}: exit {done.returncode}: {text[-1] if text else 'no output'}"
    return True, f"{exe}: {text[0] if text else 'ok'}"


def denoise_command(vision: str, frames: list[str], out: str, temporal: bool, extra: list[str] | None = None
                    ) -> list[str]:
    """The argument list of one ``vision denoise`` run with the progress stream."""
    argv = [vision, "denoise", *frames, "-o", out, "--progress", "json"]
    if temporal:
        argv.append("--temporal")
    return argv + list(extra or [])


class Job:
    """One background ``vision`` process: :meth:`poll` returns the progress events that came since the last call
    (dicts; stdout lines that are not JSON are ignored), :meth:`cancel` stops it, :attr:`error` is the command's
    last error line."""

    def __init__(self, argv: list[str]):
        flags = {}
        if sys.platform == "win32":
            flags["creationflags"] = subprocess.CREATE_NEW_PROCESS_GROUP
        self.argv = argv
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
                                     env=child_env(), **flags)
        self.lines: queue.Queue = queue.Queue()
        self.stderr: list[str] = []
        self.cancelled = False
        self.done = 0
        self.total = 0
        self.outputs: list[str] = []
        self.warnings: list[str] = []
        self.summary = ""
        self.threads = [threading.Thread(target=self._read, args=(self.proc.stdout, True), daemon=True),
                        threading.Thread(target=self._read, args=(self.proc.stderr, False), daemon=True)]
        for t in self.threads:
            t.start()

    def _read(self, stream, is_stdout: bool) -> None:
        for line in stream:
            if is_stdout:
                self.lines.put(line)
            else:
                self.stderr.append(line.rstrip("\n"))
        stream.close()

    def poll(self) -> list[dict]:
        events = []
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                break
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            kind = event.get("event")
            if kind == "start":
                self.total = int(event.get("frames", 0))
            elif kind == "frame" and event.get("output") and event.get("status") in ("denoised", "skipped"):
                self.done += 1
                self.outputs.append(event["output"])
            elif kind == "warning":
                self.warnings.append(str(event.get("message", "")))
            elif kind == "done":
                self.summary = str(event.get("summary", ""))
            events.append(event)
        return events

    def running(self) -> bool:
        return self.proc.poll() is None or any(t.is_alive() for t in self.threads) or not self.lines.empty()

    @property
    def returncode(self):
        return self.proc.poll()

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 0.0

    @property
    def error(self) -> str:
        """The command's error line (``vision denoise: error: ...``), else its last line on stderr."""
        lines = [line for line in self.stderr if line.strip() and "\r" not in line and "frame/s]" not in line]
        errors = [line for line in lines if ": error:" in line or line.startswith("Traceback")]
        return (errors or lines or [""])[-1]

    def cancel(self, wait: float = 30.0) -> None:
        """Stop the command: SIGTERM (it removes its unfinished file and exits), then a kill if it has not ended
        after ``wait`` seconds (0: only the signal, for a caller that keeps polling, such as Blender's UI)."""
        first = not self.cancelled
        self.cancelled = True
        if self.proc.poll() is not None or (not first and wait == 0):
            return
        try:
            if sys.platform == "win32":
                self.proc.send_signal(signal.CTRL_BREAK_EVENT)
            else:
                self.proc.send_signal(signal.SIGTERM)
            if wait:
                self.proc.wait(wait)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        except OSError:
            pass

    def wait(self, poll=None, interval: float = 0.1) -> int:
        """Block until the command ends (``blender -b``), passing each event to ``poll`` when given."""
        while self.running():
            for event in self.poll():
                if poll is not None:
                    poll(event)
            time.sleep(interval)
        for event in self.poll():
            if poll is not None:
                poll(event)
        return self.proc.wait()
