"""The denoiser's stages choose their engine through the registry: for every denoiser op and each of its
paths, a call forced onto that path (numba on or off, autograd, dtype, the backend) runs exactly that path's
implementation, and ``explain`` for the same call names it.

Each test spies on every path of the op (a counting proxy in place of ``Path.run``), records what the stage asked
the registry (its module's ``decide``), calls the public stage and checks both. The OpenCV paths (3 x 3 mean, local
contrast, cell log, area downsampling) are forced by the input's dtype, autograd and layout. The Triton paths of the
sample repair run on CPU with the backend forced to "triton" and a stub (the PyTorch formulas) in place of the
kernel, as tests/test_registry_runs.py does.
"""
import ast
import importlib
import warnings
from pathlib import Path

import pytest
import torch

from vision.denoise import edge_history as EH, features, repair, reproject as RP
from vision.denoise import input_blend as IB
from vision.denoise.flnr import FLNR, cells, finish
from vision.kernels import runtime
from vision.kernels.runtime import paths
from registry_spy import check, spies

ROOT = Path(__file__).resolve().parents[1]
FLR = importlib.import_module("vision.denoise.flr")  # the module: vision.denoise.flr is also the function


def _deciders() -> tuple:
    """The modules whose stages call ``decide`` (each imported it by name and holds its own reference), found in the
    source, so a new stage's module is spied on without a line here."""
    root = ROOT / "vision" / "denoise"
    names = [".".join(("vision", "denoise", *p.relative_to(root).with_suffix("").parts))
             for p in sorted(root.rglob("*.py")) if "decide(" in p.read_text()]
    return tuple(importlib.import_module(n) for n in names)


DECIDERS = _deciders()
OPS = {"denoise.log_depth": ["torch+numba", "torch"], "denoise.reproject": ["torch+numba", "torch"],
       "denoise.edge_history": ["torch+numba", "torch"], "denoise.repair": ["triton", "torch"],
       "denoise.fill": ["triton", "torch"], "denoise.flnr.prepare": ["torch+numba", "torch"],
       "denoise.flnr.cells": ["torch+numba", "torch"], "denoise.flnr.head": ["torch+numba", "torch+bands", "torch"],
       "denoise.flnr.finish": ["torch+numba", "torch+bands", "torch"], "denoise.flnr.detail": ["torch+numba", "torch"],
       "denoise.flnr.mean3": ["torch+opencv", "torch"], "denoise.flnr.contrast": ["torch+opencv", "torch"],
       "denoise.flnr.log1p": ["torch+opencv", "torch"], "denoise.area_down": ["torch+opencv", "torch"],
       "denoise.input_blend": ["torch+numba", "torch"], "denoise.noise_cells": ["torch+numba", "torch"],
       "denoise.lone_peaks": ["torch+numba", "torch"], "denoise.demodulate": ["torch+numba", "torch"],
       "denoise.change_cells": ["torch+numba", "torch"], "denoise.take_frame": ["torch+numba", "torch"]}


@pytest.fixture
def spy(monkeypatch):
    """spy(op, stubs={name: implementation}) -> (hits, asked): see tests/registry_spy.py."""
    return spies(monkeypatch, DECIDERS)


def _check(op, name, hits, asked):
    check(op, name, hits, asked)


def _engine(name):
    """(numba on, autograd on, dtype) that force path ``name`` of a numba/PyTorch stage."""
    return {"torch+numba": (True, False, torch.float32), "torch": (False, False, torch.float32),
            "torch/autograd": (True, True, torch.float32), "torch/float64": (True, False, torch.float64)}[name]


def test_every_denoiser_op_has_its_engines_as_paths():
    spied = {m.__name__ for m in DECIDERS}
    assert {"vision.denoise.flr", "vision.denoise.flnr.head", "vision.denoise.flnr.cells", EH.__name__} <= spied, spied
    for op, names in OPS.items():
        assert [p.name for p in paths.paths(op)] == names, op


