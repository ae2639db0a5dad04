"""A run folder's config.json is data: no key in it reaches the network (timm's ``pretrained`` download, a URL, a
hub id), and every size in it is bounded before anything is built. Each refusal is one line naming the file and
the key; `vision predict` / `vision evaluate` exit 2 and write nothing."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import numpy as np
import pytest

from vision.io import write_image
from vision.pipelines.cli import main

from cli_checks import TINY, tiny_run  # noqa: E402


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run folder with untrained weights: enough for loading."""
    return tiny_run(tmp_path_factory)


@pytest.fixture
def server():
    """An HTTP server on 127.0.0.1 that records every request it gets (and answers 404)."""
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            seen.append(self.path)
            self.send_response(404)
            self.end_headers()

        do_HEAD = do_GET

        def log_message(self, *args):
            pass

    httpd = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def downloads(monkeypatch, tmp_path):
    """Every download function timm and the hubs offer records its call and fails (nothing is fetched);
    the caches point into the test's folder."""
    import huggingface_hub
    import timm.models._builder as builder
    import timm.models._hub as hub
    import torch.hub as torch_hub

    calls = []

    def fail(name):
        def refuse(*args, **kwargs):
            calls.append((name, args[:1]))
            raise AssertionError(f"{name} was called: a run folder reached the network")
        return refuse

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch_home"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    for module in (huggingface_hub, hub, builder):
        for name in ("hf_hub_download", "load_state_dict_from_hf", "load_state_dict_from_url", "download_cached_file",
                     "snapshot_download"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, fail(f"{module.__name__}.{name}"))
    for name in ("download_url_to_file", "load_state_dict_from_url"):
        monkeypatch.setattr(torch_hub, name, fail(f"torch.hub.{name}"))
    return calls


def _tampered(run_dir: Path, tmp_path: Path, **changes) -> Path:
    import shutil

    run = tmp_path / "tampered"
    shutil.copytree(run_dir, run)
    cfg = json.loads((run / "config.json").read_text())
    for key, value in changes.items():
        if key == "extra":
            cfg["extra"] = dict(cfg["extra"], **value)
        else:
            cfg[key] = value
    (run / "config.json").write_text(json.dumps(cfg))
    return run


def _image(path: Path) -> Path:
    write_image(path, np.random.default_rng(0).random((32, 32, 3), dtype=np.float32))
    return path


def _one_line(capsys, *needles) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    for n in needles:
        assert n in err, (n, err)
    return err


@pytest.mark.parametrize("command", ["predict", "evaluate"])
@pytest.mark.parametrize("extra", [
    {"pretrained": True, "pretrained_cfg_overlay": {"url": "URL/weights.pth"}},
    {"pretrained": True, "pretrained_cfg_overlay": {"hf_hub_id": "someone/evil"}},
    {"pretrained_cfg_overlay": {"url": "URL/weights.pth"}},
    {"pretrained": True},
    {"hf_hub_id": "someone/evil"},
    {"cache_dir": "CACHE"},
    {"checkpoint_path": "URL/weights.pth"},
])
def test_a_tampered_run_config_makes_no_request_and_is_refused_naming_the_key(
        run_dir, tmp_path, capsys, server, downloads, command, extra):
    url, seen = server
    text = json.dumps(extra).replace("URL", url).replace("CACHE", str(tmp_path / "cache"))
    run = _tampered(run_dir, tmp_path, extra=json.loads(text))
    out = tmp_path / "out"
    if command == "predict":
        argv = ["predict", str(run), str(_image(tmp_path / "a.png")), "-o", str(out)]
    else:
        data = tmp_path / "data"
        for sub in ("images", "targets"):
            (data / sub).mkdir(parents=True)
        _image(data / "images" / "a.png")
        np.save(data / "targets" / "a.npy", np.ones((32, 32, 1), np.float32))
        argv = ["evaluate", str(run), "--data", str(data), "--split", "all", "--json", str(tmp_path / "m.json")]
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert main(argv) == 2
    key = next(iter(extra))
    _one_line(capsys, str(run / "config.json"), f'"{key}"', "not allowed")
    assert seen == [] and downloads == []
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written anywhere


