"""The owners of VERSION and PRODUCT (`TB_COMP_LIB_VERSION_<X>`, `TB_COMP_LIB_PRODUCT_<X>`):
every read and write of those tables goes through here (sqlite-utils' lesson: the table
object owns its SQL), and so does the one latest-version rule.

Generic: a registry gives its tables, its LANGUAGE/REPOSITORY key and its version order
(SemVer for crates, PEP 440 for PyPI).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Table, and_, bindparam, literal, or_, select, update
from sqlalchemy.sql.elements import ColumnElement

from stagecrawl.storage.bulk import BulkUpsert, upsert
from stagecrawl.storage.db import Database, RegistryTables
from stagecrawl.storage.reads import TableReads

ACTIVE, YANKED = "ACTIVE", "YANKED"


@dataclass(frozen=True)
class VersionOrder:
    """A registry's version order: a sort key for any version text (an invalid one too) and
    whether a version is a pre-release."""

    key: Callable[[str], Any]
    is_prerelease: Callable[[str], bool]
    # (is_prerelease, key) from one parse, when the order can give both at once
    both: Callable[[str], tuple[bool, Any]] | None = None

    def prerelease_and_key(self, version: str) -> tuple[bool, Any]:
        if self.both is not None:
            return self.both(version)
        return self.is_prerelease(version), self.key(version)


class LatestVersion:
    """The one latest-version rule, fed one version at a time (a dump streams millions):
    the highest non-yanked final release, else the highest non-yanked pre-release, else the
    highest version of all (every one yanked). COMP_STATUS is ACTIVE while any version is not
    yanked."""

    __slots__ = ("_best", "_keys", "_order")

    def __init__(self, order: VersionOrder) -> None:
        self._order = order
        self._best: list[str | None] = [None, None, None]  # final, pre-release, yanked
        self._keys: list[Any] = [None, None, None]  # their sort keys, made once each

    def add(self, version: str, yanked: bool) -> None:
        pre, key = self._order.prerelease_and_key(version)
        rank = 2 if yanked else 1 if pre else 0
        if self._best[rank] is None or key > self._keys[rank]:
            self._best[rank], self._keys[rank] = version, key

    @property
    def latest(self) -> str | None:
        """The latest version, or None for none (for yanked, see the rule above)."""
        return next((v for v in self._best if v is not None), None)

    @property
    def status(self) -> str:
        return ACTIVE if self._best[0] is not None or self._best[1] is not None else YANKED


def latest_version(versions: Iterable[tuple[str, bool]], order: VersionOrder) -> LatestVersion:
    """The rule over (version, yanked) pairs."""
    latest = LatestVersion(order)
    for version, yanked in versions:
        latest.add(version, yanked)
    return latest


class _Owner(TableReads):
    """A registry's rows of one table (its status read, `count`, is TableReads')."""

    def __init__(
        self, db: Database, tables: RegistryTables, table: Table, language: str, repository: str
    ) -> None:
        super().__init__(table.name)
        self.db = db
        self.table = table
        self.language = language
        self.repository = repository
        # A stored key as the registry compares names: lower case unless case-sensitive (Go)
        self.fold = tables.names.fold

    def _mine(self, table: Table) -> ColumnElement[bool]:
        """This registry's rows (LANGUAGE, REPOSITORY)."""
        return and_(
            table.c.LANGUAGE == literal(self.language),
            table.c.REPOSITORY == literal(self.repository),
        )


