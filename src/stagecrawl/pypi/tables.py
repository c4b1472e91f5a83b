"""PyPI's tables and their owners: the one place that says PyPI's rows are LANGUAGE 'python',
REPOSITORY 'PyPI', keyed by the PEP 503 name and ordered by PEP 440
(TB_COMP_LIB_PYPI_LIST, TB_COMP_LIB_VERSION_PYPI, TB_COMP_LIB_PRODUCT_PYPI, the seed queue
TB_STAGECRAWL_SEED_PYPI; docs/schema.md)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, literal, select

from stagecrawl.pypi.names import normalize
from stagecrawl.queue import SqlQueue
from stagecrawl.queue.events import EventList, seed_spec
from stagecrawl.storage.bulk import upsert
from stagecrawl.storage.db import Database, RegistryTables

CODE = "PYPI"
LANGUAGE, REPOSITORY = "python", "PyPI"


def event_id(name: str, version: str) -> bytes:
    """The LIST primary key: sha256 of `pep503-name@version`, 32 raw bytes."""
    return hashlib.sha256(f"{normalize(name)}@{version}".encode()).digest()


def tables(db: Database) -> RegistryTables:
    return db.registry(CODE)


def event_list(db: Database) -> EventList:
    return EventList(db, tables(db).list, normalize, event_id)


def seed_queue(db: Database) -> SqlQueue:
    return SqlQueue(db, seed_spec(tables(db).seed))


class VersionRows:
    """TB_COMP_LIB_VERSION_PYPI's reads and writes for the PyPI pipeline.

    Interim: the core's VERSION/PRODUCT owners (storage/owners.py, issue 17) are not on main
    yet; when they land these two classes become `VersionTable`/`ProductTable` instances."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.table = tables(db).version

    def upsert(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        upsert(conn, self.table, rows)

    def existing(self, product_keys: Sequence[str]) -> dict[str, set[str]]:
        table = self.table
        found: dict[str, set[str]] = {key: set() for key in product_keys}
        if not product_keys:
            return found
        with self.db.reading() as conn:
            rows = conn.execute(
                select(table.c.PRODUCT_KEY, table.c.VERSION).where(
                    table.c.LANGUAGE == literal(LANGUAGE),
                    table.c.REPOSITORY == literal(REPOSITORY),
                    table.c.PRODUCT_KEY.in_(list(product_keys)),
                )
            )
            for key, version in rows:
                found.setdefault(str(key).lower(), set()).add(version)
        return found


class ProductRows:
    """TB_COMP_LIB_PRODUCT_PYPI's writes (interim, see VersionRows)."""

    def __init__(self, db: Database) -> None:
        self.table = tables(db).product

    def upsert(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        upsert(conn, self.table, rows)


def versions(db: Database) -> VersionRows:
    return VersionRows(db)


def products(db: Database) -> ProductRows:
    return ProductRows(db)