@pytest.mark.parametrize("case", ["torch+numba", "torch", "torch/autograd", "torch/float64", "torch/rgb"])
def test_log_depth_runs_the_path_it_explains(case, spy):
    hits, asked = spy("denoise.log_depth")
    numba, grad, dtype = _engine("torch" if case == "torch/rgb" else case)
    depth = torch.rand(1, 3 if case == "torch/rgb" else 1, 6, 7, dtype=dtype).requires_grad_(grad)
    with runtime.use_numba(numba or case == "torch/rgb"):
        features.log_depth(depth)
        _check("denoise.log_depth", case.split("/")[0], hits, asked)


def _keys(dtype, h=9, w=11):
    torch.manual_seed(0)
    keys = {"depth": torch.rand(1, 1, h, w, dtype=dtype) + 1, "normal": torch.rand(1, 3, h, w, dtype=dtype) - 0.5,
            "index": torch.randint(0, 3, (1, 1, h, w)).to(dtype)}
    return keys, {k: v.clone() for k, v in keys.items()}, torch.rand(1, 2, h, w, dtype=dtype) - 0.5


@pytest.mark.parametrize("case", ["torch+numba", "torch", "torch/autograd", "torch/float64"])
def test_reproject_runs_the_path_it_explains(case, spy):
    hits, asked = spy("denoise.reproject")
    numba, grad, dtype = _engine(case)
    prev, cur, offset = _keys(dtype)
    history = torch.rand(1, 4, 9, 11, dtype=dtype, requires_grad=grad)
    with runtime.use_numba(numba):
        RP.reproject(history, offset, prev, cur)
        _check("denoise.reproject", case.split("/")[0], hits, asked)


@pytest.mark.parametrize("case", ["torch+numba", "torch", "torch/autograd", "torch/float64"])
def test_edge_history_runs_the_path_it_explains(case, spy):
    hits, asked = spy("denoise.edge_history")
    numba, grad, dtype = _engine(case)
    prev, cur, offset = _keys(dtype)
    out = torch.rand(1, 3, 9, 11, dtype=dtype, requires_grad=grad)
    with runtime.use_numba(numba):
        EH.edge_history(out, torch.rand(1, 4, 9, 11, dtype=dtype), offset, prev, cur)
        _check("denoise.edge_history", case.split("/")[0], hits, asked)


@pytest.mark.parametrize("case", ["torch+numba", "torch", "torch/autograd", "torch/float64"])
def test_input_blend_runs_the_path_it_explains(case, spy):
    hits, asked = spy("denoise.input_blend")
    numba, grad, dtype = _engine(case)
    torch.manual_seed(0)
    color, sharp, albedo = (torch.rand(1, 3, 9, 11, dtype=dtype) for _ in range(3))
    out = torch.rand(1, 3, 9, 11, dtype=dtype, requires_grad=grad)
    with runtime.use_numba(numba):
        IB.towards_input(out, color, albedo, sharp)
        _check("denoise.input_blend", case.split("/")[0], hits, asked)


@pytest.mark.parametrize("case", ["torch+numba", "torch", "torch/float64"])
def test_noise_cells_run_the_path_they_explain(case, spy):
    hits, asked = spy("denoise.noise_cells")
    numba, _, dtype = _engine(case)
    noise, energy = (torch.rand(1, 1, 9, 11, dtype=dtype) for _ in range(2))
    with runtime.use_numba(numba):
        IB.regional_noise(noise, energy)
        _check("denoise.noise_cells", case.split("/")[0], hits, asked)


@pytest.mark.parametrize("case", ["torch+numba", "torch", "torch/float64"])
def test_history_update_runs_the_paths_it_explains(case, spy):
    """The change test's cell statistics and the update of the history, through the public update."""
    from vision.denoise import accumulate

    numba, _, dtype = _engine(case)
    prev, cur, offset = _keys(dtype)
    signal = torch.rand(1, 3, 9, 11, dtype=dtype)
    for op in ("denoise.change_cells", "denoise.take_frame"):
        hits, asked = spy(op)
        with runtime.use_numba(numba):
            accumulate.update(accumulate.start(signal, prev), signal, offset, cur, RP.Tolerances(), 32, 4.0)
            _check(op, case.split("/")[0], hits, asked)


