"""SIGTERM ends a `vision` process within seconds, even while numba's threads are busy: the command unwinds (its
outputs are safe), then the process leaves without the interpreter's shutdown, whose exit handlers (a native thread
pool's finalizer, such as numba's TBB layer's) can spin for ever."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

# a command of our own plug-in protocol, run by `vision`'s main: a numba-parallel loop, for ever, under the same
# SIGTERM handling as `vision denoise`; an exit handler stands in for a finalizer that does not return
COMMAND = '''
DESCRIPTION = "spin in a numba-parallel loop until stopped"


def add_arguments(p):
    p.add_argument("-q", "--quiet", action="store_true")


def run(args):
    import numpy as np

    from vision.kernels.runtime.jit import _numba
    from vision.pipelines.cli.denoise_io import exit_on_sigterm

    numba = _numba()

    @numba.njit(parallel=True, cache=False)
    def work(a):
        for i in numba.prange(a.shape[0]):
            for j in range(a.shape[1]):
                a[i, j] = a[i, j] * 0.5 + 1.0
        return a

    a = np.ones((512, 512))
    work(a)
    print("threading layer", numba.threading_layer(), flush=True)
    with exit_on_sigterm("spin"):
        print("ready", flush=True)
        while True:
            work(a)
'''

CHILD = '''
import atexit, sys, time
atexit.register(time.sleep, 120)  # an exit handler that does not return soon, as TBB's finalizer may not
sys.path.insert(0, sys.argv[1])
from vision.pipelines import cli
cli.COMMANDS["spin"] = "spin_command"
sys.argv = ["vision", "spin"]
cli.main()  # as the `vision` script calls it: the process is the command's own
'''


def _terminate(proc: subprocess.Popen, ready) -> tuple[int, float, str]:
    """``ready()`` (waits until ``proc`` is where the test wants it, asserting it got there), then SIGTERM: (exit
    code, seconds from the signal to the exit, stderr). ``proc`` is killed if it is still running after that."""
    try:
        ready()
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=10)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return code, took, proc.stderr.read()


@pytest.mark.slow
def test_sigterm_during_a_numba_parallel_loop_exits_143_within_seconds(tmp_path):
    pytest.importorskip("numba")
    (tmp_path / "spin_command.py").write_text(COMMAND)
    env = dict(os.environ, OMP_NUM_THREADS="2", NUMBA_NUM_THREADS="2")
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CHILD), str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)

    def ready():
        lines = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.strip())
            if line.strip() == "ready":
                break
        assert lines and lines[-1] == "ready", (lines, proc.stderr.read() if proc.poll() is not None else "")
        time.sleep(0.5)  # well inside the loop

    code, took, err = _terminate(proc, ready)
    assert code == 143 and took < 5, (code, took, err)
    assert "terminated (SIGTERM)" in err and "Traceback" not in err, err


def test_a_caller_of_main_gets_the_exit_instead_of_a_process_exit(monkeypatch):
    """main(argv) in a caller's process never ends that process: the SIGTERM exit reaches the caller."""
    from vision.pipelines import cli
    from vision.pipelines.cli.denoise_io import Terminated

    def stopped(args):
        raise Terminated(143)

    monkeypatch.setattr(cli, "_main", lambda argv: stopped(argv))
    with pytest.raises(Terminated) as caught:
        cli.main(["denoise"])
    assert caught.value.code == 143
    left = []
    monkeypatch.setattr(cli.os, "_exit", left.append)
    monkeypatch.setattr(cli.sys, "argv", ["vision", "denoise"])
    with pytest.raises(Terminated):
        cli.main()  # (os._exit is a stub here: it returns)
    assert left == [143]


def test_a_sigterm_that_numba_turned_into_a_system_error_still_exits_143(monkeypatch):
    """A handler's exception raised inside numba's dispatcher surfaces as a SystemError whose context is it."""
    from vision.pipelines import cli
    from vision.pipelines.cli.denoise_io import Terminated

    def interrupted(argv):
        try:
            raise Terminated(143)
        except Terminated:
            raise SystemError("CPUDispatcher(<function work>) returned a result with an exception set")

    monkeypatch.setattr(cli, "_main", interrupted)
    with pytest.raises(Terminated):
        cli.main(["denoise"])
    with pytest.raises(SystemError):  # anything else is left alone
        monkeypatch.setattr(cli, "_main", lambda argv: (_ for _ in ()).throw(SystemError("other")))
        cli.main(["denoise"])


@pytest.mark.slow
def test_sigterm_stops_a_long_temporal_denoise_within_seconds(tmp_path):
    """`vision denoise --temporal` over 2,000 tiny frames (with albedo, normal and a Vector pass), stopped part-way: exit 143 within seconds, no temporary
    file left, every output written whole."""
    from tiny_sequence import tiny_sequence
    from vision.data.exr import read_exr

    frames = tiny_sequence(tmp_path / "frames", 2000)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "vision.pipelines.cli", "denoise", frames, "-o", str(out),
                             "--temporal", "--model", "flr", "-q"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)

    def ready():
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if out.is_dir() and len([p for p in out.iterdir() if p.suffix == ".exr"]) >= 50:
                break
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()

    code, took, err = _terminate(proc, ready)
    assert code == 143 and took < 10, (code, took, err)
    assert "terminated (SIGTERM)" in err and "Traceback" not in err, err
    written = sorted(out.iterdir())
    assert 50 <= len(written) < 2000 and not [p for p in written if ".tmp" in p.name]
    for path in written[-3:]:
        assert set(read_exr(path)) >= {"R", "G", "B"}  # whole files


