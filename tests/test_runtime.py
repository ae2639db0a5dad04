"""kernels.runtime: switches (env var + setter + context manager) and the per-op path registry."""
import logging

import pytest
import torch

from vision.kernels import runtime
from vision.kernels.runtime import paths


@pytest.fixture
def toy_op():
    paths.register("toy", "fast-cpu", "torch", 20, supports=lambda radius: None if radius < 4 else "radius >= 4")
    paths.register("toy", "torch", "torch", 10)
    paths.register("toy", "triton", "triton", 30, supports=lambda radius: None if radius < 8 else "radius >= 8")
    yield "toy"
    paths._PATHS.pop("toy")


def test_choose_follows_priority_and_support(toy_op):
    x = torch.zeros(1, 1, 4, 4)
    assert runtime.choose(toy_op, x, radius=2) == "fast-cpu"
    assert runtime.choose(toy_op, x, radius=5) == "torch"


def test_a_triton_call_it_cannot_take_falls_back_to_torch(toy_op, monkeypatch):
    x = torch.zeros(1, 1, 4, 4)
    monkeypatch.setattr(paths, "backend_for", lambda t: "triton")
    assert paths.choose(toy_op, x, radius=2) == "triton"
    assert paths.choose(toy_op, x, radius=9) == "torch"
    assert "triton" in runtime.explain(toy_op, x, radius=9) and "not taken: radius >= 8" in runtime.explain(
        toy_op, x, radius=9)


def test_a_path_carries_its_implementation_and_the_chosen_one_runs():
    ran = []
    paths.register("toy2", "fast", "torch", 5, supports=lambda n: None if n < 3 else "n >= 3",
                   run=lambda n: ran.append(("fast", n)) or "fast")
    paths.register("toy2", "slow", "torch", 0, run=lambda n: ran.append(("slow", n)) or "slow")
    try:
        x = torch.zeros(1)
        for n in (1, 5):
            chosen = runtime.decide("toy2", x, n=n)
            assert chosen is paths.path("toy2", chosen.name)
            assert chosen.run is runtime.implementation("toy2", chosen.name)
            assert runtime.run_path("toy2", runtime.choose("toy2", x, n=n), n) == chosen.name
        assert ran == [("fast", 1), ("slow", 5)]
        assert runtime.backend_of("toy2", "fast") == "torch"
        with pytest.raises(ValueError, match="toy2 has no path 'nope'"):
            runtime.implementation("toy2", "nope")
        paths.register("toy2", "bare", "torch", 9)
        with pytest.raises(ValueError, match="registered without an implementation"):
            runtime.implementation("toy2", "bare")
    finally:
        paths._PATHS.pop("toy2")


def test_no_path_at_all_is_a_clear_error(monkeypatch):
    paths.register("picky", "torch", "torch", supports=lambda radius: "never")
    try:
        with pytest.raises(ValueError, match="picky: no torch path takes this call: torch: never"):
            runtime.choose("picky", torch.zeros(1), radius=1)
    finally:
        paths._PATHS.pop("picky")


def test_explain_names_the_chosen_path_and_why_not_the_others(toy_op):
    text = runtime.explain(toy_op, torch.zeros(1, 1, 4, 4), radius=5)
    assert text.splitlines()[0].endswith(": torch (torch)")
    assert "fast-cpu" in text and "not taken: radius >= 4" in text
    assert "triton" in text and "not taken: the torch backend runs this call" in text
    assert "the tensor is on cpu" in text


@pytest.fixture
def kernel_records(monkeypatch):
    """The messages of the ``vision.kernels`` logger during a test, read by a handler of the test's own on that
    logger: nothing another test left behind (the once-logged choices, the ``vision`` logger's handler and
    propagation, handlers on the root logger) can add or hide a record."""
    monkeypatch.setattr(paths, "_logged", set())  # the choices already logged, process-wide
    logger = logging.getLogger("vision.kernels")
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    monkeypatch.setattr(logger, "propagate", False)  # our handler is the only one that sees its records
    monkeypatch.setattr(logger, "handlers", [handler])
    monkeypatch.setattr(logger, "disabled", False)
    old = logger.level
    logger.setLevel(logging.DEBUG)  # through setLevel, which clears the loggers' isEnabledFor caches
    yield records
    logger.setLevel(old)


