"""A database written by the release before the registry kernel (main 5bfd3c1) keeps working:
a read-only command names the command that upgrades it; the first writing command (or
`stagecrawl upgrade`) migrates it in place — PyPI's key column renamed PROJECT_NAME, crates.io's
columns gone from PyPI's VERSION table, names widened to PyPI's bound — with every row kept and
one line saying so; it is done once, and a second open changes nothing.

The old shape is built here from the current declarations with 5bfd3c1's differences applied,
each named (that release's storage/db.py declared them so): PyPI's LIST and seed tables keyed
by CRATE_NAME with the indexes named after it, RUST_VERSION and LINKS in
TB_COMP_LIB_VERSION_PYPI, names 64 characters wide, and no TB_STAGECRAWL_SCHEMA."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import Column, Index, MetaData, String, Table, inspect, select, text

from stagecrawl.errors import StorageError
from stagecrawl.pypi.declaration import NAMES as PYPI
from stagecrawl.storage.db import Database
from stagecrawl.storage.names import SCHEMA
from stagecrawl.storage.schema import build_metadata
from tests.cli import stagecrawl

NOW = datetime(2026, 11, 30, 12, 0, 0)


def old_tables(db: Database) -> MetaData:
    """Every table as 5bfd3c1 made it (see the module's docstring)."""
    current = build_metadata(db.collations)
    old = MetaData()
    for table in current.sorted_tables:
        if table.name == SCHEMA:
            continue  # that release kept no schema version
        columns = []
        for c in table.columns:
            name = "CRATE_NAME" if c.name == PYPI.group else c.name
            kind = c.type
            if (
                table.name in (PYPI.list, PYPI.seed, PYPI.version, PYPI.product)
                and c.name in (PYPI.group, "NAME", "PRODUCT_KEY")
                and isinstance(kind, String)
            ):
                kind = String(64, collation=kind.collation)
            columns.append(
                Column(
                    name, kind, primary_key=c.primary_key, nullable=c.nullable, autoincrement=False
                )
            )
        if table.name == PYPI.version:
            columns += [Column("RUST_VERSION", String(32)), Column("LINKS", String(128))]
        indexes = []
        for index in table.indexes:
            cols = ["CRATE_NAME" if c.name == PYPI.group else c.name for c in index.columns]
            name = str(index.name).replace("PROJECT_NAME", "CRATE")
            if name == "IX_PYPI_LIST_CRATE":
                name = "IX_PYPI_LIST_CRATE_NAME"
            indexes.append(Index(name, *cols))
        Table(table.name, old, *columns, *indexes, **db.collations.mysql_kw)
    return old


def fill(db: Database, old: MetaData) -> None:
    """A PyPI crawl's rows as that release wrote them: two events, a seed, a version."""
    key = hashlib.sha256(b"requests@2.31.0").digest()
    with db.engine.begin() as conn:
        conn.execute(
            old.tables[PYPI.list].insert(),
            [
                {
                    "ID": key,
                    "CRATE_NAME": "requests",
                    "NAME": "requests",
                    "VERSION": "2.31.0",
                    "SOURCE": "seed",
                    "REF_TAGS": "[]",
                    "YANKED": False,
                    "PROCESSED": 1,
                    "RESYNC": False,
                    "TIMESTAMP": NOW,
                    "LAST_UPDATED": NOW,
                }
            ],
        )
        conn.execute(
            old.tables[PYPI.seed].insert(),
            [{"CRATE_NAME": "requests", "NAME": "Requests"} | _seed_row() | {"STATE": 1}],
        )
        conn.execute(
            old.tables[PYPI.version].insert(),
            [
                {
                    "LANGUAGE": "python",
                    "REPOSITORY": "PyPI",
                    "PRODUCT_KEY": "requests",
                    "VERSION": "2.31.0",
                    "NAME": "requests",
                    "FEATURES": "{}",
                    "YANKED": False,
                    "PROCESSED": 1,
                    "LAST_UPDATED": NOW,
                }
            ],
        )


def test_a_database_of_the_release_before_the_kernel_is_migrated_in_place(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    probe = Database(db_url, create=False)
    old = old_tables(probe)
    old.create_all(probe.engine)
    fill(probe, old)
    probe.dispose()

    # A reader cannot upgrade: it names what does, and changes nothing.
    with pytest.raises(StorageError, match=r"PYPI schema 0.*`stagecrawl upgrade"):
        Database(db_url, read_only=True)
    status = stagecrawl("status", "--db", db_url)
    assert status.returncode == 2 and "stagecrawl upgrade" in status.stderr, status.stderr
    assert len(status.stderr.strip().splitlines()) == 1 and "Traceback" not in status.stderr

    upgraded = stagecrawl("upgrade", "--db", db_url)
    assert upgraded.returncode == 0, upgraded.stderr
    assert "upgraded PYPI tables to schema 1" in upgraded.stderr
    assert "upgraded PYPI tables to schema 2" in upgraded.stderr

    db = Database(db_url)  # a writing open: nothing left to do
    assert "upgraded" not in caplog.text
    t = db.registry("PYPI")
    live = inspect(db.engine)
    assert PYPI.group in {c["name"] for c in live.get_columns(PYPI.list)}
    assert "CRATE_NAME" not in {c["name"] for c in live.get_columns(PYPI.seed)}
    assert not {"RUST_VERSION", "LINKS"} & {c["name"] for c in live.get_columns(PYPI.version)}
    with db.engine.connect() as conn:
        assert conn.execute(select(t.list.c[PYPI.group], t.list.c.PROCESSED)).all() == [
            ("requests", 1)
        ]
        assert conn.execute(select(t.seed.c.NAME)).scalars().all() == ["Requests"]
        assert conn.execute(select(t.version.c.VERSION)).scalars().all() == ["2.31.0"]
        versions = conn.execute(select(db.schema_table.c.PART, db.schema_table.c.VERSION)).all()
    assert ("PYPI", 2) in versions
    # the widened key holds PyPI's longest names on every backend
    long_name = "a" * 200
    with db.engine.begin() as conn:
        conn.execute(t.seed.insert(), [{PYPI.group: long_name, "NAME": long_name} | _seed_row()])
        # and the page of the longest name at the longest version fits VERSION's URL
        url = f"https://pypi.org/project/{long_name}/{'1' * 100}/"
        conn.execute(t.version.update().values(URL=url))
    # the claim indexes are there under their new names
    names = {ix["name"] for ix in inspect(db.engine).get_indexes(PYPI.list)}
    assert f"IX_PYPI_LIST_PROCESSED_{PYPI.group}" in names
    gone = {"IX_PYPI_LIST_CRATE_NAME", "IX_PYPI_LIST_PROCESSED_CRATE", "IX_PYPI_LIST_RESYNC_CRATE"}
    assert not names & gone, names
    db.dispose()
    again = stagecrawl("status", "--db", db_url, "--format", "json")
    assert again.returncode == 0, again.stderr


def _seed_row() -> dict[str, Any]:
    return {"STATE": 0, "RESYNC": False, "LAST_UPDATED": NOW}


def test_the_migration_of_a_database_stopped_half_way_finishes_on_the_next_open(
    db_url: str,
) -> None:
    """A kill between two steps of a migration (the key renamed, RUST_VERSION still there):
    every step checks the live shape first, so the next open finishes it."""
    probe = Database(db_url, create=False)
    old = old_tables(probe)
    old.create_all(probe.engine)
    fill(probe, old)
    quote = probe.engine.dialect.identifier_preparer.quote
    with probe.engine.begin() as conn:
        conn.execute(
            text(
                f"ALTER TABLE {quote(PYPI.list)} RENAME COLUMN {quote('CRATE_NAME')}"
                f" TO {quote(PYPI.group)}"
            )
        )
    probe.dispose()
    db = Database(db_url)
    columns = {c["name"] for c in inspect(db.engine).get_columns(PYPI.version)}
    assert "RUST_VERSION" not in columns
    with db.engine.connect() as conn:
        assert conn.execute(select(db.registry("PYPI").list.c[PYPI.group])).scalars().all() == [
            "requests"
        ]
    db.dispose()