@pytest.mark.parametrize("case", ["torch+numba", "torch", "torch/float64"])
def test_lone_peaks_run_the_path_they_explain(case, spy):
    hits, asked = spy("denoise.lone_peaks")
    numba, _, dtype = _engine(case)
    with runtime.use_numba(numba):
        IB.lone_peaks(torch.rand(1, 1, 9, 11, dtype=dtype), 3)
        _check("denoise.lone_peaks", case.split("/")[0], hits, asked)


@pytest.mark.parametrize("case", ["torch+numba", "torch", "torch/autograd", "torch/float64", "torch/grey-albedo"])
def test_demodulate_runs_the_path_it_explains(case, spy):
    hits, asked = spy("denoise.demodulate")
    numba, grad, dtype = _engine("torch+numba" if case == "torch/grey-albedo" else case)
    color = torch.rand(1, 3, 9, 11, dtype=dtype, requires_grad=grad)
    albedo = torch.rand(1, 1 if case == "torch/grey-albedo" else 3, 9, 11, dtype=dtype)
    emission = torch.zeros(1, 3, 9, 11, dtype=dtype)
    emission[..., 2:4, 3:5] = 2.0
    with runtime.use_numba(numba):
        FLR.B.demodulate(color, albedo, emission, 2)
        _check("denoise.demodulate", case.split("/")[0], hits, asked)


# ------------------------------------------------------------------------------------------------ FLNR's stages

FLNR_OPS = ("denoise.flnr.prepare", "denoise.flnr.cells", "denoise.flnr.head", "denoise.flnr.finish",
            "denoise.flnr.detail")
# the path of each FLNR op when the forward runs with numba on, numba off, and with autograd
FLNR_PATHS = {"numba": ("torch+numba", "torch+numba", "torch+numba", "torch+numba", "torch+numba"),
              "no-numba": ("torch", "torch", "torch+bands", "torch+bands", "torch"),
              "autograd": ("torch", "torch", "torch", "torch", "torch")}


@pytest.fixture(scope="module")
def frame():
    torch.manual_seed(0)
    h, w = 20, 24
    guides = {"albedo": torch.rand(1, 3, h, w) * 0.8 + 0.1, "normal": torch.rand(1, 3, h, w) * 2 - 1,
              "depth": torch.rand(1, 1, h, w) + 1, "ao": torch.rand(1, 1, h, w), "emission": torch.zeros(1, 3, h, w)}
    return torch.rand(1, 3, h, w), guides


def _model(**kw):
    torch.manual_seed(0)
    return FLNR(widths=(8, 8, 8, 8), hidden=8, **kw).eval()


@pytest.mark.parametrize("case", list(FLNR_PATHS))
def test_flnr_stages_run_the_paths_they_explain(case, spy, frame):
    spies = {op: spy(op) for op in FLNR_OPS}
    color, guides = frame
    model = _model(antialias=True, detail=True)
    with runtime.use_numba(case != "no-numba"), torch.set_grad_enabled(case == "autograd"):
        model(color.clone().requires_grad_(case == "autograd"), guides)
        for op, name in zip(FLNR_OPS, FLNR_PATHS[case]):
            _check(op, name, *spies[op])


def test_flnr_float64_takes_the_pytorch_bands(spy, frame):
    spies = {op: spy(op) for op in FLNR_OPS}
    color, guides = frame
    with torch.no_grad():
        _model(antialias=True, detail=True).double()(color.double(), {k: v.double() for k, v in guides.items()})
        for op, name in zip(FLNR_OPS, FLNR_PATHS["no-numba"]):
            _check(op, name, *spies[op])


def test_flnr_without_a_blend_finishes_on_the_whole_frame_and_upsampling_prepares_in_pytorch(spy, frame):
    finish, prepare = spy("denoise.flnr.finish"), spy("denoise.flnr.prepare")
    color, guides = frame
    with torch.no_grad():
        _model()(color, guides)
        _check("denoise.flnr.finish", "torch", *finish)
        prepare[0].clear()
        _model()(color[..., ::2, ::2], guides)
        _check("denoise.flnr.prepare", "torch", *prepare)
    assert "no antialias blend" in runtime.explain("denoise.flnr.finish", *finish[1][0][:1], **finish[1][0][1])


