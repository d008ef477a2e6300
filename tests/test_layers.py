"""No module imports from a room above it, and no two modules import each other, however indirectly
(docs/architecture.md draws the same ladder).

Three checks read the source with ``ast`` (nothing is imported):
- the ladder exempts imports inside ``if TYPE_CHECKING:`` (they only name types);
- the cycle test counts every import: at module level, inside functions and under TYPE_CHECKING, since
  a circle that only one of those hides is still a circle;
- the import-time test follows what Python runs when a module is imported first: its module-level
  imports and, for each, the ``__init__.py`` of every package on the way (importing ``a.b`` runs
  ``a/__init__.py``). A circle there fails with "partially initialized module" in some import order.
"""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "ddpsim"

# lower number = lower room; a module may import its own rung and the rungs below it. Every entry is a
# folder or a module at the package's top: a folder holds files of one layer only.
LADDER: tuple[tuple[str, ...], ...] = (
    ("ddpsim.units", "ddpsim.errors", "ddpsim.jsonfile", "ddpsim.outdir", "ddpsim.spread", "ddpsim.intervals"),
    ("ddpsim.scenario", "ddpsim.schemas"),
    ("ddpsim.workload", "ddpsim.hardware", "ddpsim.topology", "ddpsim.network", "ddpsim.collectives", "ddpsim.ddp",
     "ddpsim.sharded"),
    ("ddpsim.calibration", "ddpsim.loader"),
    ("ddpsim.results", "ddpsim.simulation", "ddpsim.sharded_simulation"),
    ("ddpsim.report",),
    ("ddpsim.planning",),
    ("ddpsim.fitting",),
    ("ddpsim.cli", "ddpsim.__main__", "ddpsim"),
)
# Rooms off the ladder: such a room imports nothing from ddpsim outside itself, and only the listed
# rooms may import it. The GPU harness runs on hosts where ddpsim's own dependencies are absent. The
# torch importer builds ``hf:`` models with the harness's code for them (measure/hf.py), so that both
# read a name alike.
STANDALONE: dict[str, tuple[str, ...]] = {"ddpsim.measure": ("ddpsim.cli", "ddpsim.workload.torch_import")}


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def rung(module: str) -> int:
    """The rung of the longest ladder prefix naming this module."""
    best, best_len = -1, -1
    for level, prefixes in enumerate(LADDER):
        for prefix in prefixes:
            if _under(module, prefix) and len(prefix) > best_len:
                best, best_len = level, len(prefix)
    return best


def standalone_room(module: str) -> str | None:
    return next((room for room in STANDALONE if _under(module, room)), None)


