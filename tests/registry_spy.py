"""Spies on the kernel registry for the tests that prove each op runs the path ``explain`` names
(tests/test_registry_runs.py: the kernels; test_registry_products.py: gla and the restore step;
test_registry_denoise.py: the denoiser's stages).

``spies(monkeypatch, deciders)`` returns ``install(op, stubs=None) -> (hits, asked)``: every path of ``op`` gets a
counting proxy in place of its implementation (or of ``stubs[name]``), ``hits`` lists the paths that ran, and
``asked`` the (x, call) of each decision made for ``op`` through ``decide`` as the modules in ``deciders`` see it.
``check(op, name, hits, asked, once=False)`` asserts that exactly path ``name`` ran (once per decision with
``once``) and that ``explain`` for the last call names it.
"""
from vision.kernels import runtime
from vision.kernels.runtime import paths


class Spy:
    """Counts the calls into an implementation (a callable, or a namespace of entry points) and forwards them."""

    def __init__(self, inner, hits: list, name: str):
        self._inner, self._hits, self._name = inner, hits, name

    def __call__(self, *args, **kwargs):
        self._hits.append(self._name)
        return self._inner(*args, **kwargs)

    def __getattr__(self, attr):
        value = getattr(self._inner, attr)

        def counted(*args, **kwargs):
            self._hits.append(self._name)
            return value(*args, **kwargs)

        return counted if callable(value) else value


def spies(monkeypatch, deciders=(paths,)):
    asked: dict[str, list] = {}
    real = paths.decide

    def decide(op, x, **call):
        asked.setdefault(op, []).append((x, call))
        return real(op, x, **call)

    for module in deciders:  # a module that imported decide by name holds its own reference
        monkeypatch.setattr(module, "decide", decide)
    monkeypatch.setenv("VISION_BACKEND", "torch")  # recorded, so a test's forced backend is undone
    monkeypatch.delenv("VISION_BACKEND")

    def install(op, stubs=None):
        hits: list = []
        for p in paths.paths(op):
            monkeypatch.setattr(p, "run", Spy((stubs or {}).get(p.name, p.run), hits, p.name))
        return hits, asked.setdefault(op, [])

    return install


def check(op, name, hits, asked, once=False):
    """Exactly path ``name`` of ``op`` ran (once per decision when ``once``), and ``explain`` for the last call the
    op made names it."""
    assert asked, f"{op} asked the registry nothing"
    x, call = asked[-1]
    first = runtime.explain(op, x, **call).splitlines()[0]
    assert first.endswith(f": {name} ({paths.path(op, name).backend})"), first
    if once:
        assert hits == [name] * len(asked), hits
    else:
        assert hits and set(hits) == {name}, hits


def force_triton(monkeypatch):
    """Make the registry pick the Triton paths on CPU tensors (their kernels stubbed by the test)."""
    monkeypatch.setattr(paths, "backend_for", lambda x: "triton")
