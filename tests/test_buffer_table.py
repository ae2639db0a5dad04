"""The one table of render buffers (vision.data.fields.TABLE): every list of buffer names, the denoiser's guide
keywords and exr's channel map are derived from it, each list has one name, and no module spells a list of buffer
names by hand (an AST scan of the source; the few literals that are a choice of their own are listed below with
why). The renderer-facing columns are checked against what Blender's Cycles writes."""
import ast
import functools
import inspect
import re
from pathlib import Path

import pytest

from vision.data import fields as F

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("vision", "kernels", "pipelines", "benchmarks")
TABLE_MODULE = Path("vision/data/fields.py")

# (file, the names in the literal) -> why that literal is not derived from the table
ALLOWED = {
    ("vision/denoise/input_blend.py", ("normal", "albedo", "emission")):
        "SHARP_GUIDES: the sharp fit's guides, a subset chosen on tuning scenes (depth and AO changed nothing there)",
    ("vision/denoise/reproject.py", ("depth", "normal", "index")):
        "SURFACE_KEYS: the buffers that tell surfaces apart, in the order the numba loops take them",
    ("vision/denoise/reproject_cpu.py", ("depth", "normal", "index")):
        "the numba loops' key arguments in their order, the set of reproject.SURFACE_KEYS (importing that module "
        "from here would make a cycle: it imports this one lazily)",
    ("pipelines/cli/denoise_report.py", ("albedo", "normal")):
        "NEEDED: what the command refuses to run without, a policy of the command",
    ("vision/data/dataset.py", ("color", "reference")):
        "RenderedScenes' default fields, spelt in its signature for its users",
    ("pipelines/cli/evaluate_run.py", ("segment", "depth")):
        "the extra layers the dense metrics read (per-instance scores, depth-binned errors)",
    ("pipelines/demos/dense.py", ("segment", "depth")):
        "the extra layers the dense metrics read (per-instance scores, depth-binned errors)",
    ("pipelines/cli/finetune.py", ("depth", "semantic", "albedo")):
        "--task choices: names of dense tasks (vision.dense.tasks), a vocabulary of its own",
    ("pipelines/bench/denoise_sequences.py", ("normal", "albedo")):
        "FLAT_THRESHOLDS: the flat-pixel metric's thresholds per guide, a choice of the metric",
}


def _derived_regression_order():
    ranked = sorted((f for f in F.TABLE if f.feature is not None), key=lambda f: f.feature)
    return tuple(f.name for f in ranked)


def _fill(order, budget):
    out, used = [], 0
    for name in order:
        n = next(f.channels for f in F.TABLE if f.name == name)
        if used + n <= budget:
            out.append(name)
            used += n
    return tuple(out)


def test_the_table_is_well_formed():
    names = [f.name for f in F.TABLE]
    assert len(set(names)) == len(names) and F.NAMES == tuple(names)
    for f in F.TABLE:
        assert f.role in F.ROLES and f.meaning and f.units, f.name
        assert all(len(c) == f.channels for c in f.components), f.name
        assert (not f.exr) or len(f.exr) == f.channels, f.name
        assert f.dtype in ("float32", "uint32"), f.name
        assert bool(f.aliases) == bool(f.components), f.name
    # the history and the sample count are rows; the history is a count per pixel, the sample count a header value
    assert F.BY_NAME["history"].channels == 1 and F.BY_NAME["spp"].header


def test_guide_lists_are_derived_from_the_table():
    from vision.data import render_layers as R
    from vision.denoise import buffers as B, denoise, flnr
    from vision.denoise.flnr import cells
    from vision.pipelines.bench import denoise as bench, denoise_files, denoise_sequences
    from vision.pipelines.cli import denoise as cli, denoise_io
    from vision.pipelines.demos import denoise as demo
    from vision.pipelines.training import denoiser_data

    guides = tuple(f.name for f in F.TABLE if f.role == "guide")
    order = _derived_regression_order()
    layout = _fill(order, F.FEATURE_CHANNELS)
    flnr_guides = tuple(f.name for f in F.TABLE if f.role == "guide" and (f.name in layout or f.signal))
    assert F.GUIDES == guides
    assert F.INPUTS == ("color", *guides)
    assert F.SCORED == tuple(f.name for f in F.TABLE if f.role in ("color", "reference", "guide"))
    assert F.REGRESSION_ORDER == order and F.FLNR_LAYOUT == layout and F.FLNR_GUIDES == flnr_guides
    assert F.FLNR_TRAINING == ("color", "reference", *flnr_guides)
    assert F.SIGNAL == tuple(f.name for f in F.TABLE if f.signal)
    assert F.SEQUENCE == tuple(f.name for f in F.TABLE if f.role in ("motion", "index"))
    assert F.RENDER_PASSES == tuple(f.name for f in F.TABLE if f.aliases and f.role != "reference")
    # denoise()'s guide keywords are the table's guides, in its order, right after the colour
    params = list(inspect.signature(denoise).parameters)
    assert params[1:1 + len(guides)] == list(guides) and params[1 + len(guides)] not in F.NAMES
    # every module reads the table's own tuple, not a copy
    assert cli.GUIDES is denoise_io.GUIDES is bench.GUIDES is denoise_files.GUIDES is denoise_sequences.GUIDES \
        is F.GUIDES
    assert B.INPUTS is F.INPUTS and B.REGRESSION_ORDER is F.REGRESSION_ORDER
    assert flnr.FLNR_LAYOUT is cells.FLNR_LAYOUT is F.FLNR_LAYOUT
    assert demo.FLNR_GUIDES is denoiser_data.FLNR_GUIDES is F.FLNR_GUIDES
    assert denoiser_data.FLNR_TRAINING is F.FLNR_TRAINING and bench.SCORED is F.SCORED
    assert R.RENDER_PASSES is F.RENDER_PASSES and R.SEQUENCE is F.SEQUENCE
    # AO's channel in FLNR's guide layout, counted from the table
    assert denoiser_data.AO_CHANNEL == sum(F.CHANNELS[n] for n in layout[:layout.index("ao")]) == 4


