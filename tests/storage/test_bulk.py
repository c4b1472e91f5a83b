"""The compiled executemany path stores exactly what SQLAlchemy Core stores, on every backend:
rows as tuples (`BulkUpsert`, the bulk loaders' way) and as dicts (`upsert`, collect's way)
against `conn.execute(statement, rows)`, so no table changes by a byte."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from stagecrawl.storage.bulk import BulkUpsert, upsert, upsert_statement
from stagecrawl.storage.db import Database
from tests.crates.kernel import rust

COLUMNS = (
    "LANGUAGE",
    "REPOSITORY",
    "PRODUCT_KEY",
    "VERSION",
    "NAME",
    "DESCRIPTION",
    "DEPENDENCIES",
    "FEATURES",
    "YANKED",
    "DOWNLOADS",
    "RELEASE_DATE",
    "LAST_UPDATED",
)  # PROCESSED left out: its column default (1) is written, as Core writes it
KEYS = ("LANGUAGE", "REPOSITORY", "PRODUCT_KEY", "VERSION")


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database(db_url)
    yield database
    database.dispose()


def rows(description: str, when: datetime) -> list[tuple[Any, ...]]:
    return [
        (
            "rust",
            "Cargo",
            f"crate-{n}",
            f"1.{n}.0-ß",
            f"Crate-{n}",
            None if n % 3 == 0 else f"{description} «{n}»",
            "[]",
            '{"std":[]}',
            n % 2 == 0,
            None if n % 4 == 0 else n * 1_000_000_000,
            None if n % 5 == 0 else datetime(2024, 1, 1 + n % 28, 12, 30, 5),
            when,
        )
        for n in range(12)
    ]


def raw_table(db: Database) -> list[tuple[Any, ...]]:
    """The stored values as the driver returns them (for SQLite: the stored text itself)."""
    with db.engine.connect() as conn:
        quote = db.engine.dialect.identifier_preparer.format_table(rust(db).version)
        result = conn.exec_driver_sql(f"SELECT * FROM {quote}")
        return sorted(tuple(row) for row in result.fetchall())


def write_both_ways(db: Database, writer: str) -> list[tuple[Any, ...]]:
    first = rows("first", datetime(2026, 1, 1, 8, 0, 0))
    # The second pass updates every row through the case-insensitive key (CRATE-n).
    second = [
        (r[0], r[1], r[2].upper(), *r[3:5], "second", *r[6:11], datetime(2026, 1, 2)) for r in first
    ]
    with db.engine.begin() as conn:
        conn.execute(rust(db).version.delete())
    for batch in (first, second):
        with db.engine.begin() as conn:
            dicts = [dict(zip(COLUMNS, r, strict=True)) for r in batch]
            if writer == "core":
                update = [c for c in COLUMNS if c not in KEYS]
                statement = upsert_statement(db.engine.dialect.name, rust(db).version, update)
                conn.execute(statement, dicts)  # SQLAlchemy's own executemany
            elif writer == "dicts":
                upsert(conn, rust(db).version, dicts)
            else:
                BulkUpsert(rust(db).version, COLUMNS).execute(conn, batch)
    return raw_table(db)


def test_bulk_upsert_stores_what_core_upsert_stores(db: Database) -> None:
    core = write_both_ways(db, "core")
    bulk = write_both_ways(db, "bulk")
    dicts = write_both_ways(db, "dicts")
    assert len(bulk) == 12
    assert bulk == core
    assert dicts == core
    assert {r[4] for r in bulk} == {f"Crate-{n}" for n in range(12)}  # updated, not added


def test_bulk_upsert_refuses_rows_it_cannot_key(db: Database) -> None:
    with pytest.raises(ValueError, match="key columns"):
        BulkUpsert(rust(db).version, ["LANGUAGE", "NAME"])
    writer = BulkUpsert(rust(db).version, COLUMNS)
    with db.engine.begin() as conn, pytest.raises(ValueError, match="12 values"):
        writer.execute(conn, [("rust", "Cargo")])
