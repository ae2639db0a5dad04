"""The Blender add-on (``vision blender-addon``), its manifest against the schema Blender documents, its background
runner, and the add-on in a real Blender (skipped, with the reason shown, where ``blender`` is not on PATH)."""
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import numpy as np
import pytest

from vision.pipelines.cli import main

HERE = Path(__file__).parent
SEQ = HERE / "data" / "blender" / "seq"
VISION = Path(sys.executable).with_name("vision")
BLENDER = shutil.which("blender")
needs_blender = pytest.mark.skipif(BLENDER is None, reason="blender is not on PATH: the add-on's Blender tests need "
                                                           "Blender 3.4 or later (Debian: apt-get install blender)")
needs_vision = pytest.mark.skipif(not VISION.is_file(), reason=f"no vision command beside {sys.executable}")


@pytest.fixture(scope="module")
def addon_zip(tmp_path_factory):
    out = tmp_path_factory.mktemp("addon") / "vision_denoise.zip"
    assert main(["blender-addon", "-o", str(out)]) == 0
    return out


# --------------------------------------------------------------------------- the manifest, as Blender documents it

# Blender manual, Extensions > Getting started > Manifest (schema 1.0.0): required and optional keys and their types
REQUIRED = {"schema_version": str, "id": str, "version": str, "name": str, "tagline": str, "maintainer": str,
            "type": str, "blender_version_min": str, "license": list}
OPTIONAL = {"website": str, "copyright": list, "blender_version_max": str, "tags": list, "platforms": list,
            "wheels": list, "permissions": dict, "build": dict}
PERMISSIONS = {"files", "network", "clipboard", "camera", "microphone"}
ADDON_TAGS = {"3D View", "Add Curve", "Add Mesh", "Animation", "Bake", "Camera", "Compositing", "Development",
              "Game Engine", "Geometry Nodes", "Grease Pencil", "Import-Export", "Lighting", "Material", "Modeling",
              "Mesh", "Node", "Object", "Paint", "Pipeline", "Physics", "Render", "Rigging", "Scene", "Sculpt",
              "Sequencer", "System", "Text Editor", "Tracking", "User Interface", "UV"}
SEMVER = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)")


def manifest_problems(m: dict) -> list[str]:
    """Every way ``m`` (a parsed blender_manifest.toml) breaks the documented schema, one line each."""
    bad = [f"missing {k}" for k in REQUIRED if k not in m]
    bad += [f"unknown key {k}" for k in m if k not in REQUIRED and k not in OPTIONAL]
    bad += [f"{k} is {type(v).__name__}, not {({**REQUIRED, **OPTIONAL})[k].__name__}" for k, v in m.items()
            if k in {**REQUIRED, **OPTIONAL} and not isinstance(v, ({**REQUIRED, **OPTIONAL})[k])]
    if bad:
        return bad
    if m["schema_version"] != "1.0.0":
        bad.append(f"schema_version {m['schema_version']}")
    if not re.fullmatch(r"[a-z][a-z0-9_]*[a-z0-9]", m["id"]):
        bad.append(f"id {m['id']!r} is not a lowercase identifier")
    for key in ("version", "blender_version_min", *(["blender_version_max"] if "blender_version_max" in m else [])):
        if not SEMVER.fullmatch(m[key]):
            bad.append(f"{key} {m[key]!r} is not MAJOR.MINOR.PATCH")
    if SEMVER.fullmatch(m["blender_version_min"]) and tuple(map(int, m["blender_version_min"].split("."))) < (4, 2, 0):
        bad.append("blender_version_min below 4.2.0 (extensions start there)")
    if m["type"] not in ("add-on", "theme"):
        bad.append(f"type {m['type']!r}")
    if len(m["tagline"]) > 64 or m["tagline"][-1:] in ".!?,;:":
        bad.append("tagline over 64 characters or ending in punctuation")
    if not m["license"] or not all(isinstance(x, str) and x.startswith("SPDX:") for x in m["license"]):
        bad.append("license must list SPDX:... identifiers")
    bad += [f"tag {t!r} is not an add-on tag" for t in m.get("tags", []) if t not in ADDON_TAGS]
    for k, why in m.get("permissions", {}).items():
        if k not in PERMISSIONS:
            bad.append(f"unknown permission {k}")
        elif not isinstance(why, str) or not why or len(why) > 64 or why.endswith("."):
            bad.append(f"permission {k}: the reason must be a short sentence without a final period")
    return bad