class VersionTable(_Owner):
    """TB_COMP_LIB_VERSION_<X>: one row per (package, version)."""

    def __init__(self, db: Database, tables: RegistryTables, language: str, repository: str):
        super().__init__(db, tables, tables.version, language, repository)

    def upsert(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        """Insert or update whole rows (dicts with the same keys), in the caller's
        transaction."""
        upsert(conn, self.table, rows)

    def bulk(self, columns: Sequence[str]) -> BulkUpsert:
        """An upsert of tuple rows in `columns` order (the bulk loaders' path)."""
        return BulkUpsert(self.table, columns)

    def existing(self, product_keys: Sequence[str]) -> dict[str, set[str]]:
        """The versions already stored for each package (a read: no write lock)."""
        table = self.table
        found: dict[str, set[str]] = {key: set() for key in product_keys}
        if not product_keys:
            return found
        query = select(table.c.PRODUCT_KEY, table.c.VERSION).where(
            self._mine(table), table.c.PRODUCT_KEY.in_(list(product_keys))
        )
        # db.read: redone whole after a lost connection, within the outage bound
        for key, version in self.db.read(lambda conn: conn.execute(query).all()):
            found.setdefault(self.fold(str(key)), set()).add(version)
        return found

    def flip_yanked(
        self, conn: Connection, product_key: str, yanked: Mapping[str, bool], now: datetime
    ) -> int:
        """Set YANKED where the registry now says otherwise (a yank, or its reversal) for the
        stored versions of one package; returns how many rows changed."""
        table = self.table
        stored = conn.execute(
            select(table.c.VERSION, table.c.YANKED).where(
                self._mine(table), table.c.PRODUCT_KEY == literal(product_key)
            )
        ).all()
        flips = [
            {"k_version": v, "YANKED": yanked[v], "LAST_UPDATED": now}
            for v, was in stored
            if v in yanked and bool(was) != yanked[v]
        ]
        if flips:
            conn.execute(
                update(table)
                .where(
                    self._mine(table),
                    table.c.PRODUCT_KEY == literal(product_key),
                    table.c.VERSION == bindparam("k_version"),
                )
                .values(YANKED=bindparam("YANKED"), LAST_UPDATED=bindparam("LAST_UPDATED")),
                flips,
            )
        return len(flips)

    def by_product(self, conn: Connection) -> dict[str, list[str]]:
        """Every stored version, per package key (e.g. for an advisory import's hits)."""
        table = self.table
        found: dict[str, list[str]] = {}
        rows = conn.execute(select(table.c.PRODUCT_KEY, table.c.VERSION).where(self._mine(table)))
        for key, version in rows:
            found.setdefault(self.fold(str(key)), []).append(str(version))
        return found

    def licenses(
        self, conn: Connection, product_keys: Sequence[str] | None = None
    ) -> Iterator[tuple[str, str, str, str | None, str | None]]:
        """(PRODUCT_KEY lowercased, NAME, VERSION, LICENSE_EXPRESSION, LICENSE) of the stored
        versions (of `product_keys`, or all, streamed), in key and version order."""
        table = self.table
        query = (
            select(
                table.c.PRODUCT_KEY,
                table.c.NAME,
                table.c.VERSION,
                table.c.LICENSE_EXPRESSION,
                table.c.LICENSE,
            )
            .where(self._mine(table))
            .order_by(table.c.PRODUCT_KEY, table.c.VERSION)
        )
        keys = list(product_keys) if product_keys is not None else None
        chunks = [None] if keys is None else [keys[n : n + 500] for n in range(0, len(keys), 500)]
        for chunk in chunks:
            chosen = query if chunk is None else query.where(table.c.PRODUCT_KEY.in_(chunk))
            for key, name, version, expression, text in conn.execution_options(
                yield_per=5000
            ).execute(chosen):
                yield self.fold(str(key)), str(name), str(version), expression, text

    def versions_of(self, conn: Connection, product_key: str) -> list[tuple[str, str]]:
        """(NAME, VERSION) of one package's stored versions."""
        table = self.table
        rows = conn.execute(
            select(table.c.NAME, table.c.VERSION).where(
                self._mine(table), table.c.PRODUCT_KEY == literal(self.fold(product_key))
            )
        )
        return [(str(n), str(v)) for n, v in rows]

    # -- the license columns: every write to them goes through here ------------------------

    def license_rows(self, recompute_all: bool = False) -> list[tuple[str, str, str | None]]:
        """(PRODUCT_KEY, VERSION, LICENSE) of the rows whose license columns are to be
        (re)computed: all, or those without LICENSE_IDS or without an expression for a
        stored LICENSE."""
        t = self.table
        query = select(t.c.PRODUCT_KEY, t.c.VERSION, t.c.LICENSE).where(self._mine(t))
        if not recompute_all:
            query = query.where(
                or_(
                    t.c.LICENSE_IDS.is_(None),
                    and_(t.c.LICENSE_EXPRESSION.is_(None), t.c.LICENSE.is_not(None)),
                )
            )
        rows = self.db.read(lambda conn: conn.execute(query).all())
        return [(str(k), str(v), text) for k, v, text in rows]

    def set_licenses(self, updates: Sequence[Mapping[str, Any]]) -> None:
        """STANDARD_LICENSE, LICENSE_IDS and LICENSE_EXPRESSION of rows by (`key`,
        `version`), a thousand a transaction."""
        t = self.table
        statement = (
            update(t)
            .where(
                self._mine(t),
                t.c.PRODUCT_KEY == bindparam("k_key"),
                t.c.VERSION == bindparam("k_version"),
            )
            .values(
                STANDARD_LICENSE=bindparam("STANDARD_LICENSE"),
                LICENSE_IDS=bindparam("LICENSE_IDS"),
                LICENSE_EXPRESSION=bindparam("LICENSE_EXPRESSION"),
            )
        )
        rows = [
            {"k_key": u["key"], "k_version": u["version"]}
            | {c: u[c] for c in ("STANDARD_LICENSE", "LICENSE_IDS", "LICENSE_EXPRESSION")}
            for u in updates
        ]
        for start in range(0, len(rows), 1000):
            chunk = rows[start : start + 1000]

            def write(conn: Connection, chunk: list[dict[str, Any]] = chunk) -> None:
                conn.execute(statement, chunk)

            self.db.transaction(write)

    def without_license_ai(self) -> list[tuple[str, str, str]]:
        """(PRODUCT_KEY, VERSION, LICENSE) of the rows with a LICENSE and no LICENSE_AI."""
        t = self.table
        query = select(t.c.PRODUCT_KEY, t.c.VERSION, t.c.LICENSE).where(
            self._mine(t), t.c.LICENSE_AI.is_(None), t.c.LICENSE.is_not(None)
        )
        rows = self.db.read(lambda conn: conn.execute(query).all())
        return [(str(k), str(v), str(text)) for k, v, text in rows]

    def set_license_ai(self, updates: Sequence[tuple[str, str, str]]) -> None:
        """LICENSE_AI of rows by (key, version, value), in one transaction."""
        t = self.table
        statement = (
            update(t)
            .where(
                self._mine(t),
                t.c.PRODUCT_KEY == bindparam("k_key"),
                t.c.VERSION == bindparam("k_version"),
            )
            .values(LICENSE_AI=bindparam("LICENSE_AI"))
        )
        rows = [{"k_key": k, "k_version": v, "LICENSE_AI": ids} for k, v, ids in updates]
        if rows:
            self.db.transaction(lambda conn: conn.execute(statement, rows))


class ProductTable(_Owner):
    """TB_COMP_LIB_PRODUCT_<X>: one row per package, its LATEST_VERSION and COMP_STATUS by
    the one rule (`LatestVersion`)."""

    def __init__(
        self,
        db: Database,
        tables: RegistryTables,
        language: str,
        repository: str,
        order: VersionOrder,
    ) -> None:
        super().__init__(db, tables, tables.product, language, repository)
        self.order = order

    def latest(self, versions: Iterable[tuple[str, bool]] = ()) -> LatestVersion:
        """The rule, fed with (version, yanked) pairs (more may be added)."""
        return latest_version(versions, self.order)

    def upsert(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        upsert(conn, self.table, rows)

    def bulk(self, columns: Sequence[str]) -> BulkUpsert:
        return BulkUpsert(self.table, columns)

    def set_versions(
        self,
        conn: Connection,
        product_key: str,
        versions: Sequence[tuple[str, bool]],
        now: datetime,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """What the registry's version list decides for a stored package: LATEST_VERSION,
        COMP_STATUS and VERSION_COUNT (and the registry's own `extra` columns with them, e.g.
        PyPI's ETAG and LAST_SERIAL; a registry whose latest is not the one rule's, such as
        Go's @latest, gives its own LATEST_VERSION and COMP_STATUS there)."""
        latest = self.latest(versions)
        values = {
            "LATEST_VERSION": latest.latest,
            "COMP_STATUS": latest.status,
            "VERSION_COUNT": len(versions),
            "LAST_UPDATED": now,
        }
        conn.execute(
            update(self.table)
            .where(self._mine(self.table), self.table.c.PRODUCT_KEY == literal(product_key))
            .values(**(values | dict(extra or {})))
        )

    def column(self, conn: Connection, name: str) -> dict[str, Any]:
        """One column of every stored package, by key (PyPI's ETAG for a refresh)."""
        table = self.table
        rows = conn.execute(select(table.c.PRODUCT_KEY, table.c[name]).where(self._mine(table)))
        return {self.fold(str(key)): value for key, value in rows}

    def keys(self, conn: Connection) -> set[str]:
        """Every stored package key."""
        table = self.table
        rows = conn.execute(select(table.c.PRODUCT_KEY).where(self._mine(table)))
        return {self.fold(str(key)) for (key,) in rows}
