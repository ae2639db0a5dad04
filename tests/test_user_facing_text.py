"""What users read speaks about the product: no machine's absolute paths and no words about how the work was
organised, in any tracked file (code, comments, docstrings and so ``--help``, docs, ``assets/SOURCES.md``, test
fixtures' notes) nor in the bundled weights' metadata.

Every offending ``file:line`` is printed, so one run lists everything to fix. The patterns are narrow on purpose:
``/tmp/`` after a space or quote is a machine path, ``tempfile`` is not; "issue 40" is a tracker number, "the
issue" is English; "a helper who" is a person, a helper function is not.
"""
from __future__ import annotations

import json
import re
import struct
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# One machine's absolute paths (a path at the start of a word: not a URL's path, not "~/x" or "./tmp/").
MACHINE_PATH = re.compile(r"(?<![\w.~$/:-])/(?:work|home|tmp|root|Users|mnt|scratch)/")
# Words about the process rather than the product.
PROCESS_WORDS = re.compile("|".join((
    r"\bissues? #?\d+",                                       # tracker numbers
    r"\bround (?:one|two|three|four|five|\d+)\b",             # review rounds
    r"\bacceptance \d",                                      # a tracker's numbered acceptance criteria
    r"device-check",                                         # the CI's GPU script, named outside .ci/
    r"\b(?:this|that|a|the|next|previous|earlier) sessions?\b",
    r"\bhelpers? who\b", r"\bby (?:a|another) helper\b",
    r"\bnot drawn\b", r"\blent (?:a |the )?(?:GPU|machine|device)\b",
    r"\bto a (?:different )?brief\b",
    r"gpu_review",
    r"\((?:day|night|evening|morning)\)",                  # diary time stamps
)), re.IGNORECASE)

# The CI's own scripts (they run on the CI's machines and name its paths); this file (it holds the patterns).
SKIP_PREFIXES = (".ci/", "tests/test_user_facing_text.py")


def tracked_text_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout (the check runs on the tracked files)")
    files = []
    for name in out.decode().split("\0"):
        if not name or name.startswith(SKIP_PREFIXES):
            continue
        path = ROOT / name
        if not path.is_file():
            continue
        head = path.read_bytes()[:8192]
        if b"\0" in head:  # binary: images, EXR, weights (the weights' metadata is checked below)
            continue
        files.append(path)
    return files


def offences(text: str, where: str) -> list[str]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        for rx, what in ((MACHINE_PATH, "machine path"), (PROCESS_WORDS, "process words")):
            m = rx.search(line)
            if m:
                out.append(f"{where}:{n}: {what} {m.group(0)!r}: {line.strip()[:160]}")
    return out


def test_patterns_catch_what_they_should_and_nothing_else():
    bad = ["see /work/data/seq", "'/home/me/x.exr'", "--out /tmp/tiny", "(issue 37)", "Issue 40, finding 4",
           "review round two", "acceptance 2d", "bash .ci/device-check", "this session had no GPU",
           "built by a helper who had not seen it", "(`status`: not drawn)", "a lent GPU", "2026-12-05 (night)"]
    good = ["tempfile.mkdtemp()", "https://download.pytorch.org/whl/cpu", "data/tmp/x", "~/work/x", "the issue",
            "a helper function", "round-trip", "rounds of 5", "acceptance checks", "a night courtyard",
            "a training run", "tests/data/seq"]
    for text in bad:
        assert offences(text, "x"), text
    for text in good:
        assert not offences(text, "x"), text


def test_no_machine_paths_or_process_words_in_tracked_files():
    found = []
    for path in tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += offences(text, str(path.relative_to(ROOT)))
    assert not found, "user-facing text to fix:\n" + "\n".join(found)


def safetensors_metadata(path: Path) -> dict:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)).get("__metadata__") or {}


@pytest.mark.parametrize("path", sorted((ROOT / "assets").rglob("*.safetensors")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_bundled_weights_metadata(path):
    meta = safetensors_metadata(path)
    found = [o for key, value in meta.items() for o in offences(str(value), f"{path.relative_to(ROOT)}[{key}]")]
    assert not found, "\n".join(found)


def test_package_version_is_one_version():
    """pyproject.toml and ``vision.__version__`` (what outputs and ``vision --version`` record) agree."""
    import vision

    declared = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert vision.__version__ == declared
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## [{declared}]" in changelog, "every released version has its CHANGELOG section"
