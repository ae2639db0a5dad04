"""The layout's promises (ARCHITECTURE.md): layers import downwards, no import cycle between modules or sibling
folders, light imports, no shadowing from the checkout root, the runtime's switches, docs that cite what exists."""
import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from project_files import project_files

ROOT = Path(__file__).resolve().parents[1]
LAYERS = {"vision": ROOT / "vision", "vision.kernels": ROOT / "kernels", "vision.pipelines": ROOT / "pipelines"}
RANK = {"vision.kernels": 0, "vision": 1, "vision.pipelines": 2}  # a layer imports only its own rank and lower


def _modules() -> dict[str, Path]:
    found = {}
    for prefix, folder in LAYERS.items():
        for path in project_files("*.py", under=folder):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([prefix, *parts])
            if prefix == "vision" and parts and parts[0] in ("kernels", "pipelines"):
                continue
            found[name] = path
    return found


def _imports(name: str, path: Path, modules) -> set[str]:
    """Every module of ours that ``name`` imports, anywhere in its body (functions included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def _registered(name: str, path: Path, modules) -> set[str]:
    """Modules of ours named by the string values of a dict literal in ``name``: registries (``cli.COMMANDS``,
    ``bench.BENCHES``) and lazy-export tables, which importlib imports on use."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Dict):
            for v in node.values:
                if isinstance(v, ast.Constant) and isinstance(v.value, str):
                    for target in (v.value, f"{package}.{v.value}"):
                        if target in modules and target != name:
                            out.add(target)
    return out


def _layer(name: str) -> str:
    return next((p for p in ("vision.kernels", "vision.pipelines") if name == p or name.startswith(p + ".")), "vision")


def test_layers_match_setup_py():
    tree = ast.parse((ROOT / "setup.py").read_text())
    setup_layers = next(ast.literal_eval(n.value) for n in tree.body
                        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "LAYERS")
    assert {k: ROOT / v for k, v in setup_layers.items()} == LAYERS and set(RANK) == set(LAYERS)


@pytest.mark.slow
def test_layers_import_downwards():
    """kernels/ imports nothing from vision/ or pipelines/; vision/ never imports pipelines/ (imports inside
    functions and registries of module names count)."""
    modules = _modules()
    wrong = sorted(f"{n} -> {m}" for n, p in modules.items()
                   for m in _imports(n, p, modules) | _registered(n, p, modules) if RANK[_layer(m)] > RANK[_layer(n)])
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_import_scan_sees_function_imports_and_registries(tmp_path):
    """The scans above would pass vacuously if they missed imports inside functions or registries."""
    mod = tmp_path / "mod.py"
    mod.write_text("def f():\n    from vision.pipelines.cli import main\n    import vision.restore as r\n"
                   "REG = {'x': 'vision.pipelines.bench'}\n")
    modules = _modules()
    assert _imports("vision.kernels.mod", mod, modules) == {"vision.pipelines.cli", "vision.restore"}
    assert _registered("vision.kernels.mod", mod, modules) == {"vision.pipelines.bench"}


