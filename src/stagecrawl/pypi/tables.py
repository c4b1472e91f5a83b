"""PyPI's tables and their owners: the one place that says PyPI's rows are LANGUAGE 'python',
REPOSITORY 'PyPI', keyed by the PEP 503 name and ordered by PEP 440
(TB_COMP_LIB_PYPI_LIST, TB_COMP_LIB_VERSION_PYPI, TB_COMP_LIB_PRODUCT_PYPI, the seed queue
TB_STAGECRAWL_SEED_PYPI; docs/schema.md)."""

from __future__ import annotations

import hashlib

from stagecrawl.pypi.names import normalize
from stagecrawl.pypi.versions import is_final, sort_key
from stagecrawl.queue import SqlQueue
from stagecrawl.queue.events import EventList, seed_spec
from stagecrawl.storage.db import Database, RegistryTables
from stagecrawl.storage.names import PYPI
from stagecrawl.storage.owners import ProductTable, VersionOrder, VersionTable

CODE = PYPI.code
LANGUAGE, REPOSITORY = "python", "PyPI"
# An invalid version (`unknown`) sorts below every valid one and is never a final release.
PEP440 = VersionOrder(key=sort_key, is_prerelease=lambda version: not is_final(version))


def event_id(name: str, version: str) -> bytes:
    """The LIST primary key: sha256 of `pep503-name@version`, 32 raw bytes."""
    return hashlib.sha256(f"{normalize(name)}@{version}".encode()).digest()


def tables(db: Database) -> RegistryTables:
    return db.registry(CODE)


def event_list(db: Database) -> EventList:
    return EventList(db, tables(db).list, normalize, event_id)


def seed_queue(db: Database) -> SqlQueue:
    return SqlQueue(db, seed_spec(tables(db).seed.name))


def versions(db: Database) -> VersionTable:
    return VersionTable(db, tables(db), LANGUAGE, REPOSITORY)


def products(db: Database) -> ProductTable:
    return ProductTable(db, tables(db), LANGUAGE, REPOSITORY, PEP440)