def test_the_reasons_name_the_condition():
    def why(d, shape=(1, 1, 4, 4)):
        return runtime.explain("denoise.log_depth", d, tensors=(d,), shape=shape)

    d = torch.rand(1, 1, 4, 4)
    with runtime.use_numba(False):
        assert "not taken: numba is off" in why(d)
    assert "not taken: autograd is on" in why(d.clone().requires_grad_())
    assert "not taken: needs CPU float32" in why(d.double())
    assert "not taken: takes (B, 1, H, W) depth" in why(d, (1, 3, 4, 4))


# ------------------------------------------------------------------------------------------------ OpenCV or PyTorch

def _opencv_case(case, shape=(2, 3, 8, 12)):
    """An input that forces ``case``: "torch+opencv" (CPU float32 planes), "torch+opencv/channels-last", or the
    PyTorch path for "torch/float64", "torch/autograd" (a leaf that requires grad) and "torch/strided" (a
    transposed tensor: no contiguous rows or planes)."""
    torch.manual_seed(0)
    x = torch.rand(shape, dtype=torch.float64 if case == "torch/float64" else torch.float32)
    if case == "torch+opencv/channels-last":
        return x.contiguous(memory_format=torch.channels_last)
    if case == "torch/strided":
        return x.transpose(-1, -2)
    return x.requires_grad_(case == "torch/autograd")


@pytest.mark.parametrize("case", ["torch+opencv", "torch/float64", "torch/autograd", "torch/strided"])
def test_mean3_runs_the_path_it_explains(case, spy):
    hits, asked = spy("denoise.flnr.mean3")
    x = _opencv_case(case)
    finish.antialias(x, torch.zeros_like(x[:, :1]))
    _check("denoise.flnr.mean3", case.split("/")[0], hits, asked)


@pytest.mark.parametrize("case", ["torch+opencv", "torch/float64", "torch/autograd", "torch/strided"])
def test_local_contrast_runs_the_path_it_explains(case, spy):
    """The contrast's path runs its own engine's 3 x 3 mean: no second decision through denoise.flnr.mean3."""
    hits, asked = spy("denoise.flnr.contrast")
    means, mean_asked = spy("denoise.flnr.mean3")
    finish.local_contrast(_opencv_case(case))
    _check("denoise.flnr.contrast", case.split("/")[0], hits, asked)
    assert not means and not mean_asked


@pytest.mark.parametrize("case", ["torch+opencv", "torch+opencv/channels-last", "torch/float64", "torch/autograd",
                                  "torch/strided", "torch/partial"])
def test_area_down_runs_the_path_it_explains(case, spy):
    hits, asked = spy("denoise.area_down")
    x = _opencv_case(case, (2, 3, 8, 9) if case == "torch/partial" else (2, 3, 8, 12))
    FLR.area_down(x, 2)
    _check("denoise.area_down", case.split("/")[0], hits, asked)


@pytest.mark.parametrize("case", ["torch+opencv", "torch/float64", "torch/autograd", "torch/channels-last"])
def test_cell_log_runs_the_path_it_explains(case, spy):
    hits, asked = spy("denoise.flnr.log1p")
    target = _opencv_case("torch+opencv/channels-last" if case == "torch/channels-last" else case, (1, 3, 8, 12))
    dtype = target.dtype
    cells.cell_inputs(torch.zeros(1, 8, 2, 3, dtype=dtype), target, torch.zeros(1, 1, 8, 12, dtype=dtype))
    _check("denoise.flnr.log1p", case.split("/")[0], hits, asked)


def test_the_opencv_reasons_name_the_condition():
    x = torch.rand(1, 3, 8, 12)

    def why(op, x, **call):
        return runtime.explain(op, x, tensors=(x,), **call)

    assert "not taken: needs float32" in why("denoise.flnr.contrast", x.double())
    assert "not taken: the input requires grad" in why("denoise.flnr.mean3", x.clone().requires_grad_())
    assert "not taken: needs contiguous rows" in why("denoise.flnr.mean3", x.transpose(-1, -2))
    assert "not taken: partial 2 x 2 blocks" in why("denoise.area_down", x[..., :7], u=2, grad=False)
    assert "not taken: takes (B, C, H, W)" in why("denoise.area_down", x[0], u=2, grad=False)
    assert "not taken: needs contiguous planes" in why("denoise.area_down", x.transpose(-1, -2), u=2, grad=False)
    assert "not taken: the input requires grad" in why("denoise.flnr.log1p", x, grad=True)
    assert "not taken: needs a contiguous tensor" in why("denoise.flnr.log1p", x[..., ::2], grad=False)