def test_a_sigterm_swallowed_inside_a_ctypes_callback_still_stops_the_run(capsys):
    """numba compiles through llvmlite, whose ctypes callbacks print an exception and carry on: a SIGTERM handled
    inside one raised into nothing, and `vision denoise --temporal` printed a traceback, went on to write every
    frame and exited 0. The watch remembers it, the frame loop's next check raises, and the dropped exception is
    not printed (the one line said it); other unraisable exceptions still reach the previous hook."""
    import ctypes

    from vision.pipelines.cli.denoise_io import Terminated, exit_on_sigterm

    def inside():  # the handler runs between these bytecodes, inside the callback
        os.kill(os.getpid(), signal.SIGTERM)
        end = time.monotonic() + 5
        while time.monotonic() < end:
            time.sleep(0.001)

    callback = ctypes.CFUNCTYPE(None)(inside)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated) as err:
        with exit_on_sigterm("denoise") as watch:
            callback()  # the exception is printed by ctypes and dropped: the block goes on
            assert watch.requested
            watch.check()
    assert err.value.code == 143
    assert signal.getsignal(signal.SIGTERM) is before  # the handler put back
    text = capsys.readouterr().err
    assert text.count("vision denoise: terminated (SIGTERM)") == 1
    assert "Traceback" not in text and "Exception ignored" not in text, text
    seen = []
    hook = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        with exit_on_sigterm("denoise"):
            ctypes.CFUNCTYPE(None)(lambda: 1 / 0)()  # not ours: passed on
    finally:
        sys.unraisablehook = hook
    assert [type(u.exc_value) for u in seen] == [ZeroDivisionError]


def test_a_sigterm_whose_stderr_is_busy_still_says_its_line_and_exits_143(capfd, monkeypatch):
    """A handler that runs while the interrupted code was writing to stderr (a progress bar's write cut short by the
    signal) finds the stream busy: printing raises "reentrant call", which replaced the handler's exit with a
    RuntimeError and a traceback. The line then goes straight to descriptor 2 and the run still exits 143."""
    from vision.pipelines.cli.denoise_io import Terminated, exit_on_sigterm

    class Busy:
        def write(self, text):
            raise RuntimeError("reentrant call inside <_io.BufferedWriter name='<stderr>'>")

        def flush(self):
            raise RuntimeError("reentrant call inside <_io.BufferedWriter name='<stderr>'>")

    monkeypatch.setattr(sys, "stderr", Busy())
    with pytest.raises(Terminated) as err:
        with exit_on_sigterm("denoise"):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises here
    monkeypatch.undo()
    assert err.value.code == 143
    assert capfd.readouterr().err.count("vision denoise: terminated (SIGTERM)") == 1


# reads one EXR once per position: the signal is sent to the process at the n-th line the reader runs in exr.py
# (its stream capture included), and the handler's outcome, the streams and descriptor 2 are looked at afterwards
AT_EVERY_LINE = '''
import json, os, signal, sys
from vision.data import exr
from vision.pipelines.cli.denoise_io import exit_on_sigterm

path, signum = sys.argv[1], getattr(signal, sys.argv[2])
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, whatever the parent ignores
stderr, stat = sys.stderr, os.fstat(2)
results = []
for n in range(1, 400):
    seen = [0]

    def tracer(frame, event, arg):
        if frame.f_code.co_filename != exr.__file__:
            return None

        def line(frame, event, arg):
            if event == "line":
                seen[0] += 1
                if seen[0] == n:
                    os.kill(os.getpid(), signum)
            return line
        return line

    outcome = "finished"
    try:
        with exit_on_sigterm("read"):
            sys.settrace(tracer)
            try:
                exr.read_exr(path)
            finally:
                sys.settrace(None)
    except BaseException as err:
        outcome = type(err).__name__
    if seen[0] < n:
        break
    same = sys.stderr is stderr and (os.fstat(2).st_ino, os.fstat(2).st_dev) == (stat.st_ino, stat.st_dev)
    results.append([outcome, same])
with open(sys.argv[3], "w") as f:  # not stdout: a torn capture would swallow it
    json.dump(results, f)
'''


@pytest.mark.parametrize("name, outcome, line", [("SIGTERM", "Terminated", "vision read: terminated (SIGTERM)"),
                                                 ("SIGINT", "KeyboardInterrupt", None)])
def test_a_signal_at_any_line_of_an_exr_read_reaches_its_handler_and_leaves_the_streams_whole(tmp_path, name,
                                                                                              outcome, line):
    """Reading an EXR swaps the process's stdout / stderr (and descriptors 1 and 2) to catch OpenEXR's own
    diagnostics. A SIGTERM whose handler ran half-way through that swap printed its one line into the capture and
    unwound with descriptor 2 still pointing at it: `vision denoise` exited 143 saying nothing. At whichever line
    of the reader the signal comes, its handler now runs (once), its line reaches the real stderr, and the streams
    are back."""
    import json

    from vision.data.exr import write_exr

    path = tmp_path / "one.exr"
    write_exr(path, {c: np.full((4, 4), 0.5, np.float32) for c in "RGB"})
    report = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, "-c", AT_EVERY_LINE, str(path), name, str(report)], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(report.read_text())
    assert len(results) > 20  # lines of the reader, capture included
    assert all(same for _, same in results), results
    assert {o for o, _ in results} == {outcome}, results
    if line is not None:
        assert proc.stderr.count(line) == len(results), proc.stderr[-2000:]
