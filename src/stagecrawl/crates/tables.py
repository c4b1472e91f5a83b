"""The crates registry's tables and their owners: the one place that says crates.io's rows
are LANGUAGE 'rust', REPOSITORY 'Cargo', ordered by SemVer, with crates.io's own VERSION
columns (RUST_VERSION, LINKS) and its own table, the index state a refresh compares with
(TB_COMP_LIB_RUST_INDEX_STATE, owned by `IndexStateTable`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Column, Connection, DateTime, MetaData, String, Table, select

from stagecrawl.crates.declaration import NAMES
from stagecrawl.crates.semver import SEMVER
from stagecrawl.storage.bulk import upsert
from stagecrawl.storage.db import Database
from stagecrawl.storage.names import SHA256_MAX, VALIDATOR_MAX
from stagecrawl.storage.owners import ProductTable, VersionTable
from stagecrawl.storage.schema import Collations, RegistrySchema, register

LANGUAGE, REPOSITORY = "rust", "Cargo"
CODE = NAMES.code
INDEX_STATE = "TB_COMP_LIB_RUST_INDEX_STATE"
RUST_VERSION_MAX, LINKS_MAX = 32, 128


def _version_extra(_c: Collations) -> Sequence[Column[Any]]:
    return (
        Column("RUST_VERSION", String(RUST_VERSION_MAX)),
        Column("LINKS", String(LINKS_MAX)),
    )


def _own_tables(metadata: MetaData, c: Collations) -> Sequence[Table]:
    return (
        Table(
            INDEX_STATE,
            metadata,
            Column("PRODUCT_KEY", c.ident(NAMES.bounds.name), primary_key=True),
            Column("NAME", c.ident(NAMES.bounds.name), nullable=False),
            Column("ETAG", String(VALIDATOR_MAX)),
            Column("LAST_MODIFIED", String(64)),
            Column("CONTENT_SHA256", String(SHA256_MAX), nullable=False),
            Column("CHECKED_AT", DateTime, nullable=False),
            **c.mysql_kw,
        ),
    )


SCHEMA = register(
    RegistrySchema(
        NAMES,
        version_extra=_version_extra,
        extra_tables=_own_tables,
        vulns_command="stagecrawl crates vulns",
    )
)


def versions(db: Database) -> VersionTable:
    return VersionTable(db, db.registry(CODE), LANGUAGE, REPOSITORY)


def products(db: Database) -> ProductTable:
    return ProductTable(db, db.registry(CODE), LANGUAGE, REPOSITORY, SEMVER)


class IndexStateTable:
    """TB_COMP_LIB_RUST_INDEX_STATE: per crate, what its index file was when last read (the
    validators and the content's sha256), which a refresh's conditional GET compares with."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.table = db.registry(CODE).own[INDEX_STATE]

    def upsert(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> None:
        upsert(conn, self.table, rows)

    def known(self, names: Sequence[str]) -> list[dict[str, Any]]:
        """The stored states (of `names`, or all), by key."""
        state = self.table
        query = select(state)
        if names:
            query = query.where(state.c.PRODUCT_KEY.in_([n.lower() for n in names]))
        query = query.order_by(state.c.PRODUCT_KEY)
        return self.db.read(lambda conn: [dict(r._mapping) for r in conn.execute(query)])
