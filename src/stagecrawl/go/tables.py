"""Go's tables and their owners: LANGUAGE 'Golang', REPOSITORY 'Go', identity case-sensitive
(SQLite BINARY, MySQL/MariaDB utf8mb4_bin, PostgreSQL's default: `github.com/BurntSushi/toml`
and `github.com/burntsushi/toml` are two modules), Go's own facts in added columns, and the
index feed's cursor (TB_COMP_LIB_GOLANG_INDEX_CURSOR), written only with the work it implies."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Column, Connection, MetaData, Table

from stagecrawl.go.declaration import NAMES
from stagecrawl.go.versions import sort_key
from stagecrawl.queue.table import utcnow
from stagecrawl.storage.bulk import upsert
from stagecrawl.storage.db import Database
from stagecrawl.storage.names import URL_MAX, VALIDATOR_MAX, VERSION_MAX
from stagecrawl.storage.owners import VersionOrder
from stagecrawl.storage.schema import Collations, JsonText, RegistrySchema, register

LANGUAGE, REPOSITORY = "Golang", "Go"
CURSOR = "TB_COMP_LIB_GOLANG_INDEX_CURSOR"
GO_ORDER = VersionOrder(key=sort_key, is_prerelease=lambda v: "-" in v.split("+", 1)[0])


def _version_extra(_c: Collations) -> Sequence[Column[Any]]:
    return (
        Column("RETRACTED", sa.Boolean),  # by the go.mod @latest resolves to (YANKED too)
        Column("RETRACTED_REASON", sa.Text),  # the retract directive's comment
        Column("PSEUDO", sa.Boolean),
        Column("INCOMPATIBLE", sa.Boolean),
        Column("GO_VERSION", sa.String(32)),  # the go line of this version's go.mod
        Column("TOOLCHAIN", sa.String(32)),
        Column("GO_MOD_SYNTHETIC", sa.Boolean),  # no go.mod: the proxy's `module <path>`
        Column("LICENSE_SOURCE", sa.String(16)),  # "zip" once its LICENSE files were read
    )


def _product_extra(_c: Collations) -> Sequence[Column[Any]]:
    return (
        Column("DEPRECATED", sa.Text),  # the `Deprecated:` paragraph of the latest go.mod
        Column("RETRACTIONS_FROM", sa.String(VERSION_MAX)),  # the go.mod they were read from
        Column("RETRACTIONS", JsonText),  # [[low, high, rationale], …]
        Column("LIST_ETAG", sa.String(VALIDATOR_MAX)),  # @v/list's, for a conditional GET
    )


def _own_tables(metadata: MetaData, c: Collations) -> Sequence[Table]:
    return (
        Table(
            CURSOR,
            metadata,
            Column("FEED", sa.String(URL_MAX), primary_key=True),
            Column("SINCE", sa.String(40), nullable=False),  # the last Timestamp, as sent
            Column("SCOPE", sa.String(16), nullable=False),  # "stored" or "all" (a mirror)
            Column("LAST_UPDATED", sa.DateTime, nullable=False),
            **c.mysql_kw,
        ),
    )


SCHEMA = register(
    RegistrySchema(
        NAMES,
        version_extra=_version_extra,
        product_extra=_product_extra,
        extra_tables=_own_tables,
        vulns_command="stagecrawl go vulns",
    )
)


class GoTables:
    """What Go writes beside the owners' columns: the feed cursor, and the retraction facts a
    refresh changes (in the refresh's transaction)."""

    def __init__(self, db: Database) -> None:
        tables = db.registry(NAMES.code)
        self.db, self.cursor, self.version = db, tables.own[CURSOR], tables.version

    def read_cursor(self, feed: str) -> tuple[str, str] | None:
        c = self.cursor.c
        row = self.db.read(
            lambda conn: conn.execute(sa.select(c.SINCE, c.SCOPE).where(c.FEED == feed)).first()
        )
        return None if row is None else (str(row[0]), str(row[1]))

    def save_cursor(self, conn: Connection, feed: str, since: str, scope: str) -> None:
        row = {"FEED": feed, "SINCE": since, "SCOPE": scope, "LAST_UPDATED": utcnow()}
        upsert(conn, self.cursor, [row])

    def set_retractions(
        self, conn: Connection, key: str, reasons: Mapping[str, str | None]
    ) -> None:
        """RETRACTED and its rationale of a module's stored versions (None: not retracted)."""
        t, bind = self.version, sa.bindparam
        mine = sa.and_(t.c.LANGUAGE == LANGUAGE, t.c.PRODUCT_KEY == key, t.c.VERSION == bind("k"))
        update = sa.update(t).where(mine).values(RETRACTED=bind("r"), RETRACTED_REASON=bind("why"))
        if rows := [{"k": v, "r": why is not None, "why": why} for v, why in reasons.items()]:
            conn.execute(update, rows)
