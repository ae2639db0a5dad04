"""Every code block of README.md and docs/*.md is checked: each ```python block runs, and each ```bash block's
``vision`` commands parse with the real command line (every flag and subcommand exists) and the scripts it names
exist.

Each Python snippet is executed as it stands, in a fresh temporary working directory. What a reader brings
along is prepared, never edited into the code:

- files at the paths the snippet names (``data/scenes``, ``./sd15``, ``photo.png``, ``vig_tiny.pth``, a
  Hugging Face cache entry for a hub id, ...), written by the snippet's ``files`` function, built in code
  from tiny stand-ins (``tests/tiny_diffusers.py``) or the bundled assets;
- names the prose or an earlier snippet defines (``image``, ``pipe``, ``color``, ``frames``, ...), given
  by the snippet's ``given`` function, each listed there.

Only what a test machine cannot do is replaced in the text, in ``replace`` (old, new) pairs that must
each match, so the table cannot rot. A snippet with no entry, or an entry that matches no snippet or
more than one, fails ``test_every_snippet_has_exactly_one_entry``. Nothing downloads (HF_HUB_OFFLINE=1,
TRANSFORMERS_OFFLINE=1 and an empty hub cache).
"""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before diffusers / transformers / huggingface_hub are imported
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import re  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402
from typing import Callable  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]   # every page a user reads code from


# ----------------------------------------------------------------------------------------------- extraction
@dataclass(frozen=True)
class Snippet:
    line: int      # line of the opening fence in its page
    heading: str   # the nearest heading above it
    code: str
    page: str = "README.md"   # the page, relative to the repository root
    lang: str = "python"

    @property
    def id(self) -> str:
        slug = re.sub(r"[^a-z0-9]+", "-", self.heading.lower()).strip("-")[:40]
        where = "" if self.page == "README.md" else Path(self.page).stem + "-"
        return f"{where}L{self.line}-{slug}"


def code_blocks(text: str, page: str = "README.md", langs=("python",)) -> list[Snippet]:
    """The fenced blocks of ``text`` in the given languages, with the line of their fence and nearest heading."""
    lines = text.splitlines()
    out, heading, i = [], "", 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#") and not line.startswith("#!"):
            heading = line.lstrip("#").strip()
        if line.strip().startswith("```"):
            lang, start, i = line.strip()[3:].strip(), i, i + 1
            body = []
            while i < len(lines) and not lines[i].strip().startswith("```"):
                body.append(lines[i])
                i += 1
            if lang in langs:
                out.append(Snippet(start + 1, heading, "\n".join(body) + "\n", page, lang))
        i += 1
    return out


def python_snippets(text: str | None = None) -> list[Snippet]:
    """Every ```python block: of ``text`` when given (as README.md), else of README.md and every docs page."""
    if text is not None:
        return code_blocks(text)
    return [s for page in PAGES for s in code_blocks(page.read_text(), str(page.relative_to(ROOT)))]


# ----------------------------------------------------------------------------------------------- stand-ins
def _png(path, hw=(32, 32), seed=7):
    from vision.io import write_image
    import tiny_diffusers as tiny

    img = tiny.source_image(max(hw), seed=seed)[0, :, :hw[0], :hw[1]].permute(1, 2, 0).numpy()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_image(path, img)
    return path


def _pil(seed=7):
    from PIL import Image
    import tiny_diffusers as tiny

    img = tiny.source_image(32, seed=seed)[0].permute(1, 2, 0).numpy()
    return Image.fromarray((img * 255).round().astype(np.uint8))


def _keep_mask(path):
    from vision.io import write_image

    m = np.zeros((32, 32), np.float32)
    m[:, :16] = 1
    write_image(path, m)


def _sd_img2img(scheduler="ddim"):
    from diffusers import DDIMScheduler, PNDMScheduler, StableDiffusionImg2ImgPipeline
    import tiny_diffusers as tiny

    sched = PNDMScheduler(skip_prk_steps=True, steps_offset=1) if scheduler == "pndm" else \
        DDIMScheduler(clip_sample=False, steps_offset=1)
    pipe = StableDiffusionImg2ImgPipeline(**tiny.sd_components(sched))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _lcm_img2img():
    from diffusers import LatentConsistencyModelImg2ImgPipeline, LCMScheduler
    import tiny_diffusers as tiny

    pipe = LatentConsistencyModelImg2ImgPipeline(**tiny.sd_components(LCMScheduler()))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _edit_pipe():
    import tiny_diffusers as tiny

    return tiny.edit_pipeline()