def test_the_command_takes_one_option_per_guide():
    import argparse

    from vision.pipelines.cli import denoise as cli

    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    options = {o for a in p._actions for o in a.option_strings}
    assert {f"--{g}" for g in F.GUIDES} <= options


def test_exr_channel_map_is_derived_from_the_table():
    from vision.data import exr

    want = {f.name: (f.exr, f.dtype, f.meaning) for f in F.TABLE if f.exr}
    assert exr.LAYERS == want and list(exr.LAYERS) == list(want)
    assert F.ID_LAYERS == tuple(n for n, (_, dtype, _) in want.items() if dtype == "uint32") == ("segment",
                                                                                                  "semantic")
    # every channel vision render-scenes writes is read back as its own field by find_fields, where it has aliases
    found = F.find_fields([c for f in F.TABLE for c in f.exr])
    for f in F.TABLE:
        if f.exr and f.aliases:
            assert found[f.name] == list(f.exr), f.name


def test_docs_list_the_exr_channels_of_the_table():
    """docs/render-scenes.md's table of channels (for users) names the same channels, fields and types."""
    from vision.data import exr

    rows = {}
    for line in (ROOT / "docs" / "render-scenes.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1].startswith("`") and cells[2] in ("float32", "uint32"):
            rows[cells[1].strip("`")] = (tuple(re.findall(r"`([^`]+)`", cells[0])), cells[2])
    assert rows == {k: (v[0], v[1]) for k, v in exr.LAYERS.items()}


def test_blender_words_come_from_the_table():
    from vision.pipelines.cli import denoise_report

    assert denoise_report.IN_BLENDER is F.IN_BLENDER
    assert F.IN_BLENDER["albedo"] == F.IN_BLENDER["normal"] == F.IN_BLENDER["depth"]  # one pass, Denoising Data
    assert F.SAMPLE_COUNT_KEYS == F.BY_NAME["spp"].header


def _cycles_passes(engine: Path) -> dict[str, list[tuple[str, str]]]:
    """Blender's Cycles add-on (engine.py, list_render_passes): view-layer property -> the passes it writes."""
    out: dict[str, list[tuple[str, str]]] = {}
    cond = None
    for line in engine.read_text().splitlines():
        if line.lstrip().startswith("if "):  # a pass's condition: one view-layer property, or something else
            m = re.match(r"\s*if (srl|crl)\.(\w+):", line)
            cond = (("cycles." if m.group(1) == "crl" else "") + m.group(2)) if m else None
        y = re.search(r'yield \("([^"]+)",\s*"([^"]+)"', line)
        if y and cond:
            out.setdefault(cond, []).append((y.group(1), y.group(2)))
    return out


def test_cycles_pass_names_are_what_blender_writes():
    """Each row's Cycles pass is written by the property the row names, with components the row accepts, and
    find_fields reads it by that name (checked against Blender's own Cycles add-on when Blender is installed)."""
    engine = next(iter(sorted(Path("/usr/share/blender").glob("**/addons/cycles/engine.py"))), None) \
        if Path("/usr/share/blender").is_dir() else None
    if engine is None:
        pytest.skip("Blender's Cycles add-on is not installed here")
    passes = _cycles_passes(engine)
    for f in F.TABLE:
        if not f.blender:
            continue
        written = dict(passes[f.blender[0]])
        assert f.cycles in written, (f.name, f.blender[0], written)
        comps = tuple(written[f.cycles][:f.channels])
        assert comps in f.components, (f.name, comps)
        channels = [f"ViewLayer.{f.cycles}.{c}" for c in written[f.cycles]]
        assert F.find_fields(channels)[f.name] == channels[:f.channels], f.name


def test_the_blender_addon_turns_on_the_tables_passes():
    """The add-on (pure bpy, it cannot import vision) turns on view-layer passes by property: each is a row's."""
    src = (ROOT / "pipelines/blender_addon/vision_denoise/scene_setup.py").read_text()
    props = {prop for _, owner, prop in re.findall(r'_set\(changes, (layer)(\.cycles)?, "(\w+)"', src)
             for prop in [("cycles." if owner else "") + prop]}
    rows = [f for f in F.TABLE if f.blender]
    assert props and props <= {f.blender[0] for f in rows}
    for f in rows:
        if f.blender[0] in props:
            place = f.blender[1].split(" > ", 1)[1].split(",")[0]  # "Passes > Data > Vector"
            assert place in src, (f.name, place)
    # it turns on what the command asks for (albedo and normal, motion for sequences) and the emission
    on = {f.name for f in rows if f.blender[0] in props}
    assert on >= {"albedo", "normal", "depth", "motion", "emission"}


def test_mitsuba_aov_names_are_the_tables():
    src = (ROOT / "benchmarks/denoise/mitsuba_eval.py").read_text()
    aovs = ast.literal_eval(re.search(r'^AOVS = (".*")$', src, re.M).group(1))
    for pair in aovs.split(","):
        layer, kind = pair.split(":")
        field = next(f for f in F.TABLE if layer in f.aliases)
        assert kind in field.aliases or kind.replace("sh_", "") in field.aliases, pair


# --------------------------------------------------------------------------- one name per list, no literal lists

@functools.lru_cache(maxsize=1)
def _trees() -> tuple:
    """(path relative to the checkout, parsed module) of every source file, parsed once for both scans."""
    return tuple((p.relative_to(ROOT), ast.parse(p.read_text())) for folder in SOURCES
                 for p in sorted((ROOT / folder).rglob("*.py")))


def _fields_import(node) -> bool:
    return isinstance(node, ast.ImportFrom) and (node.module or "").endswith("fields") and (
        node.module == "vision.data.fields" or (node.level and node.module == "fields"))


def test_each_list_has_one_name():
    """No module renames a list of the table (``import GUIDES as OPTIONAL``, ``BUFFERS = GUIDES`` at module or class
    level)."""
    lists = {n for n in dir(F) if n.isupper()}
    bad = []
    for rel, tree in _trees():
        for node in ast.walk(tree):
            if _fields_import(node):
                bad += [f"{rel}:{node.lineno}: {a.name} as {a.asname}" for a in node.names
                        if a.asname and a.asname != a.name]
        outer = [*tree.body, *(n for c in tree.body if isinstance(c, ast.ClassDef) for n in c.body)]
        for node in outer:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                v = node.value
                name = v.id if isinstance(v, ast.Name) else v.attr if isinstance(v, ast.Attribute) else None
                if name in lists and node.targets[0].id != name:
                    bad.append(f"{rel}:{node.lineno}: {node.targets[0].id} = {name}")
    assert not bad, "a list of the buffer table under a second name:\n" + "\n".join(bad)


def _literal(node) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _names_in(node) -> tuple[str, ...] | None:
    """The buffer names of a literal list, tuple or set (or a dict of literals keyed by them: a table of its own),
    if two or more."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        elts = node.elts
    elif isinstance(node, ast.Dict) and all(_literal(v) for v in node.values):
        elts = [k for k in node.keys if k is not None]
    else:
        return None
    names = tuple(e.value for e in elts if isinstance(e, ast.Constant) and e.value in F.NAMES)
    return names if len(names) >= 2 else None


def test_no_literal_list_of_buffer_names_outside_the_table():
    found, used = [], set()
    for rel, tree in _trees():
        if rel == TABLE_MODULE:
            continue
        for node in ast.walk(tree):
            names = _names_in(node)
            if names is None:
                continue
            key = (rel.as_posix(), names)
            if key in ALLOWED:
                used.add(key)
            else:
                found.append(f"{rel}:{node.lineno}: {names}")
    assert not found, ("lists of buffer names spelt by hand; derive them from vision.data.fields.TABLE (or, for a "
                       "choice of their own, add them to ALLOWED with why):\n" + "\n".join(found))
    assert used == set(ALLOWED), f"allowed literals no longer in the source: {set(ALLOWED) - used}"


def test_the_scan_finds_a_literal_list():
    """The scan itself: a hand-written guide list is found, a derived one and a single name are not."""
    tree = ast.parse('A = ("albedo", "normal")\nB = tuple(GUIDES)\nC = ("color",)\nD = {"albedo": 1, "depth": 2}\n'
                     'E = {"albedo": x, "depth": y}\nF = {"albedo": (("albedo.R",), "float32"), "ao": ((), "")}\n')
    hits = [_names_in(n) for n in ast.walk(tree) if _names_in(n)]
    assert hits == [("albedo", "normal"), ("albedo", "depth"), ("albedo", "ao")]