def test_choice_logged_once_at_debug(toy_op, kernel_records):
    with runtime.verbosity("debug"):
        for _ in range(3):
            runtime.choose(toy_op, torch.zeros(1), radius=1)
    assert [r.getMessage() for r in kernel_records] == ["toy runs the fast-cpu path (torch backend)"]


def test_a_choice_made_while_quiet_is_still_logged_once_when_asked(toy_op, kernel_records):
    with runtime.verbosity("info"):  # the logger lets DEBUG through: the switch, not the level, decides
        runtime.choose(toy_op, torch.zeros(1), radius=1)
    assert kernel_records == []
    with runtime.verbosity("debug"):
        runtime.choose(toy_op, torch.zeros(1), radius=1)
        runtime.choose(toy_op, torch.zeros(1), radius=1)
    assert [r.getMessage() for r in kernel_records] == ["toy runs the fast-cpu path (torch backend)"]


def test_unknown_op_is_a_clear_error():
    with pytest.raises(ValueError, match="no paths are registered for op 'nope'"):
        runtime.choose("nope", torch.zeros(1))


@pytest.mark.parametrize("switch,env,values", [
    ("checks", "VISION_CHECKS", ("on", "off")),
    ("numba", "VISION_NUMBA", (True, False)),
])
def test_each_switch_has_env_setter_and_context_manager(switch, env, values, monkeypatch):
    monkeypatch.setenv(env, "1")  # recorded first, so the setters' writes to os.environ are undone afterwards
    monkeypatch.delenv(env)
    read = {"checks": runtime.checks_mode, "numba": runtime.numba_enabled}[switch]
    setter = {"checks": runtime.set_checks, "numba": runtime.set_numba}[switch]
    block = {"checks": runtime.checks, "numba": runtime.use_numba}[switch]
    default = read()
    setter(values[1])
    assert read() == values[1]
    with block(values[0]):
        assert read() == values[0]
    assert read() == values[1]
    monkeypatch.delenv(env)
    assert read() == default


def test_data_checks_skip_the_triton_path_by_default(monkeypatch):
    monkeypatch.delenv("VISION_CHECKS", raising=False)
    assert runtime.data_checks("torch") and not runtime.data_checks("triton")
    with runtime.checks("on"):
        assert runtime.data_checks("triton")
    with runtime.checks("off"):
        assert not runtime.data_checks("torch")
    with pytest.raises(ValueError, match="VISION_CHECKS must be one of"):
        runtime.set_checks("sometimes")


def test_backend_setter(monkeypatch):
    monkeypatch.setenv("VISION_BACKEND", "torch")  # recorded first: the setter's writes are undone afterwards
    monkeypatch.delenv("VISION_BACKEND")
    runtime.set_backend("torch")
    assert runtime.forced_backend() == "torch"
    runtime.set_backend(None)
    assert runtime.forced_backend() is None


def test_a_checks_block_holds_for_its_thread_and_the_workers_it_hands_items_to(monkeypatch):
    import threading

    from vision.kernels.runtime import threads

    monkeypatch.delenv("VISION_CHECKS", raising=False)
    seen = {}
    with runtime.checks("off"):
        other = threading.Thread(target=lambda: seen.update(other=runtime.checks_mode()))
        other.start()
        other.join()
        with threads.own_threads(torch.device("cpu")):
            threads.parallel_for(lambda i: seen.update({i: runtime.checks_mode()}), range(4), torch.device("cpu"))
    assert seen["other"] == "auto"  # another thread of the process keeps its own mode
    assert [seen[i] for i in range(4)] == ["off"] * 4
    assert runtime.checks_mode() == "auto"


def test_the_denoiser_reads_its_repaired_buffers_once(monkeypatch):
    """After its repairs every buffer is finite, so the regression ops inside ``denoise`` skip their own data
    checks; checks forced on by the caller stay on."""
    from vision.denoise import denoise
    from vision.kernels.local_linear import op

    calls = []
    real = op.check_all_finite
    monkeypatch.setattr(op, "check_all_finite", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    monkeypatch.delenv("VISION_CHECKS", raising=False)
    g = torch.Generator().manual_seed(0)
    color, albedo = torch.rand(1, 3, 24, 32, generator=g), torch.rand(1, 3, 24, 32, generator=g)
    auto = denoise(color, albedo=albedo, model="flr", spp=16)
    assert not calls
    with runtime.checks("on"):
        forced = denoise(color, albedo=albedo, model="flr", spp=16)
    assert calls
    assert torch.equal(auto, forced)