def test_manifest_check_finds_what_it_should():
    good = {"schema_version": "1.0.0", "id": "x_y", "version": "1.2.3", "name": "X", "tagline": "Does x",
            "maintainer": "me", "type": "add-on", "blender_version_min": "4.2.0", "license": ["SPDX:MIT"]}
    assert manifest_problems(good) == []
    assert manifest_problems({k: v for k, v in good.items() if k != "tagline"}) == ["missing tagline"]
    assert manifest_problems({**good, "version": 1}) == ["version is int, not str"]
    assert manifest_problems({**good, "tagline": "Does x."}) and manifest_problems({**good, "id": "X-y"})
    assert manifest_problems({**good, "blender_version_min": "3.4.0"}) and manifest_problems({**good, "colour": 1})
    assert manifest_problems({**good, "permissions": {"files": "Reads."}})
    assert manifest_problems({**good, "license": ["MIT"]}) and manifest_problems({**good, "tags": ["Renders"]})


def test_built_zip_is_a_legacy_addon_and_an_extension(addon_zip):
    with zipfile.ZipFile(addon_zip) as z:
        names = z.namelist()
        assert all(n.startswith("vision_denoise/") for n in names)  # one folder: both installers take it
        assert {"vision_denoise/__init__.py", "vision_denoise/blender_manifest.toml"} <= set(names)
        assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
        manifest = tomllib.loads(z.read("vision_denoise/blender_manifest.toml").decode())
        init = z.read("vision_denoise/__init__.py").decode()
        sources = {n: z.read(n).decode() for n in names if n.endswith(".py")}
    assert manifest_problems(manifest) == []
    assert manifest["id"] == "vision_denoise" and manifest["type"] == "add-on"
    info = next(ast.literal_eval(node.value) for node in ast.parse(init).body
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "bl_info")
    assert info["blender"] == (3, 4, 0) and info["name"] == "Vision Denoise"
    assert ".".join(map(str, info["version"])) == manifest["version"]
    for name, text in sources.items():  # extensions must import their own modules relatively; no torch, no vision
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                mods = [node.module]
            else:
                continue
            assert not {m.split(".")[0] for m in mods} & {"vision_denoise", "vision", "torch", "numpy"}, (name, mods)