def _hub_cache(cwd: Path, monkeypatch, repo: str, save: Callable[[Path], None]):
    """The layout huggingface_hub writes (refs/main -> snapshots/<rev>/...), in an otherwise empty cache."""
    from huggingface_hub import constants

    hub = cwd.parent / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    root = hub / ("models--" + repo.replace("/", "--"))
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text("0" * 40)
    save(root / "snapshots" / ("0" * 40))


SCENE = "scene_00000"


def _scene_frame(k=0):
    from vision.bundled import asset_path
    from vision.data import read_frame

    path = Path(asset_path("scenes")) / SCENE / f"frame_{k:02d}.exr"
    return read_frame(path, ["color", "albedo", "normal", "depth", "ao", "emission", "reference"])


def _buffers():
    f = _scene_frame(0)
    return {k: f[k] for k in ("color", "albedo", "normal", "depth", "ao", "emission")}


def _psnr(x, ref):
    x, ref = np.clip(x, 0, 1) ** (1 / 2.2), np.clip(ref, 0, 1) ** (1 / 2.2)
    return -10 * np.log10(np.mean((x - ref) ** 2))


# ----------------------------------------------------------------------------------------------- checks
def _check_operators(ns, cwd):
    img = ns["img"]
    for name in ("smooth", "fast", "mean", "cv2_like"):
        assert ns[name].shape == img.shape and torch.isfinite(ns[name]).all(), name
    assert (ns["smooth"] - img).abs().mean() > 1e-3  # it smooths
    # the box filter is a window mean: an interior pixel equals the mean of its 7 x 7 window
    assert torch.allclose(ns["mean"][0, :, 100, 200], img[0, :, 97:104, 197:204].mean((1, 2)), atol=1e-5)
    import cv2  # opencv-contrib is a dependency: the comment's claim is checked, not assumed

    gray = ns["gray"][0, 0].numpy()
    src = ns["img"][0].permute(1, 2, 0).numpy()
    ref = cv2.ximgproc.guidedFilter(gray, src, 8, 1e-2)
    assert np.abs(ns["cv2_like"][0].permute(1, 2, 0).numpy() - ref).max() < 1e-4


def _check_dataset(ns, cwd):
    batch = next(iter(ns["loader"]))
    n = len(ns["ds"])
    assert n > 0 and batch["color"].shape == (min(n, 8), 3, 128, 128)
    assert batch["depth"].shape[1] == 1 and batch["color"].dtype == torch.float32
    assert torch.isfinite(batch["reference"]).all() and "scene" in batch and "frame" in batch


def _check_spl(ns, cwd):
    from vision.kernels import structure_loss

    src, edit, restored = ns["src"], ns["edit"], ns["restored"]
    assert ns["loss"].dim() == 0 and torch.isfinite(ns["loss"]) and torch.isfinite(ns["masked"])
    assert ns["residuals"].shape == (1, 1, 512, 512)
    assert restored.shape == edit.shape and restored.dtype == edit.dtype
    assert 0 <= restored.min() and restored.max() <= 1
    assert structure_loss(src, restored) < 0.5 * structure_loss(src, edit)  # closer to the source's structure


def _check_denoise(ns, cwd):
    ref = _scene_frame(0)["reference"]
    color = ns["color"]
    for name in ("out", "flr", "fast", "ldr", "up", "big"):
        x = ns[name]
        assert x.shape == color.shape and np.isfinite(x).all() and x.min() >= 0, name
    for name in ("out", "flr", "fast"):
        assert _psnr(ns[name], ref) > _psnr(color, ref) + 5, name  # denoised, against the 2048-spp reference
    assert ns["ldr"].max() <= 1
    assert np.array_equal(ns["big"], ns["out"]) or np.abs(ns["big"] - ns["out"]).max() < 1e-4
    assert len(ns["outs"]) == len(ns["frames"]) and all(o.shape == color.shape for o in ns["outs"])
    assert all(np.isfinite(o).all() for o in ns["outs"])
    assert (cwd / "my-flnr" / "config.json").is_file() and (cwd / "my-flnr" / "model.safetensors").is_file()
    assert type(ns["net"]).__name__ == "FLNR"


