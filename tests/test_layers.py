"""No module imports from a room above it (docs/architecture.md draws the same ladder).

Imports inside ``if TYPE_CHECKING:`` only name types and are exempt; imports inside functions count.
"""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "ddpsim"

# lower number = lower room; a module may import its own rung and the rungs below it
LADDER: tuple[tuple[str, ...], ...] = (
    ("ddpsim.units", "ddpsim.errors", "ddpsim.jsonfile", "ddpsim.outdir", "ddpsim.spread"),
    ("ddpsim.scenario.schema", "ddpsim.topology.link_kinds"),
    ("ddpsim.workload", "ddpsim.hardware", "ddpsim.topology", "ddpsim.network", "ddpsim.collectives", "ddpsim.ddp",
     "ddpsim.sharded"),
    ("ddpsim.calibration.file", "ddpsim.scenario"),
    ("ddpsim.results", "ddpsim.simulation", "ddpsim.engine", "ddpsim.sharded.simulate"),
    ("ddpsim.report",),
    ("ddpsim.planning",),
    ("ddpsim.calibration", "ddpsim.sharded.validate"),
    ("ddpsim.cli", "ddpsim.__main__", "ddpsim"),
)


def rung(module: str) -> int:
    """The rung of the longest ladder prefix naming this module."""
    best, best_len = -1, -1
    for level, prefixes in enumerate(LADDER):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = level, len(prefix)
    return best


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text())
    exempt = _type_checking_lines(tree)
    found = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in exempt:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ddpsim"):
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.startswith("ddpsim")]
    return found


def test_every_module_has_a_rung():
    missing = [_module_name(p) for p in PACKAGE.rglob("*.py") if rung(_module_name(p)) < 0]
    assert not missing, f"add these to LADDER (and docs/architecture.md): {missing}"


def test_no_module_imports_from_a_room_above_it():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        for imported in imports(path):
            if rung(imported) > rung(module):
                upward.append(f"{module} (rung {rung(module)}) imports {imported} (rung {rung(imported)})")
    assert not upward, "\n".join(upward)


def test_the_checker_sees_an_upward_import():
    # guards the test above against passing vacuously
    assert rung("ddpsim.network.flows") < rung("ddpsim.simulation") < rung("ddpsim.cli.main")
    assert rung("ddpsim.calibration.file") < rung("ddpsim.calibration.fit")
    assert "ddpsim.planning.advisor" in imports(PACKAGE / "calibration" / "validate.py")