def _module_name(path: pathlib.Path, package: pathlib.Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str | None:
    """The module a ``from`` import names, a relative one (``from .models import X``, ``from . import
    x``) resolved against the importing module ``importer``."""
    if node.level == 0:
        return node.module
    parts = importer.split(".") if is_package else importer.split(".")[:-1]
    base = parts[:len(parts) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imported_names(path: pathlib.Path, prefix: str, with_type_checking: bool,
                    module_level_only: bool = False, package: pathlib.Path = PACKAGE) -> list[tuple[str, str | None]]:
    """(module, name imported from it or None) for every import of ``prefix`` in the file: anywhere, or
    only those that run when the module is imported (``module_level_only``: not in a function's body).
    Relative imports count as the absolute module they name."""
    tree = ast.parse(path.read_text())
    importer, is_package = _module_name(path, package), path.name == "__init__.py"
    exempt = set() if with_type_checking else _type_checking_lines(tree)
    if module_level_only:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                exempt.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in exempt:
            continue
        if isinstance(node, ast.ImportFrom) and (module := _absolute(node, importer, is_package)) \
                and _under(module, prefix):
            found += [(module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names if _under(alias.name, prefix)]
    return found


def imports(path: pathlib.Path) -> list[str]:
    """The ddpsim modules a file imports, TYPE_CHECKING imports left out (what the ladder checks)."""
    return sorted({module for module, _name in _imported_names(path, "ddpsim", with_type_checking=False)})


def import_graph(package: pathlib.Path = PACKAGE, at_import_time: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports. ``from a import b`` names module ``a.b``
    where that is a module, else ``a``. Every import counts, unless ``at_import_time``: then only
    module-level ones (TYPE_CHECKING blocks do not run either), plus the ``__init__`` of each package
    they pass through that is not one of the importer's own (those are already running)."""
    paths = {_module_name(p, package): p for p in sorted(package.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        own = module.split(".") + ([""] if path.name == "__init__.py" else [])
        targets = set()
        for imported, name in _imported_names(path, package.name, with_type_checking=not at_import_time,
                                              module_level_only=at_import_time, package=package):
            target = f"{imported}.{name}" if name is not None and f"{imported}.{name}" in paths else imported
            parts = target.split(".")
            passed = [".".join(parts[:i]) for i in range(1, len(parts)) if parts[:i] != own[:i]] if at_import_time else []
            targets.update(t for t in (*passed, target) if t in paths and t != module)
        graph[module] = targets
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected group of modules, as a path that returns to its start."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm; the graph has about a hundred modules
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_path_back(graph, group) for group in groups]


def _path_back(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """A shortest path from the group's first module back to itself, inside the group."""
    start = min(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt_frontier = []
        for node in frontier:
            for nxt in sorted(graph[node] & group):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, node, start]
                if nxt not in came_from:
                    came_from[nxt] = node
                    nxt_frontier.append(nxt)
        frontier = nxt_frontier
    raise AssertionError(f"no cycle through {start} in {sorted(group)}")


def test_every_module_has_a_rung():
    missing = [_module_name(p) for p in PACKAGE.rglob("*.py")
               if rung(_module_name(p)) < 0 and standalone_room(_module_name(p)) is None]
    assert not missing, f"add these to LADDER (and docs/architecture.md): {missing}"


def test_the_ladder_names_folders_and_top_level_modules_only():
    tops = {p.stem for p in PACKAGE.glob("*.py")} | {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    named = [prefix for rung_ in LADDER for prefix in rung_ if prefix != "ddpsim"]
    assert all(prefix.count(".") == 1 and prefix.split(".")[1] in tops for prefix in named), named


def test_no_module_imports_from_a_room_above_it():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        if standalone_room(module) is not None:
            continue
        for imported in imports(path):
            if standalone_room(imported) is None and rung(imported) > rung(module):
                upward.append(f"{module} (rung {rung(module)}) imports {imported} (rung {rung(imported)})")
    assert not upward, "\n".join(upward)


def test_standalone_rooms_keep_to_themselves():
    crossing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        home = standalone_room(module)
        for imported, _name in _imported_names(path, "ddpsim", with_type_checking=True):
            room = standalone_room(imported)
            if home is not None and room != home:
                crossing.append(f"{module} imports {imported}: {home} imports nothing from ddpsim outside itself")
            elif room is not None and home != room and not any(_under(module, r) for r in STANDALONE[room]):
                crossing.append(f"{module} imports {imported}: only {', '.join(STANDALONE[room])} may")
    assert not crossing, "\n".join(crossing)


def test_no_import_cycle():
    cycles = import_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_no_import_time_cycle():
    cycles = import_cycles(import_graph(at_import_time=True))
    assert not cycles, "import cycles when a module is imported first:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_checker_sees_an_upward_import():
    # guards the ladder test against passing vacuously
    assert rung("ddpsim.network.flows") < rung("ddpsim.simulation") < rung("ddpsim.cli.main")
    assert rung("ddpsim.calibration.file") < rung("ddpsim.simulation") < rung("ddpsim.fitting.fit")
    assert rung("ddpsim.scenario.schema") < rung("ddpsim.topology.build") < rung("ddpsim.loader")
    assert "ddpsim.planning.advisor" in imports(PACKAGE / "fitting" / "validate.py")
    assert standalone_room("ddpsim.measure.worker") == "ddpsim.measure" and standalone_room("ddpsim.cli") is None


def test_the_checker_sees_a_cycle_hidden_in_a_function_or_type_checking(tmp_path):
    # a toy package: a -> b at module level, b -> c inside a function, c -> a under TYPE_CHECKING
    package = tmp_path / "toy"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from toy.sub import b\n")
    (package / "sub" / "b.py").write_text("def f():\n    import toy.sub.c\n")
    (package / "sub" / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from toy import a\n")
    (package / "d.py").write_text("from toy.sub import c\n")  # into the circle, not part of it
    graph = import_graph(package)
    assert graph["toy.a"] == {"toy.sub.b"} and graph["toy.sub.b"] == {"toy.sub.c"} and graph["toy.sub.c"] == {"toy.a"}
    assert import_cycles(graph) == [["toy.a", "toy.sub.b", "toy.sub.c", "toy.a"]]
    (package / "sub" / "c.py").write_text("")
    assert import_cycles(import_graph(package)) == []
    # relative imports name the same modules: sub/b.py -> sub/c.py -> toy/a.py -> sub/b.py
    (package / "sub" / "b.py").write_text("def f():\n    from . import c\n")
    (package / "sub" / "c.py").write_text("from .. import a\n")
    assert import_cycles(import_graph(package)) == [["toy.a", "toy.sub.b", "toy.sub.c", "toy.a"]]


def test_the_import_time_checker_follows_package_inits(tmp_path):
    # a.py imports sub.b at module level, which runs sub/__init__.py, which imports a: a circle only
    # through the package's __init__; an import inside a function does not run at import time
    package = tmp_path / "toy"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from toy import a\n")
    (package / "sub" / "b.py").write_text("X = 1\n")
    (package / "a.py").write_text("from toy.sub.b import X\n")
    assert import_cycles(import_graph(package)) == []
    assert import_cycles(import_graph(package, at_import_time=True)) == [["toy.a", "toy.sub", "toy.a"]]
    (package / "a.py").write_text("def f():\n    from toy.sub.b import X\n")
    assert import_cycles(import_graph(package, at_import_time=True)) == []
    # a module's own package is already running when it imports a sibling
    (package / "sub" / "__init__.py").write_text("from toy.sub import b\n")
    (package / "sub" / "b.py").write_text("from toy.sub import c\n")
    (package / "sub" / "c.py").write_text("")
    assert import_cycles(import_graph(package, at_import_time=True)) == []


MAX_MODULE_LINES = 800


def test_no_module_over_about_800_lines():
    long = [f"{_module_name(p)}: {n} lines" for p in sorted(PACKAGE.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not long, "split by what each part owns (generated tables are package data):\n" + "\n".join(long)