def _check_flnr(ns, cwd):
    ref = _scene_frame(0)["reference"]
    assert _psnr(ns["out"], ref) > _psnr(ns["color"], ref) + 5
    assert np.array_equal(ns["mine"], ns["out"])  # flnr.safetensors here is a copy of the bundled weights


def _check_local_linear(ns, cwd):
    assert ns["out"].shape == (1, 3, 720, 1280) and torch.isfinite(ns["out"]).all()
    assert ns["coeffs"].shape == (1, 3, 7, 180, 320) and torch.isfinite(ns["coeffs"]).all()


def _check_sd_img2img(ns, cwd):
    size = ns["image"].size
    for name in ("edit", "other", "plain"):
        assert ns[name].size == size, name
    report = ns["report"]
    # 50 steps at strength 0.6: the last 30 run; start=0.8: the last 20 % of them (6) are guided
    assert report.guided and report.guided_steps == tuple(range(44, 50)) and report.sgd_steps > 0
    assert type(ns["pipe"]).__name__ == "StableDiffusionImg2ImgPipeline" and "_spl_stock_class" not in vars(
        type(ns["pipe"])) and not hasattr(ns["pipe"], "structure_preservation_report")  # the stock pipeline again


def _check_callback(ns, cwd):
    assert ns["edit"].size == ns["image"].size
    assert ns["cb"].guided_steps == [12, 13, 14]  # LCM img2img runs all 15 steps; start=0.8: from step 12 on


def _check_edit_pipeline(ns, cwd):
    import json

    from vision.pipelines import StructurePreservingEditPipeline

    assert ns["out"].size == ns["image"].size
    index = json.loads((cwd / "my-edit" / "model_index.json").read_text())
    assert index["_class_name"] == ["pipeline", "StructurePreservingEditPipeline"]
    assert (cwd / "my-edit" / "pipeline.py").is_file()
    assert type(ns["pipe"]) is StructurePreservingEditPipeline


def _check_attention_mask(ns, cwd):
    mask = ns["mask"]
    assert mask.shape[-2:] == (32, 32) and 0 <= mask.min() and mask.max() <= 1 and mask.max() > 0
    assert hasattr(ns["pipe"], "disable_structure_preservation")  # guidance enabled on this pipe


def _check_attention_control(ns, cwd):
    assert ns["out"].size == ns["image"].size


def _check_backbones(ns, cwd):
    assert ns["model"].num_classes == 10
    assert len(ns["feats"]) >= 3 and all(torch.isfinite(f).all() for f in ns["feats"])
    mine, local = torch.load(cwd / "vig_tiny.pth", weights_only=True), ns["local"].state_dict()
    assert local.keys() == mine.keys() and all(torch.equal(v, mine[k]) for k, v in local.items())  # the file's
    assert ns["o"].shape == (2, 1024, 4, 64) and torch.isfinite(ns["o"]).all()


def _check_heads(ns, cwd):
    x = ns["x"]
    assert [f.shape[1:] for f in ns["feats"]] == [(192, 8, 8)] * 4
    assert sum(p.numel() for p in ns["head"].parameters()) == 49_408  # the figure the comment gives
    assert ns["raw"].shape == (x.shape[0], 1, 128, 128) and torch.isfinite(ns["raw"]).all()
    assert torch.isfinite(ns["loss"])
    assert {"abs_rel", "rmse", "delta1"} <= set(ns["scores"]) and all(np.isfinite(float(v))
                                                                       for v in ns["scores"].values())


