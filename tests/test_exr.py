"""Multi-layer EXR I/O: every channel round-trips bit for bit, names follow the documented table."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from vision.data.exr import LAYERS, read_exr, read_exr_header, read_frame, write_exr, write_frame

SCENES_PAGE = Path(__file__).resolve().parents[1] / "docs" / "render-scenes.md"


def awkward_floats(rng, shape) -> np.ndarray:
    """Random float32 bit patterns plus the values lossy paths lose: NaN payloads, -0, inf, denormals."""
    bits = rng.integers(0, 2 ** 32, size=shape, dtype=np.uint64).astype(np.uint32)
    flat = bits.reshape(-1)
    specials = [0x7FC00001, 0xFFC12345, 0x7F800000, 0xFF800000, 0x80000000, 0x00000001, 0x807FFFFF, 0x3F800000]
    flat[: len(specials)] = specials
    return bits.view(np.float32)


def test_every_field_round_trips_bit_exact(tmp_path, rng):
    h, w = 9, 13  # odd sizes: no reliance on blocks or alignment
    fields = {}
    for name, (channels, dtype, _) in LAYERS.items():
        if dtype == "uint32":
            arr = rng.integers(0, 2 ** 32, size=(h, w, len(channels)), dtype=np.uint64).astype(np.uint32)
        else:
            arr = awkward_floats(rng, (h, w, len(channels)))
        fields[name] = arr
    path = write_frame(tmp_path / "f.exr", fields, header={"vision.scene": "x", "vision.frame": 3})
    got = read_frame(path)
    assert set(got) == set(LAYERS)
    for name, arr in fields.items():
        assert got[name].dtype == arr.dtype and got[name].shape == arr.shape, name
        assert np.array_equal(got[name].view(np.uint32), arr.view(np.uint32)), name
    # the file holds exactly the documented channel names, with the documented types
    raw = read_exr(path)
    assert set(raw) == {c for chans, _, _ in LAYERS.values() for c in chans}
    assert raw["segment.id"].dtype == np.uint32 and raw["R"].dtype == np.float32
    hdr = read_exr_header(path)
    assert hdr["vision.scene"] == "x" and hdr["vision.frame"] == 3


def test_issue_channel_names():
    named = {c for chans, _, _ in LAYERS.values() for c in chans}
    for c in ["R", "G", "B", "albedo.R", "albedo.G", "albedo.B", "normal.X", "normal.Y", "normal.Z", "depth.Z",
              "ao.Y", "emission.R", "reference.R", "segment.id"]:
        assert c in named


def test_docs_document_every_channel():
    text = SCENES_PAGE.read_text()
    assert "Rendered scenes (`vision render-scenes`)" in text
    for chans, dtype, _ in LAYERS.values():
        for c in chans:
            assert f"`{c}`" in text, c


def test_raw_channels_and_selection(tmp_path, rng):
    a = awkward_floats(rng, (4, 5))
    b = np.arange(20, dtype=np.uint32).reshape(4, 5)
    c = rng.standard_normal((4, 5)).astype(np.float16)
    write_exr(tmp_path / "r.exr", {"layer.a": a, "id": b, "half": c})
    got = read_exr(tmp_path / "r.exr", ["id", "half"])
    assert list(got) == ["id", "half"]
    assert np.array_equal(got["id"], b) and got["half"].dtype == np.float16
    assert np.array_equal(got["half"].view(np.uint16), c.view(np.uint16))
    assert np.array_equal(read_exr(tmp_path / "r.exr")["layer.a"].view(np.uint32), a.view(np.uint32))
    # the input arrays are left alone (OpenEXR.File takes over the dict it is given)
    assert isinstance(a, np.ndarray) and np.array_equal(b, np.arange(20).reshape(4, 5))


def test_partial_frame_reads_only_present_fields(tmp_path):
    color = np.ones((3, 4, 3), np.float32)
    write_frame(tmp_path / "p.exr", {"color": color, "depth": np.full((3, 4), 2.5, np.float32)})
    got = read_frame(tmp_path / "p.exr")
    assert set(got) == {"color", "depth"} and got["depth"].shape == (3, 4, 1)
    with pytest.raises(ValueError, match="albedo.R"):
        read_frame(tmp_path / "p.exr", ["albedo"])


@pytest.mark.parametrize("bad, match", [
    ({"R": np.zeros((2, 2), np.float64)}, "float64"),
    ({"R": np.zeros((2, 2, 2), np.float32)}, "2-D"),
    ({"R": np.zeros((2, 2), np.float32), "G": np.zeros((3, 2), np.float32)}, "shape"),
    ({"R": np.zeros((2, 2), np.int64)}, "int64"),
    ({}, "at least one"),
])
def test_bad_channels_are_refused(tmp_path, bad, match):
    with pytest.raises(ValueError, match=match):
        write_exr(tmp_path / "bad.exr", bad)


def test_bad_fields_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown field"):
        write_frame(tmp_path / "x.exr", {"colour": np.zeros((2, 2, 3), np.float32)})
    with pytest.raises(ValueError, match=r"\(H, W, 3\)"):
        write_frame(tmp_path / "x.exr", {"albedo": np.zeros((2, 2, 4), np.float32)})
    with pytest.raises(ValueError, match="uint32"):
        write_frame(tmp_path / "x.exr", {"segment": np.zeros((2, 2), np.float32)})
    with pytest.raises(FileNotFoundError):
        read_exr(tmp_path / "missing.exr")
    with pytest.raises(ValueError, match="unknown field"):
        read_frame(tmp_path / "x.exr", ["colour"])


@pytest.mark.parametrize("data, match", [
    (b"", "the file is empty"),
    (b"hello, not an image\n" * 8, "not an OpenEXR file"),
    (b"PF\n2 2\n-1.0\n" + b"\0" * 48, "it is a PFM image"),
])
def test_unreadable_files_raise_one_value_error_naming_them(tmp_path, capfd, data, match):
    bad = tmp_path / "bad.exr"
    bad.write_bytes(data)
    for read in (read_exr, read_exr_header):
        with pytest.raises(ValueError, match=match) as err:
            read(bad)
        assert str(bad) in str(err.value)
    assert capfd.readouterr() == ("", "")  # OpenEXR's own prints do not leak past the error


def test_truncated_file_and_header_copy(tmp_path, capfd, rng):
    from vision.data.exr import copyable_header

    write_exr(tmp_path / "f.exr", {"R": awkward_floats(rng, (64, 64))}, header={"renderer": "x", "spp": 4})
    hdr = read_exr_header(tmp_path / "f.exr")
    assert copyable_header(hdr) == {"renderer": "x", "spp": 4}  # no compression, windows, channels, ...
    data = (tmp_path / "f.exr").read_bytes()
    (tmp_path / "t.exr").write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(ValueError, match=r"t\.exr: truncated or damaged OpenEXR file"):
        read_exr(tmp_path / "t.exr")
    assert capfd.readouterr() == ("", "")


def test_multi_part_files_read_whole(tmp_path):
    import OpenEXR

    from vision.data.exr import read_exr_parts

    a, b = np.ones((3, 4), np.float32), np.full((3, 4), 2, np.float16)
    parts = [OpenEXR.Part({"compression": OpenEXR.ZIP_COMPRESSION, "type": OpenEXR.scanlineimage}, chans, name=name)
             for name, chans in (("beauty", {"R": a.copy(), "Z": a.copy()}), ("diffuse", {"R": b.copy(), "N.X": b.copy()}))]
    OpenEXR.File(parts).write(str(tmp_path / "mp.exr"))
    got = read_exr_parts(tmp_path / "mp.exr")
    assert set(got) == {"beauty.R", "diffuse.R", "Z", "N.X"}  # R is in both parts: told apart by the part's name
    assert got["diffuse.R"].dtype == np.float16 and np.array_equal(got["beauty.R"], a)
    write_exr(tmp_path / "one.exr", {"R": a.copy()})
    assert list(read_exr_parts(tmp_path / "one.exr")) == ["R"]


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_during_a_read_keeps_what_its_handler_printed(tmp_path, capfd, monkeypatch, interrupt):
    """A SIGTERM handler runs wherever the main thread is; during an EXR read stderr is captured (the library's own
    diagnostics become the error's reason), so the handler's one line went into the capture and the terminated run
    printed nothing. It is passed on when an interrupt, not a read error, leaves the read."""
    import vision.data.exr as exr

    path = tmp_path / "a.exr"
    write_exr(path, {"R": np.zeros((4, 4), np.float32)})
    real = exr._openexr

    def interrupted():
        module = real()

        class File:
            def __init__(self, *a, **k):
                print("vision denoise: terminated (SIGTERM); unfinished outputs removed", file=sys.stderr)
                raise interrupt(143)

        return type("OpenEXR", (), {"File": File, "__getattr__": lambda self, k: getattr(module, k)})()

    monkeypatch.setattr(exr, "_openexr", interrupted)
    with pytest.raises(interrupt):
        read_exr(path)
    err = capfd.readouterr().err
    assert err.count("terminated (SIGTERM)") == 1, err
