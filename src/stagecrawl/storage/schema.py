"""The tables' declarations: the shared ones, and each registry's, which a registry hands in
through `register` (storage knows no registry by name: sqlite-utils' lesson, the registry
owns its table's shape and storage owns how every table is made).

A registry declares `RegistrySchema`: its names (storage/names.py), its own columns beside
the organisation's column set (`version_extra`, `product_extra`), its own tables
(`extra_tables`) and the migrations that bring its tables from an older stagecrawl's shape to
this one. Every table is declared for one database at a time (`build_metadata`): a column's
collation depends on the server (case-insensitive identity for crates.io and PyPI,
case-sensitive for Go).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    BINARY,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    text,
)
from sqlalchemy.engine import Connection
from sqlalchemy.types import UserDefinedType

from stagecrawl.storage import names
from stagecrawl.storage.names import (
    SHA256_MAX,
    SOURCE_MAX,
    STATUS_MAX,
    URL_MAX,
    RegistryNames,
)


class _LongText(UserDefinedType[str]):
    """MySQL's and MariaDB's LONGTEXT, named without importing their dialect package."""

    cache_ok = True

    def get_col_spec(self, **_kw: Any) -> str:
        return "LONGTEXT"


# Column types in generic terms, so that declaring the tables imports no dialect package
# (SQLAlchemy's MySQL and PostgreSQL dialects cost a third of `stagecrawl status`'s start-up
# on SQLite).
JsonText = Text().with_variant(_LongText(), "mysql", "mariadb")
BigCount = Integer().with_variant(BigInteger(), "mysql", "mariadb", "postgresql")
EventId = LargeBinary(32).with_variant(BINARY(32), "mysql", "mariadb")


# Tables whose whole content is re-derived by one command (`info={"derived": …}` names it):
# when an older version created them with another shape, they are dropped and created again,
# all tables of the same source together (see Database.upgrade).
def derived_from_osv(command: str) -> dict[str, str]:
    return {"derived": f"OSV advisories (`{command}` refills them)"}


@dataclass(frozen=True)
class Collations:
    """The database's collations for identity columns: case-insensitive (`ci`) and
    case-sensitive (`cs`; None = the column's default, which is case-sensitive on SQLite
    and PostgreSQL)."""

    ci: str | None
    cs: str | None = None
    mysql_kw: dict[str, Any] = field(default_factory=dict)  # table options on MySQL/MariaDB
    dialect: str | None = None  # None: every dialect's index options

    def ident(self, length: int, case_sensitive: bool = False) -> String:
        return String(length, collation=self.cs if case_sensitive else self.ci)


@dataclass(frozen=True)
class RegistryTables:
    """One registry's tables in the organisation's format (docs/schema.md): the LIST (event
    grain, the durable queue), VERSION, PRODUCT, the seed queue, the advisory tables, and
    the tables of its own (by name)."""

    names: RegistryNames
    list: Table
    version: Table
    product: Table
    seed: Table
    vuln_raw: Table
    vuln_v1: Table
    vuln_hit: Table
    own: dict[str, Table] = field(default_factory=dict)

    @property
    def code(self) -> str:
        return self.names.code


@dataclass(frozen=True)
class MigrationContext:
    """What a migration works with: the live connection, its dialect, the declared tables
    (what the shape must become) and helpers that read the live shape."""

    conn: Connection
    dialect: str
    metadata: MetaData

    def columns(self, table: str) -> set[str]:
        from sqlalchemy import inspect

        inspector = inspect(self.conn)
        if not inspector.has_table(table):
            return set()
        return {c["name"] for c in inspector.get_columns(table)}

    def indexes(self, table: str) -> set[str]:
        from sqlalchemy import inspect

        return {str(ix["name"]) for ix in inspect(self.conn).get_indexes(table)}

    def q(self, identifier: str) -> str:
        return str(self.conn.dialect.identifier_preparer.quote(identifier))

    def run(self, sql: str) -> None:
        self.conn.execute(text(sql))

    def rename_column(self, table: str, old: str, new: str) -> None:
        """`old` is named `new` (its data, type and indexes kept), if it still has its old
        name. Every backend stagecrawl supports has RENAME COLUMN (SQLite 3.25, MySQL 8,
        MariaDB 10.5, PostgreSQL)."""
        have = self.columns(table)
        if old in have and new not in have:
            self.run(f"ALTER TABLE {self.q(table)} RENAME COLUMN {self.q(old)} TO {self.q(new)}")

    def drop_column(self, table: str, column: str) -> None:
        if column in self.columns(table):
            self.run(f"ALTER TABLE {self.q(table)} DROP COLUMN {self.q(column)}")

    def drop_index(self, table: str, index: str) -> None:
        """An index by its old name (the declared one, under its new name, is made after)."""
        if not self.columns(table) or index not in self.indexes(table):
            return
        if self.dialect in ("mysql", "mariadb"):
            self.run(f"DROP INDEX {self.q(index)} ON {self.q(table)}")
        else:
            self.run(f"DROP INDEX {self.q(index)}")

    def rename_group(self, names: RegistryNames, old: str) -> None:
        """The LIST's and the seed table's key column named as declared, from `old` (a LIST
        first keyed by another registry's word: PyPI's CRATE_NAME); the LIST's indexes named
        after `old` dropped (made again under the new name once the migrations ran)."""
        for index in _group_indexes(names.code, old):
            self.drop_index(names.list, index)
        self.rename_column(names.list, old, names.group)
        self.rename_column(names.seed, old, names.group)

    def widen_declared(self, names: RegistryNames, length: int) -> None:
        """Every column of the registry's tables declared `length` long made that wide (a
        raised bound: `names.bounds.name`, `.url`), found in the declaration, not listed
        again where a migration would drift from it. (`widen` keeps no server default on
        MySQL: a bound's columns have none.)"""
        n = names
        for table in (n.list, n.seed, n.version, n.product, n.vuln_raw, n.vuln_v1, n.vuln_hit):
            for column in self.metadata.tables[table].c:
                if isinstance(column.type, String) and column.type.length == length:
                    self.widen(table, column.name)

    def widen(self, table: str, column: str) -> None:
        """The column made as wide as it is declared now (its collation and NOT NULL kept).
        SQLite stores any length in a VARCHAR: nothing to do there."""
        if self.dialect == "sqlite" or column not in self.columns(table):
            return
        declared = self.metadata.tables[table].c[column]
        kind = declared.type.compile(dialect=self.conn.dialect)
        if self.dialect in ("mysql", "mariadb"):
            null = "NULL" if declared.nullable else "NOT NULL"
            self.run(f"ALTER TABLE {self.q(table)} MODIFY {self.q(column)} {kind} {null}")
        else:
            self.run(f"ALTER TABLE {self.q(table)} ALTER COLUMN {self.q(column)} TYPE {kind}")


@dataclass(frozen=True)
class Migration:
    """One step of a part's schema, from `version - 1` to `version`. `apply` must be
    idempotent (it checks the live shape first): two workers starting at once on one server
    both see the old version, and a step interrupted by a kill is run again."""

    version: int
    what: str  # one line, shown when it runs
    apply: Callable[[MigrationContext], None]


def _no_columns(_c: Collations) -> Sequence[Column[Any]]:
    return ()


def _no_tables(_m: MetaData, _c: Collations) -> Sequence[Table]:
    return ()


@dataclass(frozen=True)
class RegistrySchema:
    """A registry's declaration of its tables (see the module's docstring)."""

    names: RegistryNames
    version_extra: Callable[[Collations], Sequence[Column[Any]]] = _no_columns
    product_extra: Callable[[Collations], Sequence[Column[Any]]] = _no_columns
    dependencies_nullable: bool = False  # DEPENDENCIES NULL = unknown (PyPI)
    extra_tables: Callable[[MetaData, Collations], Sequence[Table]] = _no_tables
    migrations: tuple[Migration, ...] = ()
    vulns_command: str = "stagecrawl vulns"  # what refills its advisory tables, in messages

    @property
    def version(self) -> int:
        """The schema version this stagecrawl writes for the registry."""
        return max((m.version for m in self.migrations), default=0)


# The registries whose tables this process declares, by code, in registration order.
_REGISTERED: dict[str, RegistrySchema] = {}


def register(schema: RegistrySchema) -> RegistrySchema:
    """Declare a registry's tables (called once, by the registry's own table module)."""
    if schema.version != schema.names.schema_version:
        raise ValueError(
            f"registry {schema.names.code}: its names say schema {schema.names.schema_version},"
            f" its migrations reach {schema.version}"
        )
    known = _REGISTERED.get(schema.names.code)
    if known is not None and known is not schema:
        raise ValueError(f"registry {schema.names.code} is declared twice")
    _REGISTERED[schema.names.code] = schema
    return schema


def registered() -> list[RegistrySchema]:
    return list(_REGISTERED.values())


def _partial(dialect: str | None, **where: Any) -> dict[str, Any]:
    """A partial index's predicate for the database's dialect only: a `<dialect>_where` makes
    SQLAlchemy import that dialect's package, so PostgreSQL's, given on SQLite, doubled the
    time every command took to open a database (bench/startup.py). None: every dialect's."""
    return {k: v for k, v in where.items() if dialect is None or k == f"{dialect}_where"}


def registry_tables(metadata: MetaData, schema: RegistrySchema, c: Collations) -> RegistryTables:
    """Declare a registry's LIST, VERSION, PRODUCT, seed and advisory tables on `metadata`:
    the same column set for every registry, with the registry's own facts in added nullable
    columns and its own key column and collation."""
    n = schema.names
    code, group, cs = n.code, n.group, n.case_sensitive
    name_max, version_max = n.bounds.name, n.bounds.version
    by_group, processed, resync = _group_indexes(code, group)

    def ident(length: int) -> String:
        return c.ident(length, cs)

    kw = c.mysql_kw
    events = Table(
        n.list,
        metadata,
        Column("ID", EventId, primary_key=True),
        Column(group, ident(name_max), nullable=False),
        Column("NAME", ident(name_max), nullable=False),
        Column("VERSION", ident(version_max), nullable=False),
        Column("SOURCE", String(SOURCE_MAX), nullable=False),
        Column("RESOLVE_KIND", String(SOURCE_MAX)),
        Column("REF_TAGS", JsonText, nullable=False),
        Column("YANKED", Boolean, nullable=False, default=False),
        Column("PROCESSED", SmallInteger, nullable=False, default=0),
        Column("RESYNC", Boolean, nullable=False, default=False),
        Column("LAST_ERROR", Text),
        Column("CLAIMED_BY", String(128)),
        Column("CLAIMED_UNTIL", DateTime),
        # added by stagecrawl (nullable): when the lease was taken; when an event that could
        # not be attempted (a host's pause, our budget) may go again
        Column("CLAIMED_AT", DateTime),
        Column("NOT_BEFORE", DateTime),
        Column("TIMESTAMP", DateTime, nullable=False),
        Column("LAST_UPDATED", DateTime, nullable=False),
        Index(by_group, group),
        Index(f"IX_{code}_LIST_PROCESSED", "PROCESSED"),
        # The claim indexes (stagecrawl's, queue.QueueTable.indexed_claims): a claim reads
        # each pending or failing PROCESSED, and the RESYNC rows, in key order from these,
        # so its cost does not grow with the processed events. RESYNC is rare: the index
        # holds only those rows where the database has partial indexes.
        Index(processed, "PROCESSED", group),
        Index(
            resync,
            "RESYNC",
            group,
            **_partial(
                c.dialect, postgresql_where=text('"RESYNC"'), sqlite_where=text('"RESYNC" = 1')
            ),
        ),
        Index(f"IX_{code}_LIST_TIMESTAMP", "TIMESTAMP"),
        Index(f"IX_{code}_LIST_LAST_UPDATED", "LAST_UPDATED"),
        **kw,
    )
    version = Table(
        n.version,
        metadata,
        Column("LANGUAGE", String(16), primary_key=True),
        Column("REPOSITORY", String(16), primary_key=True),
        Column("PRODUCT_KEY", ident(name_max), primary_key=True),
        Column("VERSION", ident(version_max), primary_key=True),
        Column("NAME", ident(name_max), nullable=False),
        Column("DESCRIPTION", Text),
        Column("LICENSE", Text),
        Column("STANDARD_LICENSE", JsonText),
        Column("LICENSE_IDS", JsonText),
        Column("LICENSE_EXPRESSION", Text),
        Column("LICENSE_AI", JsonText),
        Column("DEPENDENCIES", JsonText, nullable=schema.dependencies_nullable),
        Column("FEATURES", JsonText, nullable=False),
        Column("CHECKSUM", String(SHA256_MAX)),
        Column("YANKED", Boolean, nullable=False),
        Column("URL", String(n.bounds.url)),
        Column("SCM", JsonText),
        Column("DOWNLOADS", BigCount),
        Column("RELEASE_DATE", DateTime),
        Column("PROCESSED", SmallInteger, nullable=False, default=1),
        Column("LAST_UPDATED", DateTime, nullable=False),
        *schema.version_extra(c),
        Index(f"IX_VERSION_{code}_LAST_UPDATED", "LAST_UPDATED"),
        **kw,
    )
    product = Table(
        n.product,
        metadata,
        Column("LANGUAGE", String(16), primary_key=True),
        Column("REPOSITORY", String(16), primary_key=True),
        Column("PRODUCT_KEY", ident(name_max), primary_key=True),
        Column("NAME", ident(name_max), nullable=False),
        Column("DESCRIPTION", Text),
        Column("LATEST_VERSION", String(version_max)),
        Column("COMP_STATUS", String(STATUS_MAX), nullable=False),
        Column("URL", String(n.bounds.url)),
        Column("SCM", JsonText),
        Column("KEYWORDS", JsonText),
        Column("CATEGORIES", JsonText),
        Column("DOWNLOADS", BigCount),
        Column("VERSION_COUNT", Integer, nullable=False),
        Column("LAST_UPDATED", DateTime, nullable=False),
        *schema.product_extra(c),
        **kw,
    )
    seed = Table(
        n.seed,
        metadata,
        Column(group, ident(name_max), primary_key=True),
        Column("NAME", ident(name_max), nullable=False),
        Column("STATE", SmallInteger, nullable=False, default=0),
        Column("RESYNC", Boolean, nullable=False, default=False),
        Column("VERSIONS", Integer),
        Column("LAST_ERROR", Text),
        Column("NOT_BEFORE", DateTime),  # not attempted (a host's pause): not before then
        Column("LAST_UPDATED", DateTime, nullable=False),
        **kw,
    )
    raw, v1, hit = _vuln_tables(metadata, n, c, derived_from_osv(schema.vulns_command))
    own = {t.name: t for t in schema.extra_tables(metadata, c)}
    return RegistryTables(n, events, version, product, seed, raw, v1, hit, own)


def _group_indexes(code: str, group: str) -> tuple[str, str, str]:
    """The LIST's indexes named after its key column `group` (the key alone, and the claims'
    PROCESSED and RESYNC ones); `CRATE` stands for CRATE_NAME in the claims' (the names they
    had before the key column was named per registry)."""
    short = "CRATE" if group == "CRATE_NAME" else group
    return (
        f"IX_{code}_LIST_{group}",
        f"IX_{code}_LIST_PROCESSED_{short}",
        f"IX_{code}_LIST_RESYNC_{short}",
    )


def _vuln_tables(
    metadata: MetaData, n: RegistryNames, c: Collations, derived: dict[str, str]
) -> tuple[Table, Table, Table]:
    """`TB_COMP_LIB_VULN_<X>_V1` (CVE-keyed rows of the packages in scope), `_RAW` (every
    advisory for every package it names) and `_HIT` (collected versions each advisory hits):
    one schema for every registry."""
    name_max, version_max, cs, kw = n.bounds.name, n.bounds.version, n.case_sensitive, c.mysql_kw
    v1 = Table(
        n.vuln_v1,
        metadata,
        Column("PRODUCT_KEY", c.ident(name_max, cs), primary_key=True),
        Column("VULN_ID", String(64), primary_key=True),
        Column("OSV_ID", String(64), primary_key=True),
        Column("VULN_RANGE", Text, nullable=False),
        Column("MAPPED_TYPE", String(8), nullable=False),
        Column("MODIFIED", DateTime),
        Column("LAST_UPDATED", DateTime, nullable=False),
        info=derived,
        **kw,
    )
    raw = Table(
        n.vuln_raw,
        metadata,
        Column("OSV_ID", String(64), primary_key=True),
        Column("PRODUCT_KEY", c.ident(name_max, cs), primary_key=True),
        Column("VULN_ID", String(64), nullable=False),
        Column("ALIASES", JsonText, nullable=False),
        Column("SUMMARY", Text),
        Column("SEVERITY", JsonText),
        Column("PUBLISHED", DateTime),
        Column("MODIFIED", DateTime),
        Column("WITHDRAWN", DateTime),
        Column("INFORMATIONAL", String(32)),
        Column("VULN_RANGE", Text, nullable=False),
        Column("MAPPED_TYPE", String(8), nullable=False),
        Column("OSV_JSON", JsonText, nullable=False),
        Column("LAST_UPDATED", DateTime, nullable=False),
        info=derived,
        **kw,
    )
    hit = Table(
        n.vuln_hit,
        metadata,
        Column("PRODUCT_KEY", c.ident(name_max, cs), primary_key=True),
        Column("VERSION", c.ident(version_max, cs), primary_key=True),
        Column("OSV_ID", String(64), primary_key=True),
        Column("VULN_ID", String(64), nullable=False),
        Column("LAST_UPDATED", DateTime, nullable=False),
        info=derived,
        **kw,
    )
    return raw, v1, hit


def build_metadata(c: Collations, schemas: Sequence[RegistrySchema] | None = None) -> MetaData:
    """Every table stagecrawl declares for one database: the shared tables and those of the
    registries given (default: every registered one). `metadata.info["registries"]` maps
    each registry's code to its `RegistryTables`."""
    metadata = MetaData()
    kw = c.mysql_kw
    registries: dict[str, RegistryTables] = {}
    for schema in registered() if schemas is None else schemas:
        registries[schema.names.code] = registry_tables(metadata, schema, c)
    metadata.info["registries"] = registries
    metadata.info["schemas"] = {s.names.code: s for s in registries_schemas(schemas)}
    Table(
        names.LICENSE,
        metadata,
        Column("ID", Integer, primary_key=True, autoincrement=False),
        Column("NAME_SHORT", String(128), nullable=False),
        Column("NAME", String(255)),
        Column("MAPPING", JsonText),
        Column("URL", String(URL_MAX)),
        **kw,
    )
    Table(
        names.WORKER,
        metadata,
        Column("WORKER_ID", String(128), primary_key=True),
        Column("HOST", String(255), nullable=False),
        Column("PID", Integer, nullable=False),
        Column("STARTED", DateTime, nullable=False),
        Column("HEARTBEAT", DateTime, nullable=False),
        Column("EVENTS_DONE", Integer, nullable=False, default=0),
        Column("CRATES_DONE", Integer, nullable=False, default=0),
        Column("REQUESTS", Integer, nullable=False, default=0),
        Column("SHARED_LIMIT", Boolean, nullable=False, default=False),
        # seconds after its last heartbeat that this worker counts as dead (a few of its
        # heartbeat intervals): any live worker then takes its leases back
        Column("STALE_AFTER", Integer),
        **kw,
    )
    Table(
        names.SCHEMA,
        metadata,
        Column("PART", String(32), primary_key=True),  # "core" or a registry's code
        Column("VERSION", Integer, nullable=False),
        Column("LAST_UPDATED", DateTime, nullable=False),
        **kw,
    )
    return metadata


def registries_schemas(schemas: Sequence[RegistrySchema] | None) -> list[RegistrySchema]:
    return registered() if schemas is None else list(schemas)