def _check_quick_operators(ns, cwd):
    img, out = ns["img"], ns["out"]
    assert out.shape == img.shape and torch.isfinite(out).all() and (out - img).abs().mean() > 1e-3
    # a guide fitted on itself: the local linear fit of one channel of the image reproduces it closely
    target = img.mean(1, keepdim=True)
    assert ns["fitted"].shape == target.shape
    assert (ns["fitted"] - target).abs().mean() < 0.1 * (target - target.mean()).abs().mean()


def _check_quick_denoise(ns, cwd):
    ref = _scene_frame(0)["reference"]
    clean, color = ns["clean"], ns["f"]["color"]
    assert clean.shape == color.shape and np.isfinite(clean).all()
    assert _psnr(clean, ref) > _psnr(color, ref) + 5   # against the 2048-spp reference


# ----------------------------------------------------------------------------------------------- the table
@dataclass
class Entry:
    key: str                                               # a line that only this snippet holds
    check: Callable                                        # (namespace, cwd) -> None, real assertions
    given: Callable[[], dict] = dict                       # names the prose / an earlier snippet defines
    files: Callable[[Path, object], None] | None = None    # (cwd, monkeypatch): files the snippet names
    replace: list[tuple[str, str]] = field(default_factory=list)  # only what a CPU test machine lacks
    slow: bool = False


def _files_scenes(cwd, mp):
    from vision.bundled import asset_path

    shutil.copytree(asset_path("scenes"), cwd / "data" / "scenes")


def _files_frame(cwd, mp):
    from vision.bundled import asset_path

    shutil.copy(Path(asset_path("scenes")) / SCENE / "frame_00.exr", cwd / "frame.exr")


def _files_flnr(cwd, mp):
    from vision.bundled import asset_path

    shutil.copy(Path(asset_path("weights")) / "flnr.safetensors", cwd / "w.safetensors")


def _files_flnr_mine(cwd, mp):
    from vision.bundled import asset_path

    shutil.copy(Path(asset_path("weights")) / "flnr.safetensors", cwd / "flnr.safetensors")


def _given_denoise():
    b = _buffers()
    half = b["color"][::2, ::2]                      # colour rendered at 1/2 of the guides' size
    frames = []
    for k in (0, 1):
        f = _scene_frame(k)
        h, w = f["color"].shape[:2]
        frames.append(SimpleNamespace(color=f["color"], color_half=f["color"][::2, ::2], albedo=f["albedo"],
                                      normal=f["normal"], depth=f["depth"], vector=np.zeros((h, w, 4), np.float32),
                                      index=np.ones((h, w, 1), np.float32)))   # a static camera, one object
    return dict(b, linear_ldr=np.clip(b["color"], 0, 1), color_half=half, frames=frames,
                color_256spp=np.clip(_scene_frame(0)["reference"] + np.random.default_rng(0).normal(
                    0, 0.01, b["color"].shape).astype(np.float32), 0, None))   # a frame with little noise left


def _files_sd15(cwd, mp):
    _sd_img2img("pndm").save_pretrained(cwd / "sd15")  # as SD1.5 ships: PNDM
    _png(cwd / "photo.png")
    _keep_mask(cwd / "keep.png")


def _files_lcm(cwd, mp):
    def save(folder):
        _lcm_img2img().save_pretrained(folder)

    _hub_cache(cwd, mp, "SimianLuo/LCM_Dreamshaper_v7", save)
    save(cwd / "lcm-dreamshaper")


def _files_vig(cwd, mp):
    import timm
    import vision  # noqa: F401

    torch.manual_seed(3)
    torch.save(timm.create_model("vig_tiny_patch16_224").state_dict(), cwd / "vig_tiny.pth")


def _given_structure_config():
    from vision.pipelines.editing import StructurePreservationConfig

    return dict(image=_pil(), lcm_pipe=_lcm_img2img(), StructurePreservationConfig=StructurePreservationConfig)


def _given_attention_mask():
    from vision.pipelines import enable_structure_preservation

    return dict(pipe=_sd_img2img(), image=_pil(), enable_structure_preservation=enable_structure_preservation)


