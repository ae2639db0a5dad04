"""A resume looks at each state file's container before the training stack loads (``checkpoint.unreadable_file``):
random bytes, a safetensors header that claims more than the file holds or places a tensor outside it, and a zip
without torch's ``data.pkl`` are named in one line; files that ``torch.save`` and safetensors wrote pass."""
from __future__ import annotations

import json
import struct
import zipfile

import torch
from safetensors.torch import save_file

from vision.pipelines.training.checkpoint import unreadable_file


def _good(folder):
    folder.mkdir()
    save_file({"w": torch.ones(3, 4)}, str(folder / "model.safetensors"))
    torch.save({"state": {0: {"step": torch.tensor(1.0)}}}, folder / "optimizer.bin")
    torch.save({"random_state": (3, (1, 2), None)}, folder / "random_states_0.pkl")
    (folder / "checkpoint.json").write_text("{}")  # the manifest is read elsewhere
    return folder


def test_files_written_by_torch_and_safetensors_pass(tmp_path):
    assert unreadable_file(_good(tmp_path / "state")) is None
    assert unreadable_file(tmp_path / "absent") is None


def test_random_bytes_in_each_kind_of_file_are_named(tmp_path):
    for name in ("model.safetensors", "optimizer.bin", "random_states_0.pkl"):
        folder = _good(tmp_path / name.replace(".", "_"))
        size = (folder / name).stat().st_size
        (folder / name).write_bytes(bytes((7 * i + 3) % 251 for i in range(size)))
        bad = unreadable_file(folder)
        assert bad is not None and bad[0] == folder / name, bad
        assert ("more than the file holds" if name.endswith(".safetensors") else "not a torch file") in bad[1], bad


def test_a_safetensors_header_that_does_not_fit_its_file_is_named(tmp_path):
    folder = _good(tmp_path / "state")
    path = folder / "model.safetensors"
    header = json.dumps({"w": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 4800]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 48)  # 48 bytes of data, 4800 claimed
    assert unreadable_file(folder) == (path, "tensor 'w' lies outside the file")
    path.write_bytes(struct.pack("<Q", 10 ** 9) + b"{}")
    assert "more than the file holds" in unreadable_file(folder)[1]


def test_a_zip_without_torch_data_is_named(tmp_path):
    folder = _good(tmp_path / "state")
    with zipfile.ZipFile(folder / "optimizer.bin", "w") as z:
        z.writestr("archive/other.txt", "x")
    assert unreadable_file(folder) == (folder / "optimizer.bin", "not a torch file (no data.pkl in the archive)")
