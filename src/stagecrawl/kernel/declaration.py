"""A registry's declaration: who it is, in words and names, without importing anything heavy.

The command line builds a registry's commands and their help from it, `stagecrawl status`
reads its tables by the names in it (standard library only: on SQLite status loads no
SQLAlchemy), and `stagecrawl audit DIR` finds its lock files by the patterns in it. The
registry's work (clients, parsers, rows) is imported only when a command runs it
(`kernel.registry.load`).
"""

from __future__ import annotations

import fnmatch
import importlib
from dataclasses import dataclass
from pathlib import Path

from stagecrawl.settings import Section
from stagecrawl.storage.names import RegistryNames


@dataclass(frozen=True)
class Words:
    """How the registry's commands speak of its things (help texts, reports, JSON keys)."""

    unit: str  # "crate", "project", "module"
    units: str  # "crates", "projects", "modules"
    index: str  # where existence is decided: "the sparse index", "the Simple API"
    listing_source: str = "index"  # its short name in a stored reason: "index: HTTP 500"
    # JSON key of a unit's readable-but-flawed parts (unreadable index lines, invalid
    # versions): "index_problems" for crates (its JSON has said so since issue 9)
    problems_key: str = "problems"
    problems_row: str = "problems (kept, reported)"  # the same, in a report's table
    problems_line: str = "problems"  # the same, opening a line on stderr
    # whether such problems fail the run (exit 1): crates.io's unreadable index lines may hide
    # versions; PyPI's invalid versions are kept, only reported
    problems_fail: bool = True
    name_example: str = "NAME"  # in help: what a name argument looks like


@dataclass(frozen=True)
class LockKind:
    """A lock file the registry reads: its kind and the file names that are one
    (`fnmatch` patterns, matched on the file's name), for `stagecrawl audit DIR`."""

    kind: str
    patterns: tuple[str, ...]


@dataclass(frozen=True)
class RegistryDecl:
    """One registry as the command line, status and audit see it before anything runs."""

    cli: str  # the command group: `stagecrawl <cli> …`
    title: str  # "crates.io", "PyPI"
    names: RegistryNames  # its tables (storage/names.py)
    words: Words
    section: type[Section]  # its settings (settings.py `register_section`)
    plugin: str  # "module:attribute" of its `Registry`
    tables: str  # the module that declares its tables (storage/schema.py `register`)
    locks: tuple[LockKind, ...] = ()
    seed_env: str = ""  # names to seed from the environment: STAGECRAWL_SEED_CRATES
    osv_url: str = ""  # the default OSV dump of its ecosystem
    osv_ecosystem: str = ""  # OSV's name: "crates.io", "PyPI", "Go"
    pin_form: str = "NAME@VERSION"  # how a pin is written on the command line
    lock_help: str = ""  # the lock files it reads, for --lockfile's help

    @property
    def code(self) -> str:
        return self.names.code

    def lock_kind(self, name: str) -> str | None:
        """The kind of lock file a file name declares (None: no pattern names it)."""
        for kind in self.locks:
            if any(fnmatch.fnmatchcase(name, pattern) for pattern in kind.patterns):
                return kind.kind
        return None

    def locks_in(self, folder: Path) -> list[Path]:
        """The lock files directly in `folder`, in the declaration's order."""
        found = [p for pattern in self.lock_patterns for p in sorted(folder.glob(pattern))]
        return [p for p in dict.fromkeys(found) if p.is_file()]

    @property
    def lock_patterns(self) -> list[str]:
        return [pattern for kind in self.locks for pattern in kind.patterns]

    def declare_tables(self) -> None:
        """Its tables declared (their module imported), its clients not loaded."""
        importlib.import_module(self.tables)