ENTRIES = [
    Entry("out = guided_filter(img, img, radius=8, eps=1e-2)", _check_quick_operators),
    Entry('f = read_frame("frame.exr"', _check_quick_denoise, files=_files_frame, slow=True),
    Entry("smooth = guided_filter(img, img, radius=8, eps=1e-2)", _check_operators),
    Entry('ds = RenderedScenes("data/scenes"', _check_dataset, files=_files_scenes),
    Entry("restored = vision.restore_structure(src, edit, steps=100)", _check_spl),
    Entry("from vision.denoise import denoise, TemporalDenoiser, TemporalFLR", _check_denoise,
          given=_given_denoise, files=_files_flnr),
    Entry('weights="flnr.safetensors"', _check_flnr, given=_buffers, files=_files_flnr_mine),
    Entry("coeffs = local_linear_fit(g, noisy, radius=8, eps=1e-2, scale=4)", _check_local_linear),
    Entry('StableDiffusionImg2ImgPipeline.from_pretrained("./sd15"', _check_sd_img2img,
          given=lambda: dict(photo2=_pil(seed=11)), files=_files_sd15, slow=True,
          replace=[('.to("cuda")', '.to("cpu")'),                       # no GPU on a test machine,
                   ("dtype=torch.float16", "dtype=torch.float32")]),      # and diffusers runs no float16 on CPU
    Entry("cb = SPLGuidanceCallback(", _check_callback, given=_given_structure_config),
    Entry("StructurePreservingEditPipeline.from_pretrained(", _check_edit_pipeline,
          given=lambda: dict(image=_pil()), files=_files_lcm),
    Entry("mask = attention_mask(pipe", _check_attention_mask, given=_given_attention_mask),
    Entry('local_blend_words=["cat", "dog"]', _check_attention_control,
          given=lambda: dict(pipe=_edit_pipe(), image=_pil())),
    Entry("o = gla(q, k, v, g)", _check_backbones, files=_files_vig),
    Entry("head = TokenLocalHead(192, 16, 1)", _check_heads,
          given=lambda: dict(x=torch.rand(2, 3, 128, 128), depth=1 + 4 * torch.rand(2, 1, 128, 128))),
]

def _needs_blender(snippet: Snippet) -> bool:
    """Code for Blender's own Python (``import bpy``): compiled here, run only inside Blender."""
    return re.search(r"^\s*(?:import bpy|from bpy)", snippet.code, re.M) is not None


ALL_PYTHON = python_snippets()
SNIPPETS = [s for s in ALL_PYTHON if not _needs_blender(s)]
BLENDER_SNIPPETS = [s for s in ALL_PYTHON if _needs_blender(s)]


def _entry(snippet: Snippet) -> Entry:
    found = [e for e in ENTRIES if e.key in snippet.code]
    assert len(found) == 1, f"{snippet.page} {snippet.id}: {len(found)} entries match it; give it exactly one in ENTRIES"
    return found[0]


def test_every_snippet_has_exactly_one_entry():
    assert len(SNIPPETS) >= 15
    assert {s.page for s in SNIPPETS} >= {"README.md", "docs/denoising.md", "docs/kernels.md", "docs/editing.md",
                                           "docs/dense.md"}
    for s in SNIPPETS:
        _entry(s)
    for e in ENTRIES:
        hits = [s.id for s in SNIPPETS if e.key in s.code]
        assert len(hits) == 1, f"entry {e.key!r} matches {hits or 'no snippet'}: update ENTRIES with the pages"


def test_extraction_names_lines_and_headings():
    text = "# T\n\n## Sec\n\n```python\nx = 1\n```\n\n```bash\nls\n```\n```python\n# not a heading\ny = 2\n```\n"
    got = python_snippets(text)
    assert [(s.line, s.heading, s.code) for s in got] == [(5, "Sec", "x = 1\n"),
                                                          (12, "Sec", "# not a heading\ny = 2\n")]
    assert got[0].id == "L5-sec"


def _params():
    out = []
    for s in SNIPPETS:
        found = [e for e in ENTRIES if e.key in s.code]
        marks = [pytest.mark.slow] if len(found) == 1 and found[0].slow else []
        out.append(pytest.param(s, id=s.id, marks=marks))
    return out