def _cycles(graph: dict[str, set[str]], allowed=lambda cycle: False) -> list[str]:
    """One cycle (as "a -> b -> a") per back edge a depth-first walk of ``graph`` meets, unless ``allowed``."""
    colour, stack, cycles = {}, [], []

    def visit(n):
        colour[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if colour.get(m) == 1:
                cycle = stack[stack.index(m):] + [m]
                if not allowed(cycle):
                    cycles.append(" -> ".join(cycle))
            elif m not in colour:
                visit(m)
        stack.pop()
        colour[n] = 2

    for n in sorted(graph):
        if n not in colour:
            visit(n)
    return cycles


@pytest.mark.slow
def test_no_cycle_between_sibling_folders():
    """Sibling folders of pipelines/ and vision/ (pipelines/bench and pipelines/cli, vision/denoise and vision/data,
    ...) import one way: an import from a.x.y to b.z is an edge from folder a to folder b when a and b share a
    parent. What both sides need lives beside them (pipelines/plugins.py holds what cli and bench share). Inside
    kernels/ the op folders and runtime/ are not checked here (the module-level test covers them)."""
    modules = _modules()
    packages = {n for n, p in modules.items() if p.name == "__init__.py"}
    graph: dict[str, set[str]] = {}
    for n, p in modules.items():
        for m in _imports(n, p, modules) | _registered(n, p, modules):
            a, b = n.split("."), m.split(".")
            common = 0
            while common < min(len(a), len(b)) and a[common] == b[common]:
                common += 1
            if common < len(a) and common < len(b):  # neither is inside the other
                fa, fb = ".".join(a[:common + 1]), ".".join(b[:common + 1])
                if fa in packages and fb in packages and not fa.startswith("vision.kernels."):
                    graph.setdefault(fa, set()).add(fb)
    assert "vision.pipelines.cli" in graph  # the scan sees cli's registry of commands (bench among them)
    cycles = _cycles(graph)
    assert not cycles, "import cycles between sibling folders:\n" + "\n".join(cycles)


def test_no_import_cycle():
    modules = _modules()
    graph = {n: _imports(n, p, modules) for n, p in modules.items()}
    # a package's __init__ importing its own submodules is how packages work; a cycle needs a way back
    cycles = _cycles(graph, lambda cycle: all(a == b.rpartition(".")[0] or b == a.rpartition(".")[0]
                                              for a, b in zip(cycle, cycle[1:])))
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def _run(code: str, cwd=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("module", ["vision", "vision.kernels", "vision.denoise"])
def test_light_imports(module):
    res = _run(f"import sys, {module}\nprint(sorted(m for m in ('timm', 'diffusers', 'transformers') if m in sys.modules))")
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "[]", f"import {module} loads {res.stdout.strip()}"


@pytest.mark.slow
def test_backbones_register_when_timm_is_imported():
    # libraries probe with find_spec("timm") before anyone imports it: the probe must not disarm the hook
    res = _run("import vision, importlib.util\nimportlib.util.find_spec('timm')\nimport timm\n"
               "print(type(timm.create_model('vig_tiny_patch16_224', num_classes=0)).__name__)")
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "ViG"


@pytest.mark.slow
def test_checkout_root_does_not_shadow_huggingface_kernels():
    """Python started in the repository root sees kernels/ as a top-level package; transformers imports the name."""
    pytest.importorskip("diffusers")
    res = _run("from diffusers import StableDiffusionImg2ImgPipeline\nimport vision, vision.kernels, kernels\n"
               "print(vision.kernels.__file__)\nprint(kernels.__file__)", cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    ours, theirs = res.stdout.split()
    assert Path(ours) == ROOT / "kernels" / "__init__.py" and Path(theirs).parent != ROOT / "kernels"


def test_top_level_kernels_without_the_distribution_is_a_clear_import_error():
    # -S: no site-packages, so only the checkout root offers a `kernels`
    res = subprocess.run([sys.executable, "-S", "-c", "import kernels"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 1 and "ModuleNotFoundError: No module named 'kernels'" in res.stderr
    assert "vision.kernels" in res.stderr


def test_no_module_over_500_lines():
    """Large modules are split by what they hold; a single Triton kernel family may be longer."""
    allowed = {ROOT / "kernels" / "local_linear" / "triton_path.py"}
    long = [f"{p.relative_to(ROOT)}: {n}" for p in _modules().values()
            if p not in allowed and (n := len(p.read_text().splitlines())) > 500]
    assert not long, long


@pytest.mark.slow
def test_lazy_op_names_survive_their_subpackages_import():
    """Importing an op's subpackage first (which binds it on vision.kernels) leaves every public name the op."""
    res = _run("import vision.kernels.linear_attention.chunked, vision.kernels.box\nimport vision.kernels as K\n"
               "from vision.kernels import gla, box_filter\nprint(callable(gla), callable(box_filter), K.gla is gla)")
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split() == ["True", "True", "True"]


def test_no_public_name_is_a_subpackage_name():
    """Why the test above holds without tricks: a lazily exported name never equals a submodule's name (importing
    vision.kernels.X binds X on vision.kernels, and a module attribute wins over the PEP 562 __getattr__)."""
    import importlib

    packages = [(n, p) for n, p in _modules().items() if p.name == "__init__.py" and "_LAZY" in p.read_text()]
    clashes = []
    for name, init in packages:
        lazy = importlib.import_module(name)._LAZY  # lazy packages: importing them loads none of their ops
        subs = {p.stem for p in init.parent.glob("*.py")} | {p.parent.name for p in init.parent.glob("*/__init__.py")}
        clashes += [f"{name}.{attr}" for attr in lazy if attr in subs]
    assert len(packages) >= 2 and not clashes, clashes


@pytest.mark.slow
def test_no_module_class_swap():
    """No module object gets its class replaced (``sys.modules[...].__class__ = ...``, a ``ModuleType`` subclass):
    packages are plain modules with PEP 562 ``__getattr__``. The one ``__class__`` assignment left is the per-
    instance pipeline class of pipelines/editing/spl_guidance.py (ARCHITECTURE.md, pipelines/)."""
    allowed = {ROOT / "pipelines" / "editing" / "spl_guidance.py"}
    found = []
    for path in _modules().values():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            targets = (node.targets if isinstance(node, ast.Assign) else [node.target]
                       if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            setattr_call = (isinstance(node, ast.Call) and ast.unparse(node.func) in ("setattr", "object.__setattr__")
                            and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
                            and node.args[1].value == "__class__")
            if setattr_call or any(isinstance(t, ast.Attribute) and t.attr == "__class__" for t in targets):
                if path not in allowed:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: assigns __class__")
            if isinstance(node, ast.ClassDef) and any(ast.unparse(b).endswith("ModuleType") for b in node.bases):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: subclasses ModuleType")
    assert not found, found
    res = _run("import types, vision, vision.kernels, vision.pipelines, vision.kernels.linear_attention\n"
               "print(all(type(m) is types.ModuleType for m in (vision, vision.kernels, vision.pipelines)))")
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "True"


SWITCHES = [  # env var, reader, setter, context manager, a value that turns it off or away from its default
    ("VISION_BACKEND", "forced_backend", "set_backend", "use_backend", "torch"),
    ("VISION_CHECKS", "checks_mode", "set_checks", "checks", "off"),
    ("VISION_NUMBA", "numba_enabled", "set_numba", "use_numba", False),
    ("VISION_CUDA_GRAPHS", "cuda_graphs_enabled", "set_cuda_graphs", "use_cuda_graphs", False),
]


@pytest.mark.parametrize("env, reader, setter, manager, value", SWITCHES, ids=[s[0] for s in SWITCHES])
def test_runtime_switches(monkeypatch, env, reader, setter, manager, value):
    """ARCHITECTURE.md: every switch of the runtime is an env var, a setter and a context manager, read at every call."""
    from vision.kernels import runtime

    read = getattr(runtime, reader)
    monkeypatch.setenv(env, "")  # records the variable as it was, so the setter's direct write is undone too
    monkeypatch.delenv(env)
    default = read()
    expected = value if isinstance(value, str) else bool(value)
    assert default != expected
    with getattr(runtime, manager)(value):
        assert read() == expected
    assert read() == default
    getattr(runtime, setter)(value)  # through the environment: monkeypatch restores it
    assert read() == expected and env in os.environ
    monkeypatch.delenv(env)
    assert read() == default
    off = {"VISION_BACKEND": "torch", "VISION_CHECKS": "off"}.get(env, "0")
    monkeypatch.setenv(env, off)
    assert read() == expected


OPS_IN_THE_REGISTRY = ("box", "guided", "local_linear", "spl")  # gla (linear_attention/) dispatches itself


def _calls(folder: Path) -> set[str]:
    """Names called or used as decorators anywhere in the modules of ``folder`` (``torch.library.custom_op`` as such)."""
    names = set()
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                names.add(ast.unparse(node.func))
    return names


@pytest.mark.parametrize("op", OPS_IN_THE_REGISTRY)
def test_ops_declare_paths_and_run_as_custom_ops(op):
    """ARCHITECTURE.md, kernels/: an op folder holds a float64 reference, declares its paths (register_path), asks
    runtime.choose per call and runs inside torch.library custom ops."""
    folder = ROOT / "kernels" / op
    assert (folder / "op.py").is_file() and (folder / "reference.py").is_file()
    calls = _calls(folder)
    assert {"register_path", "choose", "torch.library.custom_op"} <= calls, sorted(calls)


def test_op_folders_are_the_documented_ones():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    ops = sorted(p.parent.name for p in (ROOT / "kernels").glob("*/op.py"))
    assert ops == sorted((*OPS_IN_THE_REGISTRY, "linear_attention"))
    assert all(f"`{op}/`" in text for op in ops)


def _plugins(registry_module: Path, name: str) -> dict[str, str]:
    tree = ast.parse(registry_module.read_text())
    return next(ast.literal_eval(n.value) for n in tree.body
                if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == name)


def _defines(path: Path) -> set[str]:
    out = set()
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return out


def test_commands_and_benches_follow_the_plugin_protocol():
    """Every module in cli.COMMANDS and bench.BENCHES exposes DESCRIPTION, add_arguments and run; every demo
    section TITLE and run (read from the source: nothing is imported)."""
    modules = _modules()
    named = list(_plugins(ROOT / "pipelines" / "cli" / "__init__.py", "COMMANDS").values())
    named += _plugins(ROOT / "pipelines" / "bench" / "__init__.py", "BENCHES").values()
    missing = [f"{m}: {need}" for m in named for need in ("DESCRIPTION", "add_arguments", "run")
               if need not in _defines(modules[m])]
    demos = [p for p in (ROOT / "pipelines" / "demos").glob("*.py") if p.name != "__init__.py"]
    missing += [f"{p.name}: {need}" for p in demos for need in ("TITLE", "run") if need not in _defines(p)]
    assert len(named) > 10 and demos and not missing, missing


@pytest.mark.parametrize("module", ["vision", "vision.kernels", "vision.kernels.spl.defaults"])
def test_light_modules_load_without_torch(module):
    res = _run(f"import sys, {module} as m\nprint('torch' in sys.modules, set(getattr(m, '__all__', ())) <= set(dir(m)))")
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split() == ["False", "True"], f"import {module}: torch loaded, names listed: {res.stdout}"


def test_help_loads_no_torch():
    """``vision --help`` and every ``vision COMMAND --help`` print their text without loading torch (nor numba,
    diffusers, timm): a command module keeps its parser light and hands its work to the modules that need them."""
    commands = list(_plugins(ROOT / "pipelines" / "cli" / "__init__.py", "COMMANDS"))
    code = ("import contextlib, io, sys\nfrom vision.pipelines.cli import main\nheavy = ('torch', 'numba', 'diffusers', "
            "'timm')\nfor words in [['--help']] + [[c, '--help'] for c in %r]:\n    with contextlib.redirect_stdout("
            "io.StringIO()):\n        try:\n            main(words)\n        except SystemExit:\n            pass\n"
            "    print(' '.join(words), [m for m in heavy if m in sys.modules])\n" % commands)
    res = _run(code)
    assert res.returncode == 0, res.stderr[-2000:]
    loaded = [line for line in res.stdout.splitlines() if not line.endswith("[]")]
    assert len(res.stdout.splitlines()) == len(commands) + 1 and not loaded, f"first to load them: {loaded[:1]}"


def _headings(doc: Path) -> list[str]:
    return [line.lstrip("#").strip() for line in doc.read_text().splitlines() if line.startswith("#")]


def test_docs_cited_by_the_code_exist():
    """A comment citing a document names one in the repository and, when it names a section, a heading there."""
    import re

    wrong = []
    for path in [ROOT / "setup.py", *(p for folder in LAYERS.values() for p in project_files("*.py", under=folder))]:
        text = path.read_text()
        for doc, section in re.findall(r'(?<![\w/])([A-Z]+\.md)(?:, "([^"]+)")?', text):
            where = ROOT / doc
            if not where.is_file():
                wrong.append(f"{path.relative_to(ROOT)}: {doc}")
            elif section and not any(h.startswith(section) for h in _headings(where)):
                wrong.append(f'{path.relative_to(ROOT)}: {doc}, "{section}"')
    assert not wrong, wrong


def test_architecture_names_files_and_tests_that_exist():
    """Paths in backquotes in ARCHITECTURE.md (from the root, a layer folder, or by file name; NEW and RUN are
    placeholders) and the tests it cites exist."""
    import re

    text = (ROOT / "ARCHITECTURE.md").read_text()
    bases = [ROOT, *LAYERS.values()]
    names = {p.name for p in project_files()}
    missing = []
    for span in re.findall(r"`([^`\s]+)`", text):
        placeholder = any(part.isupper() for part in span.split("/"))  # kernels/NEW/..., RUN/...
        if re.fullmatch(r"\.?[a-z_][\w./-]*(\.py|\.md|/)", span) and not placeholder:
            found = any((b / span).exists() for b in bases) or ("/" not in span and span in names)
            if not found:
                missing.append(span)
    tests = "\n".join(p.read_text() for p in (ROOT / "tests").glob("test_*.py"))
    missing += [t for t in set(re.findall(r"`(test_\w+)`", text)) if f"def {t}(" not in tests]
    assert not missing, missing


def test_tree_walks_read_only_the_project(tmp_path):
    """Tests that walk the tree (markers, cited documents) skip a virtual environment inside the checkout whatever
    its name, build output, version control and what git ignores: none of them can fail the suite."""
    from project_files import _git_ignored

    for folder in (".venv", "env2", "build/lib", "dist", ".git", "pkg.egg-info", "src/__pycache__", "src/own"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "conftest.py").write_text("config.addinivalue_line('markers', 'x')\n")
    (tmp_path / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (tmp_path / "env2" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert project_files("conftest.py", under=tmp_path) == [tmp_path / "src" / "own" / "conftest.py"]
    if (ROOT / ".git").exists():  # .gitignore names build output folders such as bench-out/ and *.egg-info/
        assert _git_ignored([ROOT / "bench-out" / "x.py", ROOT / "tests" / "conftest.py"]) == {ROOT / "bench-out" / "x.py"}


def test_markers_are_declared_once():
    """Markers (slow, cuda) are declared in pyproject.toml alone, each once, and --strict-markers refuses others."""
    import tomllib

    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    declared = [m.split(":")[0].strip() for m in options["markers"]]
    assert len(declared) == len(set(declared)) and "--strict-markers" in options["addopts"].split()
    assert not [p.name for p in project_files("conftest.py") if "addinivalue_line" in p.read_text()]
    import re

    used = set(re.findall(r"pytest\.mark\.(\w+)", "\n".join(p.read_text() for p in (ROOT / "tests").glob("*.py"))))
    builtin = {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings"}
    assert used - builtin <= set(declared), used - builtin - set(declared)


def test_registries_import_only_the_command_asked_for(monkeypatch, capsys):
    """`vision COMMAND` imports that command's module alone, and a command whose import fails (a missing optional
    dependency) is reported as unavailable while the others still build."""
    from vision.pipelines import cli

    imported = []
    real = cli.importlib.import_module
    monkeypatch.setattr(cli.importlib, "import_module", lambda name: imported.append(name) or real(name))
    monkeypatch.setitem(cli.COMMANDS, "broken", "vision.pipelines.no_such_module")
    cli.build_parser("restore-structure")
    assert imported == [cli.COMMANDS["restore-structure"]]
    cli.build_parser()  # every command builds, the broken one as a placeholder
    assert cli.main(["broken"]) == 2
    err = capsys.readouterr().err
    assert "vision broken: unavailable here: No module named 'vision.pipelines.no_such_module'" in err
