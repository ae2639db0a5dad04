"""The test harness's interpreter speed-up (tests/interpreter_speedup.py) is in effect wherever the suite
interprets Triton: without it the suite takes three times as long, which CI's time limit would not hold."""
import os

import pytest


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="Triton kernels are compiled here")
def test_the_interpreter_speedup_is_installed():
    interpreter = pytest.importorskip("triton.runtime.interpreter")
    assert getattr(interpreter._patch_lang, "_vision_covered", False), (
        "Triton's interpreter changed: update tests/interpreter_speedup.py for it")
    assert interpreter.interpreter_builder.options.sanitize_overflow is False
