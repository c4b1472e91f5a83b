"""The import graph (issue 17): the core packages import no registry or pipeline package, and
no two packages import each other, directly or round a longer cycle. Read from the source with
`ast` (every import, also those inside functions), so a lazy import does not hide an arrow.
And what `--help`, each group's `--help` and `status` import when run (issue 20: a fast start)."""

from __future__ import annotations

import ast
import itertools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli import cli_env
from tests.queue.status_rows import fill_for_status

SOURCE = Path(__file__).resolve().parent.parent / "src" / "stagecrawl"
CORE = {"engine", "queue", "storage", "sca", "kernel"}
REGISTRIES = {"crates", "pypi", "go"}
REGISTRIES_AND_PIPELINES = {*REGISTRIES, "aircraft", "cli", "demo", "registries"}
# Cycles known and not yet removed, each with its reason. Listed so the test stays red for any
# new one; the test also fails once a listed cycle is gone, so the list only shrinks.
KNOWN_CYCLES: set[tuple[str, ...]] = set()  # none now (engine→settings→engine removed)


def room(module: str) -> str:
    """`stagecrawl.engine.work` → `engine`; a top-level module is its own room."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(SOURCE.rglob("*.py")):
        relative = path.relative_to(SOURCE.parent).with_suffix("")
        parts = list(relative.parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), path


def imports(module: str, path: Path) -> Iterator[str]:
    """The stagecrawl modules `module` imports."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("stagecrawl."))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target.startswith("stagecrawl.") or target == "stagecrawl":
                yield target


def graph() -> dict[str, dict[str, set[str]]]:
    """room → room it imports → the importing modules (the evidence)."""
    arrows: dict[str, dict[str, set[str]]] = {}
    for module, path in modules():
        here = room(module)
        for target in imports(module, path):
            there = room(target)
            if there != here and target != "stagecrawl":
                arrows.setdefault(here, {}).setdefault(there, set()).add(module)
    return arrows


def test_the_source_is_found() -> None:
    rooms = {room(m) for m, _ in modules()}
    assert {"engine", "queue", "storage", "crates", "cli"} <= rooms
    assert graph()["crates"]["queue"]  # the walk sees real arrows


def test_core_packages_import_no_registry_or_pipeline() -> None:
    arrows = graph()
    upward = {
        f"{core} → {there} ({', '.join(sorted(evidence))})"
        for core in CORE
        for there, evidence in arrows.get(core, {}).items()
        if there in REGISTRIES_AND_PIPELINES
    }
    assert not upward


def test_no_registry_imports_another() -> None:
    """Each registry is a package on the kernel alone: what two need is the kernel's."""
    arrows = graph()
    crossing = {
        f"{one} → {other} ({', '.join(sorted(arrows[one][other]))})"
        for one in REGISTRIES
        for other in REGISTRIES
        if other in arrows.get(one, {})
    }
    assert not crossing
    assert {"kernel", "storage"} <= set(arrows["pypi"])  # the walk sees real arrows


# The tables a registry owns are written through their owners only: the VERSION and PRODUCT
# owners (storage/owners.py), the LIST's (queue/events.py, queue/sql.py), the seed table's
# (queue/seeds.py, queue/sql.py), the VULN tables' import (sca/osv_import.py), a registry's
# own tables' owner (crates/tables.py), and the schema's migrations (storage/).
WRITERS = {
    "stagecrawl.storage.owners",
    "stagecrawl.storage.bulk",
    "stagecrawl.storage.db",
    "stagecrawl.queue.events",
    "stagecrawl.queue.sql",
    "stagecrawl.queue.seeds",
    "stagecrawl.queue.workers",
    "stagecrawl.sca.osv_import",
    "stagecrawl.sca.reference",
    "stagecrawl.crates.tables",
    "stagecrawl.pypi.tables",
    "stagecrawl.go.tables",
}
SQL_WRITES = {"insert", "update", "delete"}