def test_blender_addon_command_refuses_what_is_not_a_zip(tmp_path, capsys):
    assert main(["blender-addon", "-o", str(tmp_path / "a.txt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "-o" in err[0] and ".zip" in err[0]
    (tmp_path / "d.zip").mkdir()
    assert main(["blender-addon", "-o", str(tmp_path / "d.zip")]) == 2
    assert "folder" in capsys.readouterr().err


# --------------------------------------------------------------------------- the runner (no Blender needed)

def _runner():
    sys.path.insert(0, str(HERE.parent / "pipelines" / "blender_addon" / "vision_denoise"))
    try:
        import runner
    finally:
        sys.path.pop(0)
    return runner


def test_a_vision_path_that_does_not_exist_is_one_line(tmp_path):
    runner = _runner()
    ok, line = runner.check_vision(str(tmp_path / "no" / "vision"))
    assert not ok and str(tmp_path / "no" / "vision") in line and "not found" in line and "\n" not in line
    assert runner.find_vision(str(tmp_path / "no" / "vision")) is None


@needs_vision
@pytest.mark.slow
def test_cancel_in_the_middle_keeps_written_frames_and_leaves_no_partial_file(tmp_path):
    """A Cancel (SIGTERM) after two frames: the command exits 143, the frames written are whole EXRs, nothing
    else is left in the output folder, and a rerun skips those frames."""
    from vision.data import read_exr, write_exr

    runner = _runner()
    src = [read_exr(SEQ / f"noisy_{t:04d}.exr") for t in (1, 2, 3)]
    frames = []
    for k in range(24):  # 24 frames of 160 x 120 (the fixture tiled): long enough to stop in the middle
        ch = {n: np.ascontiguousarray(np.tile(v, (4, 4))) for n, v in src[k % 3].items()}
        frames.append(tmp_path / "in" / f"f_{k:04d}.exr")
        frames[-1].parent.mkdir(exist_ok=True)
        write_exr(frames[-1], ch)
    out = tmp_path / "out"
    job = runner.Job(runner.denoise_command(str(VISION), [str(f) for f in frames], str(out), temporal=True,
                                            extra=["--model", "flr"]))
    seen = []
    import time
    while job.running() and job.done < 2:
        seen += job.poll()
        time.sleep(0.01)
    job.cancel()
    rc = job.wait()
    assert rc == 143, (rc, job.stderr)
    assert job.cancelled and 2 <= job.done < len(frames), job.done
    written = sorted(out.iterdir())
    assert [p.name for p in written] == [f"f_{k:04d}.exr" for k in range(len(written))]  # no partial, no temp
    for p in written:
        assert read_exr(p)["ViewLayer.Combined.R"].shape == (120, 160)
    assert seen[0]["event"] == "start" and seen[0]["frames"] == len(frames)
    assert [e["index"] for e in seen if e["event"] == "frame"][:2] == [1, 2]


def test_progress_json_is_one_object_per_line(tmp_path, capsys):
    capsys.readouterr()
    frames = [str(SEQ / f"noisy_{t:04d}.exr") for t in (1, 2, 3)]
    assert main(["denoise", *frames, "-o", str(tmp_path / "o"), "--temporal", "--model", "flr",
                 "--progress", "json"]) == 0
    out, err = capsys.readouterr()
    events = [json.loads(line) for line in out.strip().splitlines()]  # every line of stdout is JSON
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "done" and kinds.count("frame") == 3
    frames_seen = [e for e in events if e["event"] == "frame"]
    assert [e["index"] for e in frames_seen] == [1, 2, 3] and all(e["status"] == "denoised" for e in frames_seen)
    assert all(Path(e["output"]).is_file() for e in frames_seen) and events[-1]["denoised"] == 3
    assert "frame/s" not in err  # no progress bar beside the stream
    assert main(["denoise", *frames, "-o", str(tmp_path / "o"), "--temporal", "--model", "flr",
                 "--progress", "json"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert [e["status"] for e in events if e["event"] == "frame"] == ["skipped"] * 3


# --------------------------------------------------------------------------- the add-on in Blender

def _blender(tmp_path, addon_zip, steps, vision=str(VISION), extra="--model flr"):
    env = {**os.environ, "BLENDER_USER_SCRIPTS": str(tmp_path / "scripts"),
           "BLENDER_USER_CONFIG": str(tmp_path / "config")}
    args = json.dumps({"zip": str(addon_zip), "work": str(tmp_path), "vision": vision, "steps": steps,
                       "extra": extra})
    done = subprocess.run([BLENDER, "-b", "--factory-startup", "-noaudio", "--python",
                           str(HERE / "blender_addon_scene.py"), "--", args], capture_output=True, text=True,
                          env=env, timeout=600)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(line[len("RESULT "):]), done.stdout


def _rgb(ch):
    return np.stack([ch[f"ViewLayer.Combined.{c}"] for c in "RGB"], -1).astype(np.float64)


@needs_blender
@needs_vision
@pytest.mark.slow
def test_addon_sets_up_renders_and_denoises_an_animation_in_blender(tmp_path, addon_zip):
    from vision.data import read_exr

    res, log = _blender(tmp_path, addon_zip, ["setup", "render", "test", "denoise"])
    before, after = res["before"], res["after"]
    # each setting the setup changes, one by one, and the line it reported for it
    for key, want, said in (("engine", "CYCLES", "Render engine"), ("denoising_data", True, "Denoising Data"),
                            ("vector", True, "Passes > Data > Vector"), ("emit", True, "Passes > Light > Emission"),
                            ("file_format", "OPEN_EXR_MULTILAYER", "File Format"), ("color_depth", "32", "Color Depth"),
                            ("animated_seed", True, "Seed: animated"), ("motion_blur", False, "Motion Blur"),
                            ("cycles_denoise", False, "Denoise")):
        assert before[key] != want and after[key] == want, key
        assert f"{said}" in log, said
    assert "Vector Blur" in log and res["setup"] == ["FINISHED"] and res["test"] == ["FINISHED"]
    assert res["denoise"] == ["FINISHED"], res
    assert res["images"] and res["images"][0][1] == "SEQUENCE"
    for t in (1, 2, 3):
        noisy = read_exr(tmp_path / "noisy" / f"frame_{t:04d}.exr")
        got = read_exr(tmp_path / "denoised" / f"frame_{t:04d}.exr")
        ref = _rgb(read_exr(tmp_path / "ref" / f"frame_{t:04d}.exr"))
        assert set(got) == set(noisy)  # every layer and pass of the input is kept
        assert "ViewLayer.Vector.X" in got and "ViewLayer.Denoising Albedo.R" in got
        err_noisy = np.mean((_rgb(noisy) - ref) ** 2)
        err_denoised = np.mean((_rgb(got) - ref) ** 2)
        assert err_denoised < 0.7 * err_noisy, (t, err_denoised, err_noisy)


@needs_blender
@needs_vision
@pytest.mark.slow
def test_addon_says_one_line_for_frames_without_the_passes_and_for_a_missing_vision(tmp_path, addon_zip):
    res, _ = _blender(tmp_path, addon_zip, ["plain", "denoise"])  # rendered without Set up for denoising
    assert res["denoise"][0] == "ERROR"
    line = res["denoise"][1].strip().splitlines()
    assert len(line) == 1 and "Denoising Data" in line[0] and "Passes > Data > Vector" in line[0], line
    assert res["status"].startswith("Failed: ") and not (tmp_path / "denoised").exists()
    missing = str(tmp_path / "nowhere" / "vision")
    res, _ = _blender(tmp_path / "b", addon_zip, ["test", "denoise"], vision=missing)
    for step in ("test", "denoise"):
        assert res[step][0] == "ERROR" and missing in res[step][1] and "not found" in res[step][1], res


@needs_blender
@needs_vision
@pytest.mark.slow
def test_auto_denoise_is_off_by_default_and_follows_an_animation_render_when_on(tmp_path, addon_zip):
    res, _ = _blender(tmp_path, addon_zip, ["setup", "render", "auto"])
    assert not (tmp_path / "noisy" / "denoised").exists()  # the first render, with the default (off)
    assert sorted(p.name for p in (tmp_path / "auto").iterdir()) == [f"frame_{t:04d}.exr" for t in (1, 2, 3)]
    assert res["auto_status"].startswith("denoised 3 frame(s)")


def test_a_warning_is_said_once_per_run_and_not_under_q(tmp_path, capsys):
    """NaN samples in each of three frames: the warning names the first frame, one more line counts the other two;
    -q says nothing on stderr and the summary counts what it hid."""
    from vision.data import read_exr, write_exr

    for t in (1, 2, 3):
        ch = read_exr(SEQ / f"noisy_{t:04d}.exr")
        r = ch["ViewLayer.Combined.R"].copy()
        r[:t, 0] = np.nan  # 1, 2 and 3 pixels: the same warning with another count
        write_exr(tmp_path / f"f_{t}.exr", {**ch, "ViewLayer.Combined.R": r})
    capsys.readouterr()
    args = ["denoise", str(tmp_path / "f_*.exr"), "--temporal", "--model", "flr"]
    assert main([*args, "-o", str(tmp_path / "a")]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    first = [line for line in err if "more frame(s) after" not in line]
    more = [line for line in err if "2 more frame(s) after" in line]
    assert first and len(more) == len(first) == len(err) // 2, err  # (the colour, and the sky's emission from it)
    assert all("f_1.exr: " in line and "NaN/Inf" in line for line in first), err
    assert not any("f_2.exr" in line or "f_3.exr" in line for line in err), err
    assert main([*args, "-o", str(tmp_path / "b"), "-q"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and f"{3 * len(first)} warning(s) not shown (-q)" in out


@needs_blender
@pytest.mark.slow
def test_albedo_note_fits_what_cycles_writes(tmp_path, capsys):
    """Blender's default Principled BSDF writes Denoising Albedo above 1.05 with no emitter anywhere: no note. An
    emitter in view without the Emission pass: the note, saying where the pass is; with the pass: none."""
    from vision.data import read_exr

    subprocess.run([BLENDER, "-b", "--factory-startup", "-noaudio", "--python", str(HERE / "blender_albedo_scene.py"),
                    "--", str(tmp_path)], capture_output=True, timeout=300, check=True)
    ch = read_exr(tmp_path / "cube.exr")
    albedo = np.stack([ch[f"ViewLayer.Denoising Albedo.{c}"] for c in "RGB"], -1)
    assert 1.05 < albedo.max() < 2.5, albedo.max()  # layered closures, no emitter: what the old rule warned on

    def warned(name):
        capsys.readouterr()
        assert main(["denoise", str(tmp_path / name), "-o", str(tmp_path / "o"), "--model", "flr"]) == 0
        return capsys.readouterr().err

    assert "albedo above" not in warned("cube.exr")
    err = warned("lamp.exr")
    assert "albedo above 2.5" in err and "Passes > Light > Emission" in err  # (the sky's colour is emission too)
    assert "albedo above" not in warned("lamp_emit.exr")


def _blender_version():
    if BLENDER is None:
        return None
    done = subprocess.run([BLENDER, "--version"], capture_output=True, text=True, timeout=120)
    m = re.search(r"Blender (\d+)\.(\d+)", done.stdout)
    return (int(m.group(1)), int(m.group(2))) if m else None


@pytest.mark.slow
def test_blenders_own_extension_validate_passes(addon_zip):
    """Blender 4.2+'s validator: `blender --command extension validate`, or its script blender_ext.py (from a Blender
    or bpy 4.2+ installation) named by VISION_BLENDER_EXT; skipped when neither is here."""
    script = os.environ.get("VISION_BLENDER_EXT")
    if script:
        argv = [sys.executable, script, "validate", str(addon_zip)]
    elif (_blender_version() or (0, 0)) >= (4, 2):
        argv = [BLENDER, "--command", "extension", "validate", str(addon_zip)]
    else:
        pytest.skip("no Blender 4.2 or later here (and VISION_BLENDER_EXT unset): Blender's extension validate not run")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "FATAL_ERROR" not in done.stdout + done.stderr, done.stdout + done.stderr


def test_blender_frames_without_denoising_data_stop_in_one_line(tmp_path, capsys):
    """A real Cycles frame with its Denoising Data passes removed (the Normal and Depth passes stay, so only albedo
    is missing): exit 2, one line naming the frame, the missing buffer and where Blender turns it on."""
    from vision.data import read_exr, write_exr

    ch = read_exr(SEQ / "noisy_0001.exr")
    write_exr(tmp_path / "f_1.exr", {k: v for k, v in ch.items() if ".Denoising " not in k})
    capsys.readouterr()
    assert main(["denoise", str(tmp_path / "f_1.exr"), "-o", str(tmp_path / "o"), "-q", "--model", "flr"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "f_1.exr: no albedo buffer (view layer ViewLayer)" in err[0], err
    assert "View Layer Properties > Passes > Data > Denoising Data" in err[0] and "--allow-no-guides" in err[0]
    assert not (tmp_path / "o").exists()
    # with --temporal and neither Denoising Data nor Vector: both named in the one line
    write_exr(tmp_path / "f_1.exr", {k: v for k, v in ch.items() if ".Denoising " not in k and ".Vector." not in k})
    assert main(["denoise", str(tmp_path / "f_1.exr"), "-o", str(tmp_path / "o"), "-q", "--temporal"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Denoising Data" in err[0] and "Passes > Data > Vector" in err[0], err


@needs_vision
@pytest.mark.slow
def test_installs_and_runs_as_an_extension_in_blender_4_2(tmp_path, addon_zip):
    """Blender 4.2+ (a Python with the bpy wheel, named by VISION_BPY_PYTHON): the zip installs as an extension
    (bl_ext.user_default.vision_denoise), and Test, Set up and Denoise animation run."""
    python = os.environ.get("VISION_BPY_PYTHON")
    if not python:
        pytest.skip("VISION_BPY_PYTHON unset (a Python with the bpy 4.2+ wheel): the extension install not tried")
    env = {**os.environ, **{f"BLENDER_USER_{k}": str(tmp_path / k.lower())
                            for k in ("RESOURCES", "SCRIPTS", "CONFIG", "EXTENSIONS")}}
    done = subprocess.run([python, str(HERE / "blender_extension_install.py"), str(addon_zip), str(VISION),
                           str(tmp_path)], capture_output=True, text=True, env=env, timeout=600)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, done.stdout[-3000:] + done.stderr[-3000:]
    res = json.loads(line[len("RESULT "):])
    assert res["install"] == ["FINISHED"] and res["module"] == "bl_ext.user_default.vision_denoise"
    assert res["test"] == res["setup"] == res["denoise"] == ["FINISHED"]
    assert res["files"] == [f"frame_{t:04d}.exr" for t in (1, 2, 3)]
