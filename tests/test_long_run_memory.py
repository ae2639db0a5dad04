"""A long ``vision denoise --temporal`` run keeps a flat memory: 3,000 frames grow the process's resident memory by
less than 50 MB after its first 100 (a native leak of 65 KB a frame would add 190 MB)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

FRAMES = 3000
SETTLED = 100  # frames after which the process has its working set (JIT dispatch, allocator pools, caches)
BOUND_MB = 50.0
EVERY = 100  # frames between two readings of the process's memory


def _memory(pid: int) -> dict[str, float] | None:
    """Resident memory of process ``pid`` in MB from /proc: ``VmRSS`` (all of it), ``VmHWM`` (its peak so far) and
    ``RssAnon`` (the heap, without the pages of mapped files such as shared libraries); None once it has gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return {k: int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM", "RssAnon")}
    except (OSError, KeyError, ValueError):
        return None


@pytest.mark.slow  # 3,000 frames: 65-80 s on 2 cores at load 4-7; 12.6 ms a frame (~45 s) at load 2
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_3000_temporal_frames_grow_memory_by_less_than_50_mb_after_the_first_100(tmp_path):
    """The command users run (FLNR and the input blend, on frames with albedo, normal and a panning Vector pass,
    4 spp from the header), as a process of its own, read from /proc each time it reports 100 more frames. From
    frame 100 to the last reading (at least frame 2,500), its resident memory, its heap and its peak resident
    memory so far each grow by less than 50 MB.

    The peak is read while frames run: at exit the interpreter's shutdown pages in shared-library code (its
    destructors; about 130 MB of file-backed pages, the same after 300 frames as after 3,000), which is no
    growth."""
    from tiny_sequence import tiny_sequence

    frames = tiny_sequence(tmp_path / "frames", FRAMES)
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "VISION_BACKEND")}
    began = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "vision.pipelines.cli", "denoise", frames, "-o",
                             str(tmp_path / "out"), "--temporal", "--progress", "json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    readings: dict[int, dict[str, float]] = {}  # frame -> memory when it was reported
    events = []
    for line in proc.stdout:
        event = json.loads(line)
        events.append(event["event"])
        if event["event"] == "frame" and event["index"] >= SETTLED and event["index"] % EVERY == 0:
            reading = _memory(proc.pid)
            if reading is not None:
                readings[event["index"]] = reading
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    took = time.monotonic() - began
    err = proc.stderr.read()
    assert proc.returncode == 0 and "Traceback" not in err, (proc.returncode, err[-2000:])
    assert events.count("frame") == FRAMES and events[-1] == "done", events[-3:]
    assert len(list((tmp_path / "out").glob("*.exr"))) == FRAMES
    last = max(readings)
    assert SETTLED in readings and last >= FRAMES - 500, sorted(readings)
    first, end = readings[SETTLED], readings[last]
    growth = {k: end[k] - first[k] for k in first}
    trace = {k: f"{v['VmRSS']:.1f}/{v['RssAnon']:.1f}/{v['VmHWM']:.1f}" for k, v in sorted(readings.items())}
    print(f"\nframe {SETTLED} -> {last}: growth {', '.join(f'{k} {v:+.2f} MB' for k, v in growth.items())}; "
          f"at frame {SETTLED}: {', '.join(f'{k} {v:.1f} MB' for k, v in first.items())}; the whole run's peak "
          f"with the shutdown: {usage.ru_maxrss / 1024:.1f} MB; {took:.1f} s for {FRAMES} frames")
    assert max(growth.values()) < BOUND_MB, (growth, trace)  # frame: resident/heap/peak MB
