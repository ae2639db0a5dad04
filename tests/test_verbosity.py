"""The verbosity switch (vision.kernels.runtime.logs): env var, setter, context manager, the -q / -v flags."""
import logging
import shutil

import pytest

from vision.kernels.runtime import get_logger, get_verbosity, set_verbosity, verbosity
from vision.pipelines.cli import main


def test_levels_filter_the_vision_logger_and_blocks_nest(capsys, monkeypatch):
    monkeypatch.setenv("VISION_VERBOSITY", "")  # records the variable as it was: set_verbosity's write is undone
    monkeypatch.delenv("VISION_VERBOSITY")
    log = get_logger("vision.test")
    assert get_verbosity() == logging.INFO  # the default
    log.info("note one")
    log.debug("hidden")
    with verbosity("warning"):
        log.info("hidden too")
        log.warning("a warning")
        with verbosity("debug"):
            log.debug("shown")
    err = capsys.readouterr().err.splitlines()
    assert err == ["note one", "a warning", "shown"]
    monkeypatch.setenv("VISION_VERBOSITY", "error")
    log.warning("hidden")
    assert capsys.readouterr().err == ""
    set_verbosity("debug")
    assert get_verbosity() == logging.DEBUG
    with pytest.raises(ValueError, match="verbosity must be one of"):
        set_verbosity("loud")
    monkeypatch.setenv("VISION_VERBOSITY", "loud")  # a bad environment value does not break a run
    assert get_verbosity() == logging.INFO
    assert get_logger("mine").name == "vision.mine"


def test_cli_flags_set_the_level_for_that_command_only(tmp_path, capsys, monkeypatch):
    """-q: warnings and errors only; -v: debug too; neither: VISION_VERBOSITY (default info). The level holds for
    that command and is not left set afterwards."""
    import vision.pipelines.cli.demo as demo

    def run(args):
        log = get_logger("vision.test")
        log.debug("d")
        log.info("i")
        log.warning("w")
        return 0

    monkeypatch.setattr(demo, "run", run)
    monkeypatch.delenv("VISION_VERBOSITY", raising=False)
    said = lambda *flags: (main(["demo", *flags]), capsys.readouterr().err.split())[1]  # noqa: E731
    assert said() == ["i", "w"]
    assert said("-q") == ["w"]
    assert said("-v") == ["d", "i", "w"]
    assert said() == ["i", "w"]  # nothing left set by -q / -v
    monkeypatch.setenv("VISION_VERBOSITY", "error")
    assert said() == []


def test_frame_order_note_is_a_warning_and_errors_stay_one_line(tmp_path, capsys, monkeypatch):
    from pathlib import Path

    monkeypatch.delenv("VISION_VERBOSITY", raising=False)
    seq = Path(__file__).parent / "data" / "blender" / "seq"
    for t in (1, 2):
        shutil.copy(seq / f"noisy_{t:04d}.exr", tmp_path / f"f_{t}.exr")
    frames = [str(tmp_path / "f_2.exr"), str(tmp_path / "f_1.exr")]
    assert main(["denoise", *frames, "-o", str(tmp_path / "a"), "--temporal", "--model", "flr"]) == 0
    assert "name order" in capsys.readouterr().err
    assert main(["denoise", *frames, "-o", str(tmp_path / "q"), "--temporal", "--model", "flr", "-q"]) == 0
    assert "warning" not in capsys.readouterr().err  # vision denoise -q: errors only
    monkeypatch.setenv("VISION_VERBOSITY", "error")  # (-q would say warning)
    assert main(["denoise", *frames, "-o", str(tmp_path / "b"), "--temporal", "--model", "flr"]) == 0
    assert "warning" not in capsys.readouterr().err  # the frame-order note and the buffer warnings
    assert main(["denoise", str(tmp_path / "missing.exr"), "-o", str(tmp_path / "c"), "-q"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
