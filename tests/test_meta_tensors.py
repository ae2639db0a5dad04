"""Meta tensors (a shape and a dtype, no values: ``torch.empty(..., device="meta")``, what ``torch.device("meta")``
model construction and shape inference hand out).

The kernels compute nothing from values, only shapes, on them: given all-meta inputs they return meta outputs of
the shapes real inputs give (as any torch op does, so shape inference and fake-tensor tracing go through them), and
a meta tensor beside a real one is a one-line ValueError naming both arguments. The denoiser reads values on the
host (repairs, range checks, the history count), so it refuses a meta buffer in one ValueError naming the buffer,
never a RuntimeError from deep inside."""
from __future__ import annotations

import pytest
import torch


def _meta(*shape):
    return torch.empty(*shape, device="meta")


# --------------------------------------------------------------------------- kernels: shapes, as real tensors give

@pytest.mark.parametrize("op", ["guided_filter", "local_linear_fit", "structure_loss"])
def test_all_meta_inputs_give_the_shapes_real_inputs_give(op):
    import vision.kernels as K

    real = {"guided_filter": (torch.rand(1, 3, 16, 16), torch.rand(1, 3, 16, 16), 2, 1e-3),
            "local_linear_fit": (torch.rand(1, 3, 16, 16), torch.rand(1, 1, 16, 16), 2, 1e-3),
            "structure_loss": (torch.rand(1, 3, 16, 16), torch.rand(1, 3, 16, 16))}[op]
    meta = tuple(_meta(*a.shape) if torch.is_tensor(a) else a for a in real)
    want = getattr(K, op)(*real)
    got = getattr(K, op)(*meta)
    assert got.is_meta and got.shape == want.shape and got.dtype == want.dtype


@pytest.mark.parametrize("op, names, args", [
    ("guided_filter", ("guide", "src"), lambda m, r: (m, r, 2, 1e-3)),
    ("guided_filter", ("guide", "src"), lambda m, r: (r, m, 2, 1e-3)),
    ("local_linear_fit", ("features", "target"), lambda m, r: (m, r[:, :1], 2, 1e-3)),
    ("local_linear_fit", ("features", "target"), lambda m, r: (r, m[:, :1], 2, 1e-3)),
    ("structure_loss", ("source", "edited"), lambda m, r: (m, r)),
    ("structure_loss", ("source", "edited"), lambda m, r: (r, m)),
])
def test_a_meta_tensor_beside_a_real_one_is_one_value_error_naming_both(op, names, args):
    import vision.kernels as K

    with pytest.raises(ValueError) as err:
        getattr(K, op)(*args(_meta(1, 3, 16, 16), torch.rand(1, 3, 16, 16)))
    assert "meta" in str(err.value) and all(n in str(err.value) for n in names), err.value
    assert len(str(err.value).splitlines()) == 1


# --------------------------------------------------------------------------- the denoiser: refused by name

def _frame():
    g = torch.Generator().manual_seed(0)
    return {"color": torch.rand(1, 3, 16, 16, generator=g), "albedo": torch.rand(1, 3, 16, 16, generator=g),
            "normal": torch.rand(1, 3, 16, 16, generator=g) * 2 - 1, "depth": 1 + torch.rand(1, 1, 16, 16, generator=g)}


def _refused(call, name):
    with pytest.raises(ValueError) as err:
        call()
    message = str(err.value)
    assert len(message.splitlines()) == 1 and name in message and "meta tensor" in message, message


@pytest.mark.parametrize("model", ["flr", "flnr"])
@pytest.mark.parametrize("name", ["color", "albedo", "normal", "depth", "history"])
def test_denoise_refuses_a_meta_buffer_by_name(model, name):
    from vision.denoise import denoise

    f = _frame()
    f["history"] = torch.full((1, 1, 16, 16), 3.0)
    f[name] = _meta(*f[name].shape)
    _refused(lambda: denoise(**f, model=model), name)


@pytest.mark.parametrize("name", ["color", "albedo", "depth", "motion", "index", "denoised"])
def test_temporal_denoiser_refuses_a_meta_buffer_by_name_at_the_first_call(name):
    from vision.denoise import TemporalDenoiser

    f = _frame()
    f.update(motion=torch.zeros(1, 4, 16, 16), index=torch.zeros(1, 1, 16, 16), denoised=torch.rand(1, 3, 16, 16))
    f[name] = _meta(*f[name].shape)
    den = TemporalDenoiser(model="flr")
    _refused(lambda: den(**f), name)
    assert den.history_length is None  # refused before the history takes the frame


@pytest.mark.parametrize("bad", ["meta", "size", "batch"])
def test_a_refused_denoised_frame_leaves_the_history_as_it_was(bad):
    """A ``denoised=`` that is refused (meta, another size, another batch) changes nothing: the calls after it give
    what a fresh denoiser fed only the valid frames gives, bit for bit, and so do the history lengths."""
    from vision.denoise import TemporalDenoiser

    g = torch.Generator().manual_seed(1)
    guides = {k: v for k, v in _frame().items() if k != "color"}
    frames = [dict(guides, color=torch.rand(1, 3, 16, 16, generator=g), motion=torch.full((1, 4, 16, 16), 0.5))
              for _ in range(4)]
    wrong = {"meta": _meta(1, 3, 16, 16), "size": torch.rand(1, 3, 8, 8), "batch": torch.rand(2, 3, 16, 16)}[bad]
    written = torch.rand(1, 3, 16, 16, generator=g)  # frame 2's result from an earlier run, read back
    fresh, tried = TemporalDenoiser(model="flr"), TemporalDenoiser(model="flr")
    want = [fresh(**frames[0]), fresh(**frames[1], denoised=written), fresh(**frames[2]), fresh(**frames[3])]
    got = [tried(**frames[0])]
    for _ in range(2):  # refused twice in a row, then the frame with its good result
        with pytest.raises(ValueError, match="denoised") as err:
            tried(**frames[1], denoised=wrong)
        assert len(str(err.value).splitlines()) == 1
    got += [tried(**frames[1], denoised=written), tried(**frames[2]), tried(**frames[3])]
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    assert torch.equal(tried.history_length, fresh.history_length) and fresh.history_length.max() == 4


def test_temporal_flr_refuses_a_meta_colour_by_name():
    from vision.denoise import TemporalFLR

    _refused(lambda: TemporalFLR()(_meta(1, 3, 16, 16)), "color")


@pytest.mark.parametrize("call", ["local_linear_fit", "denoise"])
def test_a_meta_eps_beside_real_inputs_is_one_value_error(call):
    eps = _meta(1)
    if call == "denoise":
        from vision.denoise import denoise

        run = lambda: denoise(torch.rand(1, 3, 16, 16), model="flr", eps=eps)  # noqa: E731
    else:
        from vision.kernels import local_linear_fit

        run = lambda: local_linear_fit(torch.rand(1, 3, 16, 16), torch.rand(1, 1, 16, 16), 2, eps)  # noqa: E731
    _refused(run, "eps")
