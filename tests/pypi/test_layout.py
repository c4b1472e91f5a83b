"""The PyPI package is a new package on the core, not a copy of crates/: it imports nothing
of `stagecrawl.crates` (read from the source, every import also inside functions)."""

from __future__ import annotations

import ast
from pathlib import Path

PYPI = Path(__file__).resolve().parents[2] / "src" / "stagecrawl" / "pypi"


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_pypi_imports_nothing_of_crates() -> None:
    files = sorted(PYPI.glob("*.py"))
    assert len(files) > 10
    offenders = {
        path.name: sorted(m for m in imported_modules(path) if m.startswith("stagecrawl.crates"))
        for path in files
    }
    assert {name: mods for name, mods in offenders.items() if mods} == {}
    # and the check sees real imports: the core packages it is built on
    every = set().union(*(imported_modules(p) for p in files))
    assert {"stagecrawl.queue", "stagecrawl.storage.owners", "stagecrawl.sca.audit"} <= every