# ------------------------------------------------------------------------------------------------ sample repair

def _force_triton(monkeypatch):
    """The registry and host_reads see the Triton backend (CPU tensors: no host reads under VISION_CHECKS=auto)."""
    monkeypatch.setattr(paths, "backend_for", lambda x: "triton")
    monkeypatch.setattr(runtime, "backend_for", lambda x: "triton")


def _fill_stub(x, bad):
    return repair._fill_torch(x, bad)


def _repair_stub(x, reads):
    bad = ~torch.isfinite(x)
    return repair._fill_torch(x, bad), bad.sum()


def _nonfinite(dtype=torch.float32):
    x = torch.rand(1, 3, 8, 9, dtype=dtype)
    x[0, 1, 2, 3] = float("nan")
    return x


@pytest.mark.parametrize("case", ["triton", "torch", "torch/float64", "torch/triton-reads"])
def test_repair_runs_the_path_it_explains(case, spy, monkeypatch):
    hits, asked = spy("denoise.repair", {"triton": _repair_stub})
    spy("denoise.fill", {"triton": _fill_stub})
    x = _nonfinite(torch.float64 if case == "torch/float64" else torch.float32)
    if case in ("triton", "torch/float64", "torch/triton-reads"):
        _force_triton(monkeypatch)
    with runtime.checks("on" if case == "torch/triton-reads" else "auto"), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fixed, _ = repair.repair_nonfinite(x, "color")
        _check("denoise.repair", case.split("/")[0], hits, asked)
    assert bool(torch.isfinite(fixed).all())
    assert bool(w) == (case in ("torch", "torch/triton-reads"))  # only a host read of the count warns


@pytest.mark.parametrize("case", ["triton", "torch", "torch/channels", "torch/autograd"])
def test_fill_runs_the_path_it_explains(case, spy, monkeypatch):
    hits, asked = spy("denoise.fill", {"triton": _fill_stub})
    x = torch.rand(1, 3, 8, 9, requires_grad=case == "torch/autograd")
    bad = torch.rand(1, 3 if case == "torch/channels" else 1, 8, 9) > 0.8
    if case != "torch":
        _force_triton(monkeypatch)
    repair.fill_from_neighbours(x, bad)
    _check("denoise.fill", case.split("/")[0], hits, asked)


# ------------------------------------------------------------------------------------------------ no second decision

def test_no_denoiser_call_site_decides_an_engine_itself():
    """jit.enabled / jit.refusal is asked only by the registry paths' supports (engines.py); backend_for only where layout.py asks
    which backend a tensor takes (host reads, the CPU path); OpenCV is imported only by the implementation of a
    torch+opencv path (a function its module hands to ``register_path(op, OPENCV, ..., run=...)``), so no call site
    and no other path picks OpenCV."""
    found = []
    for path in sorted((ROOT / "vision" / "denoise").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = ast.unparse(node.func)
                if (name.endswith(("jit.enabled", "jit.refusal")) and path.name != "engines.py") or \
                        (name == "backend_for" and path.name != "layout.py"):
                    found.append(f"{path.name}:{node.lineno} {name}")
        runs = {ast.unparse(k.value) for node in ast.walk(tree) if isinstance(node, ast.Call)
                and ast.unparse(node.func) == "register_path" and ast.unparse(node.args[1]) == "OPENCV"
                for k in node.keywords if k.arg == "run"}
        for top in tree.body:
            if isinstance(top, ast.FunctionDef) and top.name in runs:
                continue
            for node in ast.walk(top):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and "cv2" in {a.name for a in node.names} | {
                        getattr(node, "module", None)}:
                    found.append(f"{path.name}:{node.lineno} imports cv2 outside a torch+opencv implementation")
    assert not found, found
