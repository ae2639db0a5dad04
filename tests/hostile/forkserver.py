"""A start-up server for the hostile corpus: one Python process that imports torch and the `vision` command once,
then runs each case in a process of its own forked from it, so a case pays fork (milliseconds) instead of the
interpreter's and torch's start-up (4-8 s on 2 busy cores).

Each case is still a real process with its own exit code, signals, memory and interpreter shutdown: the child
calls setsid(), takes the case's working directory, stdin from /dev/null and stdout / stderr into
the case's files, sets ``sys.argv`` as ``python -m vision.pipelines.cli ARGS`` would, and runs the command from
the top of this script, so an uncaught exception prints Python's own traceback and exits 1, ``sys.exit`` gives its
code and the exit handlers run as in any interpreter. Its peak memory (``os.wait4``'s ru_maxrss) counts the pages
it inherited from the server (torch imported: about 0.65 GB), so it is an upper bound of the case's own.

Protocol: one JSON request per line on stdin::

    {"argv": [...], "cwd": DIR, "env": {...}, "stdout": FILE, "stderr": FILE, "timeout": S, "sigterm_after": S|null,
     "sigterm_when": FILE|null}

and two JSON replies on stdout: ``{"pid": PID}`` once it is forked, ``{"rc": CODE, "peak": BYTES, "timed_out": BOOL}``
once it has ended (``rc`` negative for a signal, as in :mod:`subprocess`). Arguments of the script name modules to
import once beside torch and the `vision` command. Cases whose environment must be read at import time run as plain subprocesses
instead (see ``tests/hostile/corpus.py``).
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time


def _wait(pid: int, timeout: float, sigterm_after: float | None, sigterm_when: str | None = None
          ) -> tuple[int, int, bool]:
    """(exit code, peak resident bytes, timed out) of child ``pid``; SIGTERM at ``sigterm_after`` s or once the file
    ``sigterm_when`` exists, whichever comes first, SIGKILL to its session at ``timeout`` s."""
    start = time.monotonic()
    termed = sigterm_after is None
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024, False
        now = time.monotonic() - start
        if not termed and (now >= sigterm_after or (sigterm_when is not None and os.path.exists(sigterm_when))):
            termed = True
            try:
                os.kill(pid, signal.SIGTERM)  # the command itself, as a job scheduler would
            except ProcessLookupError:
                pass
        if now > timeout:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _, status, usage = os.wait4(pid, 0)
            return os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024, True
        time.sleep(0.02)


def _become_the_case(req: dict) -> None:
    """In the forked child: the process state ``python -m vision.pipelines.cli`` would start with."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    os.close(null)
    for sig in (signal.SIGTERM, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    sys.argv = ["-m", *req["argv"]]  # runpy puts the module's file name first, as -m does
    sys.path[0] = req["cwd"]  # -m puts the working directory first


class Server:
    """The client side: start a server with ``env`` (its children's base environment; ``preload``: more modules to
    import once), then run cases one at a time (:meth:`run`, or :meth:`start` and the returned :class:`Running`);
    :meth:`close` ends it."""

    def __init__(self, env: dict, preload=()):
        import subprocess

        self.proc = subprocess.Popen([sys.executable, __file__, *preload], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, text=True, cwd=os.path.dirname(__file__))
        ready = self.proc.stdout.readline()
        if not ready.startswith('{"ready"'):
            self.close()
            raise RuntimeError(f"the fork server did not start: {ready!r}")

    def start(self, argv: list, cwd, env: dict, stdout, stderr, timeout: float, sigterm_after=None,
              sigterm_when=None) -> "Running":
        """Start ``python -m vision.pipelines.cli ARGV`` (forked); stdout and stderr go to those files."""
        req = dict(argv=list(argv), cwd=str(cwd), env=dict(env), stdout=str(stdout), stderr=str(stderr),
                   timeout=timeout, sigterm_after=sigterm_after, sigterm_when=sigterm_when)
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        return Running(self.proc.stdout)

    def run(self, *args, **kw):
        """(exit code, peak resident bytes, timed out) of :meth:`start`'s process, once it has ended."""
        return self.start(*args, **kw).wait()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


class Running:
    """A case started by :meth:`Server.start`: its ``pid`` (signal it with :meth:`send_signal`), :meth:`poll` and
    :meth:`wait` as :class:`subprocess.Popen`'s, but :meth:`wait` gives (exit code, peak bytes, timed out)."""

    def __init__(self, replies):
        import threading

        started = replies.readline()
        if not started.startswith('{"pid"'):
            raise RuntimeError(f"the fork server did not start the case: {started!r}")
        self.pid = json.loads(started)["pid"]
        self.returncode = None
        self._reply, self._done = None, threading.Event()
        threading.Thread(target=self._read, args=(replies,), daemon=True).start()

    def _read(self, replies) -> None:
        line = replies.readline()
        self._reply = json.loads(line) if line else {"rc": None, "peak": 0, "timed_out": False}
        self.returncode = self._reply["rc"]
        self._done.set()

    def poll(self):
        return self.returncode if self._done.is_set() else None

    def send_signal(self, sig: int) -> None:
        if not self._done.is_set():  # the server reaps the case before it replies: the pid is still the case's
            os.kill(self.pid, sig)

    def wait(self, timeout: float | None = None):
        if not self._done.wait(timeout):
            raise TimeoutError(f"case {self.pid} still running after {timeout} s")
        return self._reply["rc"], self._reply["peak"], self._reply["timed_out"]


def serve() -> dict | None:
    """Answer requests until stdin ends (returns None); in a forked child, return its request."""
    for line in sys.stdin:
        req = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _become_the_case(req)
            return req
        print(json.dumps({"pid": pid}), flush=True)
        rc, peak, timed_out = _wait(pid, req["timeout"], req.get("sigterm_after"), req.get("sigterm_when"))
        print(json.dumps({"rc": rc, "peak": peak, "timed_out": timed_out}), flush=True)
    return None


if __name__ == "__main__":
    import torch  # noqa: F401 - what every case would import first
    import torch._dynamo  # noqa: F401 - imported by the denoisers' kernels runtime
    import vision.pipelines.cli  # noqa: F401

    for name in sys.argv[1:]:  # what the caller's cases import anyway (timm, peft, ...)
        __import__(name)

    print(json.dumps({"ready": os.getpid()}), flush=True)
    if serve() is not None:
        # the forked case, from here on an ordinary `vision` process: the module `python -m` would run
        import runpy

        runpy.run_module("vision.pipelines.cli", run_name="__main__", alter_sys=True)