@pytest.mark.parametrize("snippet", _params())
def test_readme_snippet_runs(snippet, tmp_path, monkeypatch, one_thread):
    entry = _entry(snippet)
    code = snippet.code
    for old, new in entry.replace:
        assert old in code, f"{snippet.page} {snippet.id}: replacement {old!r} no longer matches; update ENTRIES"
        code = code.replace(old, new)
    compiled = compile(code, f"{snippet.page}:{snippet.line}", "exec")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    try:
        from huggingface_hub import constants

        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))  # empty unless files() fills it
    except ImportError:
        pass
    cwd = tmp_path / "work"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    if entry.files is not None:
        entry.files(cwd, monkeypatch)
    namespace = {"__name__": "__readme__", **entry.given()}
    exec(compiled, namespace)
    entry.check(namespace, cwd)


# ----------------------------------------------------------------------------------------------- bash blocks
BASH = [s for page in PAGES for s in code_blocks(page.read_text(), str(page.relative_to(ROOT)), ("bash", "sh"))]


def _commands(code: str) -> list[str]:
    """The block's command lines, continuation lines joined, comment-only lines dropped."""
    out, cur = [], ""
    for line in code.splitlines():
        cur += line.rstrip()
        if cur.endswith("\\"):
            cur = cur[:-1] + " "
            continue
        if cur.strip() and not cur.lstrip().startswith("#"):
            out.append(cur.strip())
        cur = ""
    return out


def _words(command: str) -> list[str]:
    import shlex

    lexer = shlex.shlex(command, posix=True, punctuation_chars=False)
    lexer.whitespace_split, lexer.commenters = True, "#"
    return list(lexer)


def test_bash_blocks_are_found():
    assert len(BASH) >= 10 and any(s.page == "README.md" for s in BASH)
    assert _words("vision denoise 'a b/*.exr' -o out/   # FLNR") == ["vision", "denoise", "a b/*.exr", "-o", "out/"]
    assert [c.split() for c in _commands("a \\\n  b\n# c\n\nd\n")] == [["a", "b"], ["d"]]


def _extras() -> set[str]:
    """The optional-dependency groups pyproject.toml declares (its ``[project.optional-dependencies]`` keys)."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r"^([A-Za-z0-9_-]+)\s*=", section, re.M))


@pytest.mark.parametrize("block", BASH, ids=[f"{s.id}" for s in BASH])
def test_bash_block_commands_parse(block):
    """Each ``vision ...`` command of the block parses with the real parser (a renamed flag or subcommand fails
    here), ``python3 -m pip install`` names only extras that pyproject.toml declares, and every script a
    ``python`` / ``blender --python`` line names exists. Nothing is run: the commands need data, GPUs and
    renderers a test machine lacks."""
    from vision.pipelines.cli import COMMANDS, build_parser

    extras = _extras()
    for command in _commands(block.code):
        for part in re.split(r"\s(?:&&|\|\||;)\s", command):
            words = _words(part)
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):   # VAR=value prefixes
                words = words[1:]
            if not words:
                continue
            where = f"{block.page}:{block.line}: {part!r}"
            if words[0] == "vision":
                args = words[1:]
                assert args and args[0] in COMMANDS, f"{where}: no such command"
                parser = build_parser(args[0])
                try:
                    parser.parse_args(args)
                except SystemExit as err:
                    pytest.fail(f"{where}: the command line refuses it (exit {err.code})")
            for word in words:
                for extra in re.findall(r"\[([a-z,]+)\]", word) if "install" in words else []:
                    unknown = set(extra.split(",")) - extras
                    assert not unknown, f"{where}: extras {sorted(unknown)} are not in pyproject.toml"
                if word.endswith(".py") and not word.startswith("-") and "/" in word:
                    assert (ROOT / word).is_file(), f"{where}: {word} does not exist"


@pytest.mark.parametrize("snippet", BLENDER_SNIPPETS or [None], ids=lambda s: s.id if s else "none")
def test_blender_snippets_compile(snippet):
    """Python for Blender (``import bpy``) cannot run outside it: each such block at least compiles."""
    if snippet is None:
        pytest.skip("no Blender snippets in the pages")
    compile(snippet.code, f"{snippet.page}:{snippet.line}", "exec")
