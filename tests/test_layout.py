"""The package's shape: imports follow the data flow (editor -> server -> context -> backend -> checks), no module
imports one that imports it back, no class name means two things, no module outgrows one sitting, and every
module docs/architecture.md names exists.

Imports are read from the source with `ast` (nothing is executed but the one `import infill` in a child process).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "infill"
SERVER = ROOT / "server"
MAX_MODULE_LINES = 400


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(tree: ast.Module, module: str, is_package: bool, top_level_only: bool) -> set[str]:
    """Absolute names of the modules an import statement names (`from a import b` names a.b when that is a
    module: the caller keeps only names it knows). Top level only: what runs when the module is imported."""
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph(top_level_only: bool, roots: tuple[Path, ...] = (PACKAGE,)) -> dict[str, set[str]]:
    files = sorted(path for root in roots for path in root.rglob("*.py"))
    modules = {module_name(path): path for path in files}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = imported_names(tree, module, path.name == "__init__.py", top_level_only)
        graph[module] = {name for name in names if name in modules and name != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# The `infill-ls` dispatcher starts the LSP server for its default command, importing it inside that branch only.
LAUNCHES_SERVER = {"infill.cli": {"server.main", "server.main.main"}}


def test_no_module_under_infill_imports_server():
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module = module_name(path)
        names = imported_names(tree, module, path.name == "__init__.py", top_level_only=False)
        bad = sorted(
            name
            for name in names
            if (name == "server" or name.startswith("server.")) and name not in LAUNCHES_SERVER.get(module, ())
        )
        if bad:
            offenders[module] = bad
    assert offenders == {}


def test_the_dispatcher_imports_the_server_only_when_asked_to():
    tree = ast.parse((PACKAGE / "cli.py").read_text(encoding="utf-8"))
    top = imported_names(tree, "infill.cli", False, top_level_only=True)
    assert not any(name == "server" or name.startswith("server.") for name in top)


def test_no_import_cycles_among_infill_modules():
    # Imports inside functions count too: a lazy import back (gemma <-> choose once) is still a cycle to a reader.
    assert cycles(import_graph(top_level_only=False)) == []


def test_importing_infill_loads_nothing_from_server():
    code = (
        "import sys, infill, infill.pipeline, infill.backends.choose, infill.gateway.server, infill.pilot.cli, "
        "infill.fill_cli, infill.cli; "
        "print(sorted(m for m in sys.modules if m == 'server' or m.startswith('server.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# What each stage may not import: a later stage, or a caller of the stage. (The ground floor, infill/types.py,
# languages.py, metrics.py, stats.py, timing.py, device.py and cache/, is open to all.)
# The floors above the stages: the front door (with the request it prepares and the claims its worker keeps), the
# loader, and every caller of the front door.
CALLERS = (
    "infill.pipeline",
    "infill.prepared",
    "infill.completion",
    "infill.worker",
    "infill.claims",
    "infill.loader",
    "infill.gateway",
    "infill.pilot",
    "infill.fill_cli",
    "infill.cli",
)
LATER_OR_CALLERS = {
    "infill.context": ("infill.checks", "infill.backends", "infill.engine", *CALLERS),
    "infill.backends": ("infill.checks", *CALLERS),
    "infill.engine": ("infill.checks", "infill.backends", *CALLERS),
    "infill.checks": ("infill.backends", "infill.engine", *CALLERS),
    "infill.pipeline": ("infill.worker", "infill.gateway", "infill.pilot", "infill.fill_cli", "infill.cli"),
    "server": ("infill.pilot", "infill.gateway", "infill.fill_cli", "infill.cli"),
}


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


# `python -m server.cli`, the launch line editors' settings name, hands over to the dispatcher above the server.
LAUNCHERS = {"server.cli"}


def stage_violations(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    found = {}
    for module, imports in graph.items():
        if module in LAUNCHERS:
            continue
        for stage, forbidden in LATER_OR_CALLERS.items():
            if _within(module, stage):
                bad = sorted(name for name in imports if any(_within(name, f) for f in forbidden))
                if bad:
                    found[module] = bad
    return found


def test_the_stage_check_finds_an_arrow_upstream():
    graph = {
        "infill.context.builder": {"infill.checks.postprocess", "infill.languages"},
        "server.handlers_inline": {"infill.pipeline"},
        "server.acceptance": {"infill.pilot.metrics"},
    }
    assert stage_violations(graph) == {
        "infill.context.builder": ["infill.checks.postprocess"],
        "server.acceptance": ["infill.pilot.metrics"],
    }


def test_imports_follow_the_stage_order():
    # Imports inside functions count: a lazy import upstream is still an arrow the reader has to follow back.
    graph = import_graph(top_level_only=False, roots=(PACKAGE, SERVER))
    assert stage_violations(graph) == {}


def test_no_import_cycles_among_server_modules():
    assert cycles(import_graph(top_level_only=False, roots=(PACKAGE, SERVER))) == []


def test_no_class_name_is_defined_twice():
    homes: dict[str, list[str]] = {}
    for path in sorted([*PACKAGE.rglob("*.py"), *SERVER.rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                homes.setdefault(node.name, []).append(module_name(path))
    assert {name: where for name, where in homes.items() if len(where) > 1} == {}


def test_no_module_outgrows_one_sitting():
    sizes = {
        module_name(path): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted([*PACKAGE.rglob("*.py"), *SERVER.rglob("*.py")])
    }
    assert {name: lines for name, lines in sizes.items() if lines > MAX_MODULE_LINES} == {}


ARCHITECTURE = ROOT / "docs" / "architecture.md"
_MODULE_TOKEN = re.compile(r"`([\w./-]*\w\.py)\b")
_ROW_FOLDER = re.compile(r"^\| `([\w./-]+/)`")


def missing_modules(doc: str) -> list[str]:
    """Modules the map names (`name.py`, `folder/name.py`) that no file in the repository is. A table row whose
    first cell is a folder is read inside that folder, so `syntax.py` in the `infill/context/` row means
    infill/context/syntax.py; a name with a folder in it, or outside such a row, may be any file it ends."""
    files = [
        p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.py") if ".venv" not in p.parts and ".git" not in p.parts
    ]
    missing = []
    for line in doc.splitlines():
        row = _ROW_FOLDER.match(line)
        folder = row.group(1) if row and (ROOT / row.group(1)).is_dir() else ""
        for token in _MODULE_TOKEN.findall(line):
            inside = [f for f in files if f.startswith(folder)] if folder and "/" not in token else files
            if not any(f == token or f.endswith("/" + token) for f in inside):
                missing.append(f"{folder}{token}")
    return missing


def test_the_module_check_finds_a_module_that_is_gone():
    assert missing_modules("| `infill/context/` | the map (`builder.py`, `no_such_module.py`) |") == [
        "infill/context/no_such_module.py"
    ]
    assert missing_modules("| `infill/context/` | `pipeline.py` lives a floor up |") == ["infill/context/pipeline.py"]


def test_every_module_the_architecture_map_names_exists():
    assert missing_modules(ARCHITECTURE.read_text(encoding="utf-8")) == []


def test_the_wheel_leaves_out_the_test_fixtures_and_nothing_shipped_needs_them():
    """infill/testing/ holds fixtures for tests and benchmarks: the wheel's package list (pyproject's find rule) and
    its package data leave it out, and no shipped module imports it, so an installed infill-ls starts without it."""
    import tomllib
    from setuptools import find_packages

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = find_packages(
        str(ROOT), include=config["packages"]["find"]["include"], exclude=config["packages"]["find"]["exclude"]
    )
    assert "infill" in found and "server" in found and "infill.engine" in found
    assert not [name for name in found if name.startswith("infill.testing")]
    assert "testing/*" in config["exclude-package-data"]["infill"]
    shipped = [p for p in [*PACKAGE.rglob("*.py"), *SERVER.rglob("*.py")] if "testing" not in p.relative_to(ROOT).parts]
    importers = []
    for path in shipped:
        name = module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(n.startswith("infill.testing") for n in imported_names(tree, name, path.name == "__init__.py", False)):
            importers.append(name)
    assert importers == []