@pytest.mark.parametrize("changes,needle", [
    (dict(extra={"depth": 100000}), '"depth"'),
    (dict(extra={"embed_dim": 1 << 20}), '"embed_dim"'),
    (dict(extra={"depth": 48, "embed_dim": 2048}), "over the bound"),
    (dict(extra={"dims": [2048, 2048, 2048, 2048], "depths": [48, 48, 48, 48]}), "over the bound"),
    (dict(extra={"num_heads": [1] * 100}), '"num_heads"'),
    (dict(extra={"depth": True}), '"depth"'),
    (dict(extra={"depth": "4"}), '"depth"'),
    (dict(extra={"drop_path_rate": float("nan")}), '"drop_path_rate"'),
    (dict(img_size=1 << 20), '"img_size"'),
    (dict(lora_rank=-1), '"lora_rank"'),
    (dict(lora_rank=1 << 30), '"lora_rank"'),
    (dict(head_kwargs={"features": 1 << 20}), '"features"'),
    (dict(head="dpt", head_kwargs={"features": 1 << 20}), '"features"'),
    (dict(head="local-linear", head_kwargs={"cells": 100000}), '"cells"'),
    (dict(task_kwargs={"gradient_weight": "x"}), '"gradient_weight"'),
    (dict(backbone="hf-hub:someone/evil"), '"backbone"'),
    (dict(backbone="../../weights"), '"backbone"'),
    (dict(task=[1, 2]), '"task"'),
    (dict(extra=[1, 2]), '"extra"'),
])
def test_every_size_and_type_in_a_run_config_is_bounded_before_anything_is_built(
        run_dir, tmp_path, capsys, downloads, monkeypatch, changes, needle):
    import vision.pipelines.training.backbone as backbone

    def never(*a, **k):
        raise AssertionError("a backbone was built from a config that is out of bounds")

    monkeypatch.setattr(backbone, "create_backbone", never)
    if isinstance(changes.get("extra"), list):
        run = _tampered(run_dir, tmp_path)
        cfg = json.loads((run / "config.json").read_text())
        cfg["extra"] = changes["extra"]
        (run / "config.json").write_text(json.dumps(cfg))
    else:
        run = _tampered(run_dir, tmp_path, **changes)
    assert main(["predict", str(run), str(_image(tmp_path / "a.png")), "-o", str(tmp_path / "out")]) == 2
    _one_line(capsys, str(run / "config.json"), needle)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("text,needle", [("[1, 2]", "JSON object"), ("{", "not valid JSON"),
                                         ("[" * 100000 + "]" * 100000, "nested too deeply"),
                                         ('{"extra": ' * 5000 + "{}" + "}" * 5000, "nested too deeply")],
                         ids=["list", "broken", "nested-lists", "nested-objects"])
def test_a_config_that_is_no_object_is_one_line(run_dir, tmp_path, capsys, text, needle):
    run = _tampered(run_dir, tmp_path)
    (run / "config.json").write_text(text)
    assert main(["predict", str(run), str(_image(tmp_path / "a.png")), "-o", str(tmp_path / "out")]) == 2
    _one_line(capsys, "config.json", needle)


def test_the_untampered_run_still_predicts(run_dir, tmp_path, downloads):
    assert main(["predict", str(run_dir), str(_image(tmp_path / "a.png")), "-o", str(tmp_path / "out"),
                 "--format", "npy"]) == 0
    assert np.isfinite(np.load(tmp_path / "out" / "a.npy")).all() and downloads == []


def test_finetune_refuses_download_switches_in_backbone_kwargs(tmp_path, capsys, downloads):
    from vision.bundled import asset_path

    out = tmp_path / "run"
    assert main(["finetune", "--task", "depth", "--data", str(asset_path("scenes")), "-o", str(out), "--quiet",
                 "--img-size", "32", "--epochs", "1", "--backbone-kwargs",
                 json.dumps(dict(TINY, pretrained=True))]) == 2
    _one_line(capsys, "--backbone-kwargs", '"pretrained"', "not allowed")
    assert not out.exists() and downloads == []


@pytest.mark.slow
def test_a_resume_from_a_tampered_run_folder_makes_no_request_and_writes_only_into_it(tmp_path, capsys, server,
                                                                                      downloads):
    """`vision finetune --resume` on a run whose config.json asks for pretrained weights from a URL and a hub id:
    the resume builds its model from the command line (timm is asked for pretrained=False), so the server sees no
    request, nothing downloads, and outside the run folder nothing is written."""
    from cli_checks import depth_pairs, finetune_args

    url, seen = server
    data = depth_pairs(tmp_path / "data", 24)
    run = tmp_path / "run"
    assert main(finetune_args(data) + ["-o", str(run)]) == 0
    cfg = json.loads((run / "config.json").read_text())
    cfg["extra"] = dict(cfg.get("extra") or {}, pretrained=True, hf_hub_id="someone/evil",
                        pretrained_cfg_overlay={"url": f"{url}/weights.pth"})
    (run / "config.json").write_text(json.dumps(cfg))
    outside = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and run not in p.parents}
    capsys.readouterr()
    code = main(finetune_args(data) + ["-o", str(run), "--resume"])
    err = capsys.readouterr().err
    assert code in (0, 2) and "Traceback" not in err, err
    assert seen == [] and downloads == []
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and run not in p.parents} == outside


def test_nesting_is_refused_whatever_the_recursion_limit():
    """The depth is read from the text before the parser runs: with the interpreter's recursion limit raised (as
    other libraries do), a 5000-deep config is still refused in one line, not parsed."""
    import sys

    from vision.pipelines.training.run_config import parse_config

    before = sys.getrecursionlimit()
    sys.setrecursionlimit(20000)
    try:
        with pytest.raises(ValueError, match="c.json is nested too deeply"):
            parse_config('{"extra": ' * 5000 + "{}" + "}" * 5000, "c.json")
    finally:
        sys.setrecursionlimit(before)
