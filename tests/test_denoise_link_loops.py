"""Symbolic links that lead to each other (``a.exr -> b.exr -> a.exr``) anywhere on a `vision denoise` command line,
as a frame named literally or reached by a pattern, a buffer file, the output folder or a folder above it: one line,
exit 2, naming the link and saying it is a loop, before anything is written. (The run folder of `vision predict`
and the other commands' paths: tests/test_tampered_state.py.)"""
from __future__ import annotations

import os

import numpy as np
import pytest

from vision.data import write_exr
from vision.pipelines.cli import main

from cli_checks import last_line_error  # noqa: E402


@pytest.fixture
def folder(tmp_path):
    rgb = np.random.default_rng(0).random((16, 16, 3)).astype(np.float32)
    write_exr(tmp_path / "f_001.exr", {c: rgb[..., k] for k, c in enumerate("RGB")})
    os.symlink("b.exr", tmp_path / "a.exr")  # relative links, as a user makes them
    os.symlink("a.exr", tmp_path / "b.exr")
    os.symlink("dir_b", tmp_path / "dir_a")
    os.symlink("dir_a", tmp_path / "dir_b")
    return tmp_path


CASES = {
    "a frame named literally": (["{d}/a.exr"], [], "{d}/a.exr"),
    "a frame after a good one": (["{d}/f_001.exr", "{d}/a.exr"], [], "{d}/a.exr"),
    "a frame of a --temporal sequence": (["{d}/f_001.exr", "{d}/a.exr"], ["--temporal", "--static-camera"],
                                         "{d}/a.exr"),
    "a frame matched by a pattern": (["{d}/*.exr"], [], "a.exr"),
    "the --albedo file": (["{d}/f_001.exr"], ["--albedo", "{d}/a.exr"], "a.exr"),
    "-o": (["{d}/f_001.exr"], ["-o", "{d}/dir_a"], "dir_a"),
    "a folder above -o": (["{d}/f_001.exr"], ["-o", "{d}/dir_a/out"], "dir_a"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_loop_of_links_on_the_denoise_command_line_is_one_line(folder, capsys, case):
    frames, extra, needle = CASES[case]
    d = str(folder)
    argv = ["denoise", *(f.format(d=d) for f in frames), "--model", "flr", "--allow-no-guides", "-q"]
    argv += [a.format(d=d) for a in extra]
    if "-o" not in extra:
        argv += ["-o", str(folder / "out")]
    before = sorted(os.listdir(folder))
    capsys.readouterr()
    assert main(argv) == 2
    last_line_error(capsys, "symbolic links that lead to each other", needle.format(d=d))
    assert sorted(os.listdir(folder)) == before  # nothing made, no link replaced