def sql_writes(tree: ast.AST) -> list[str]:
    """Where a module builds a write: SQLAlchemy's `insert(t)`/`update(t)`/`delete(t)` (the
    names imported from sqlalchemy), a table's `t.insert()`/`t.update()`/`t.delete()` (no
    argument: a list's insert and a dict's update take some), the bulk `upsert(…)`."""
    from_sqlalchemy = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy")
        for alias in node.names
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and (
            func.id == "upsert" or (func.id in SQL_WRITES and func.id in from_sqlalchemy)
        ):
            found.append(f"{func.id} (line {node.lineno})")
        elif isinstance(func, ast.Attribute) and func.attr in SQL_WRITES and not node.args:
            found.append(f".{func.attr}() (line {node.lineno})")
    return found


def test_every_table_has_one_writer() -> None:
    """No module outside the owners builds an INSERT, UPDATE or DELETE or calls the bulk
    upsert: a table's writes are its owner's."""
    offenders: dict[str, list[str]] = {}
    for module, path in modules():
        if module in WRITERS or module.startswith("stagecrawl.engine."):
            continue  # the engine's own SQLite (the crawler's frontier) is not a shared table
        found = sql_writes(ast.parse(path.read_text(encoding="utf-8")))
        if found:
            offenders[module] = found
    assert offenders == {}


def test_no_import_cycle_between_packages() -> None:
    arrows = graph()
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        for there in sorted(arrows.get(node, {})):
            if there == path[0]:
                cycles.append([*path, there])
            elif there not in path and there > path[0]:  # each cycle once, from its least room
                visit(there, [*path, there])

    for start in sorted(arrows):
        visit(start, [start])
    found = {tuple(cycle) for cycle in cycles}
    assert KNOWN_CYCLES <= found, (
        f"no longer a cycle, drop it from KNOWN_CYCLES: {KNOWN_CYCLES - found}"
    )
    cycles = [cycle for cycle in cycles if tuple(cycle) not in KNOWN_CYCLES]
    described = [
        " → ".join(cycle)
        + " ("
        + "; ".join(
            f"{a}→{b}: {', '.join(sorted(arrows[a][b]))}" for a, b in itertools.pairwise(cycle)
        )
        + ")"
        for cycle in cycles
    ]
    assert not described


# What a command must not import to start at once (issue 20: `--help` and `status` within
# 0.4 s; bench/startup.py measures it). Each list names what that command does not use.
PIPELINES = (
    "aiohttp",
    "stagecrawl.crates.plugin",
    "stagecrawl.pypi.plugin",
    "stagecrawl.go.plugin",
    "stagecrawl.kernel.registry",
    "stagecrawl.sca.audit",
)
NOT_IMPORTED: dict[str, tuple[str, ...]] = {
    "--help": (*PIPELINES, "sqlalchemy", "asyncio", "pydantic"),
    "crates --help": (*PIPELINES, "sqlalchemy", "stagecrawl.storage.db"),
    "pypi --help": (*PIPELINES, "sqlalchemy", "stagecrawl.storage.db"),
    "go --help": (*PIPELINES, "sqlalchemy", "stagecrawl.storage.db", "licenseclassifier"),
    "aircraft --help": (*PIPELINES, "stagecrawl.aircraft.run", "stagecrawl.engine.frontier"),
    # status on SQLite (the default database, with rows on every part it shows) reads with
    # the standard library's sqlite3: no SQL toolkit, no event loop (storage/reads.py)
    "status": (
        *PIPELINES,
        "sqlalchemy",
        "asyncio",
        "stagecrawl.storage.db",
        "stagecrawl.engine.frontier",
        "stagecrawl.engine.fetcher",
    ),
}


@pytest.mark.parametrize("command", sorted(NOT_IMPORTED))
def test_a_command_imports_only_what_it_uses(command: str, tmp_path: Path) -> None:
    """Run as a user runs it (a fresh interpreter), then read `sys.modules`."""
    args = command.split()
    if command == "status":  # the default database, in the folder status runs in
        fill_for_status(f"sqlite:///{tmp_path / 'stagecrawl.db'}")
    probe = (
        "import sys\n"
        "from stagecrawl.cli import main\n"
        f"sys.argv = ['stagecrawl', *{args!r}]\n"
        "try:\n    main()\nexcept SystemExit as exit:\n    code = exit.code\n"
        f"loaded = [m for m in {NOT_IMPORTED[command]!r} if m in sys.modules]\n"
        "print('EXIT', code, 'LOADED', loaded, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
        cwd=tmp_path,
    )
    assert "EXIT 0 LOADED []" in done.stderr, done.stderr[-2000:]
