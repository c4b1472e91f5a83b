"""Opening a database by URL, creating the tables, reads and conflict retries.

Upserts and compiled executemany are in `storage.bulk`.

SQLAlchemy Core throughout. Identity columns get a case-insensitive collation chosen from what
the server offers (docs/schema.md has the mapping); JSON columns are text holding canonical
compact JSON written by stagecrawl, so every backend stores the same bytes.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import random
import socket
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

from sqlalchemy import (
    Column,
    Engine,
    Table,
    bindparam,
    create_engine,
    event,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    IntegrityError,
    NoSuchModuleError,
    SQLAlchemyError,
)
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.types import UserDefinedType

from stagecrawl.errors import DatabaseUnavailable, StorageError
from stagecrawl.jsoncodec import canonical
from stagecrawl.secrets import mask_url, redact
from stagecrawl.settings import DEFAULTS
from stagecrawl.storage import names
from stagecrawl.storage.reads import EngineReads, existing_database, file_uri, immutable
from stagecrawl.storage.schema import (
    Collations,
    MigrationContext,
    RegistrySchema,
    RegistryTables,
    build_metadata,
)

__all__ = ["Database", "RegistryTables", "dumps"]

log = logging.getLogger("stagecrawl.storage")

DEFAULT_DB_URL = "sqlite:///stagecrawl.db"
DEFAULT_OUTAGE_SECONDS = DEFAULTS.outage_seconds
# Execution option of a connection that only reads (Database.reading): on SQLite its
# transactions begin deferred and never take the write lock.
READING = "stagecrawl_reading"
MYSQL_CI_PREFERENCE = ("utf8mb4_0900_ai_ci", "utf8mb4_uca1400_ai_ci", "utf8mb4_unicode_520_ci")
MYSQL_CS_COLLATION = "utf8mb4_bin"  # case-sensitive identity (Go modules): as_cs compares bytes
PG_CI_COLLATION = "stagecrawl_ci"
SCHEMA_CORE = "core"  # the schema part of the shared tables (a registry's part is its code)


def dumps(value: Any) -> str | None:
    """Canonical compact JSON for JSON columns (None stays NULL)."""
    if value is None:
        return None
    if not value and type(value) in _EMPTY:  # most versions' features, many dependencies
        return _EMPTY[type(value)]
    return canonical(value)


_EMPTY: dict[type, str] = {list: "[]", dict: "{}", tuple: "[]"}


# SQLite databases this process writes, merged into their file when the process exits: the
# live ones by their own engine; the file of one already let go (a phase's database that is
# garbage once the phase returns) by its path.
_WRITTEN_SQLITE: weakref.WeakSet[Database] = weakref.WeakSet()
_WRITTEN_SQLITE_FILES: set[str] = set()


@atexit.register
def _merge_sqlite_wal_at_exit() -> None:
    """Merge the WAL of every SQLite database written here into its file as the process
    exits (a checkpoint that also empties the log): a process that only exits leaves its
    last commits (up to ~4 MB) in `stagecrawl.db-wal`, safe for SQLite, but then a backup or
    copy of `stagecrawl.db` alone lacks them, and on read-only media it cannot be read.

    A live database: not by closing its connections (the last close merges too): it also
    deletes `-wal` and `-shm`, and a reader who may not write in the folder (another user's
    crawl) can read a WAL database only while they exist. A database already let go: by a
    connection of its own, whose close may be the last (the log is merged by then). Nor does
    it wait: a reader holding a snapshot keeps what it reads in the log, which the next
    checkpoint merges."""
    try:
        _merge_sqlite_wals()
    except KeyboardInterrupt:  # a Ctrl-C as the process ends: the log stays (safe), it exits
        return


def _merge_sqlite_wals() -> None:
    live = list(_WRITTEN_SQLITE)
    for db in live:
        # an exit never fails on its clean-up
        with contextlib.suppress(Exception), db.engine.connect() as conn:
            driver = conn.connection.dbapi_connection
            assert driver is not None
            driver.execute("PRAGMA busy_timeout=0")  # at once, or not at all
            driver.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    let_go = _WRITTEN_SQLITE_FILES - {os.path.abspath(db.sqlite_path or "") for db in live}
    for path in sorted(p for p in let_go if os.path.exists(p)):
        with contextlib.suppress(Exception):
            own = sqlite3.connect(path, timeout=0)
            try:
                own.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            finally:
                own.close()


class Database:
    """An open database with stagecrawl's tables created on first use."""

    def __init__(
        self,
        url: str = DEFAULT_DB_URL,
        create: bool = True,
        read_only: bool = False,
        outage_seconds: float = DEFAULT_OUTAGE_SECONDS,
        sqlite_memory_mb: float = DEFAULTS.sqlite_memory_mb,
    ) -> None:
        """Open the database; with `read_only` nothing is created (no file, no folder, no
        table, no collation) and a missing database or missing tables are a StorageError.
        SQLite's memory is bounded by `sqlite_memory_mb` for the whole process (0: none).

        Once it has been reached, a server database that goes away is waited for: new
        connections are tried again with backoff, and `transaction` redoes a transaction
        whose connection was lost, for up to `outage_seconds` of outage in all; past that
        they raise DatabaseUnavailable. (An unreachable database at the start is a
        StorageError at once: a wrong URL is not an outage.)"""
        self.url = url
        self.read_only = read_only
        self.safe_url = mask_url(url)
        self.outage = Outage(outage_seconds, f"database {self.safe_url}")
        self._reached = False
        try:
            parsed = make_url(url)
        except ArgumentError:
            raise StorageError(f"bad database URL {self.safe_url}") from None
        kwargs: dict[str, Any] = {"pool_pre_ping": True}
        if parsed.get_backend_name() == "sqlite":
            # The sqlite3 module keeps each connection's last `cached_statements` prepared
            # statements (128 by default). Every `IN (…)` of another length is another
            # statement, some with thousands of parameters, so the cache filled with large
            # one-off statements and a crawl's RSS grew with its length (3,000 crates: 86 →
            # 137 MB, still climbing). The statements that recur are few and cheap to prepare.
            kwargs = {"connect_args": {"timeout": 30, "cached_statements": 16}}
            if read_only:
                parsed = _sqlite_read_only(parsed)
        elif "connect_timeout" not in parsed.query:  # the URL's own, if it sets one
            kwargs["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT}
        try:
            self.engine: Engine = create_engine(parsed, **kwargs)
        except (ArgumentError, NoSuchModuleError, ImportError, ValueError, TypeError) as exc:
            # ValueError, TypeError: a query value the dialect converts (`?read_timeout=soon`,
            # `?port=x` for PyMySQL) is a bad URL, not an internal error.
            raise StorageError(f"cannot use database URL {self.safe_url}: {exc}") from None
        self.dialect = self.engine.dialect.name
        if self.dialect == "sqlite":
            if not read_only:
                _check_sqlite_folder(parsed.database)
                _WRITTEN_SQLITE.add(self)
                if parsed.database and parsed.database != ":memory:":
                    _WRITTEN_SQLITE_FILES.add(os.path.abspath(parsed.database))
            _sqlite_immediate_transactions(self.engine, read_only, sqlite_memory_mb)
        else:
            event.listen(self.engine, "do_connect", self._connect_through_outages)
        try:
            with self.engine.connect() as conn:
                ci = self._case_insensitive_collation(conn)
        except SQLAlchemyError as exc:
            raise StorageError(
                f"cannot reach database {self.safe_url}: {_first_line(exc)}"
            ) from None
        except (ValueError, TypeError) as exc:  # the driver refused a query value (`?port=x`)
            raise StorageError(f"cannot use database URL {self.safe_url}: {exc}") from None
        self._reached = True
        self.collation = ci
        mysql_kw: dict[str, Any] = (
            {"mysql_charset": "utf8mb4", "mysql_collate": ci, "mysql_engine": "InnoDB"}
            if self.dialect in ("mysql", "mariadb") and ci
            else {}
        )
        # Options a table declared elsewhere takes to match these (charset, collation, engine).
        self.table_options = mysql_kw
        cs = MYSQL_CS_COLLATION if self.dialect in ("mysql", "mariadb") else None
        self.collations = Collations(ci, cs, mysql_kw, self.dialect)
        # Every registry declared in this process (storage/schema.py `register`), and the
        # shared tables; a registry reaches its own through `registry(code)`.
        self.metadata = build_metadata(self.collations)
        self.registries: dict[str, RegistryTables] = self.metadata.info["registries"]
        self.schemas: dict[str, RegistrySchema] = self.metadata.info["schemas"]
        self.license = self.metadata.tables[names.LICENSE]
        self.worker = self.metadata.tables[names.WORKER]
        self.schema_table = self.metadata.tables[names.SCHEMA]
        if read_only:
            self._require_tables()
        elif create:
            self.create_all()

    def registry(self, code: str) -> RegistryTables:
        """The tables of one registry (RUST, PYPI …), as it declared them."""
        try:
            return self.registries[code]
        except KeyError:
            raise StorageError(f"no registry {code} is declared in this process") from None

    def _require_tables(self) -> None:
        try:
            with self.engine.connect() as conn:
                present = {t.lower() for t in inspect(conn).get_table_names()}
        except SQLAlchemyError as exc:
            hint = _read_only_hint(self.sqlite_path) if self.is_sqlite else ""
            raise StorageError(f"cannot read {self.safe_url}: {_first_line(exc)}{hint}") from None
        if not any(t.list.name.lower() in present for t in self.registries.values()):
            raise StorageError(f"no stagecrawl tables in {self.safe_url}: nothing collected yet")
        # A reader cannot upgrade (migrations alter tables): a database an older stagecrawl
        # made is named, with the command that brings it up to date, rather than failing
        # later on the first query that reads a column it lacks.
        try:
            with self.engine.connect() as conn:
                behind = self._parts_behind(conn, present)
                live = inspect(conn)
                for table in self.metadata.sorted_tables:
                    if table.name.lower() not in present:
                        continue
                    have = {c["name"] for c in live.get_columns(table.name)}
                    lacking = [c.name for c in table.columns if c.name not in have]
                    if lacking:
                        behind.append(f"{table.name} (no {', '.join(lacking)})")
        except SQLAlchemyError as exc:
            raise StorageError(f"cannot read {self.safe_url}: {_first_line(exc)}") from None
        if behind:
            raise StorageError(names.behind_text(self.safe_url, behind))

    def _parts_behind(self, conn: Connection, present: set[str]) -> list[str]:
        """The registries whose tables exist at an older schema version than this
        stagecrawl's ("PYPI schema 0, now 1")."""
        stored = self._stored_versions(conn, present)
        behind = []
        for code, schema in self.schemas.items():
            tables = self.registries[code]
            if tables.list.name.lower() not in present:
                continue  # not made yet: made whole at this version by a writer
            have = stored.get(code, 0)
            if have < schema.version:
                behind.append(f"{code} schema {have}, now {schema.version}")
        return behind

    def _stored_versions(self, conn: Connection, present: set[str]) -> dict[str, int]:
        if names.SCHEMA.lower() not in present:
            return {}
        t = self.schema_table
        return {str(p): int(v) for p, v in conn.execute(select(t.c.PART, t.c.VERSION))}

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    @property
    def sqlite_path(self) -> str | None:
        return self.engine.url.database if self.is_sqlite else None

    def create_all(self) -> None:
        def create() -> None:
            self.migrate()
            self.upgrade()
            self.metadata.create_all(self.engine)
            self._record_versions()

        try:
            self._through_outages(create)  # all idempotent: redone after a lost connection
        except SQLAlchemyError as exc:
            raise StorageError(f"cannot create tables in {self.safe_url}: {exc}") from None

    def migrate(self) -> list[str]:
        """Run the migrations of every registry whose tables exist at an older schema
        version (a database an older stagecrawl made: none of the registry's tables know a
        version, so it is 0), each step once and in order, and record the version reached.
        Returns what was done, one line a step (also logged as a warning: a user sees once
        that the database changed). Each step is idempotent, so two processes starting at
        once, or a step cut short by a kill, end in the same shape."""
        done: list[str] = []
        with self.engine.connect() as conn:
            present = {t.lower() for t in inspect(conn).get_table_names()}
            stored = self._stored_versions(conn, present)
        for code, schema in self.schemas.items():
            if self.registries[code].list.name.lower() not in present:
                continue  # made whole at this version by create_all
            have = stored.get(code, 0)
            if have < schema.version:
                self.schema_table.create(self.engine, checkfirst=True)
            for step in sorted(schema.migrations, key=lambda m: m.version):
                if step.version <= have:
                    continue
                with self.engine.begin() as conn:
                    step.apply(MigrationContext(conn, self.dialect, self.metadata))
                line = f"upgraded {code} tables to schema {step.version}: {step.what}"
                log.warning("%s (%s)", line, self.safe_url)
                done.append(line)
                self._record(code, step.version)
        return done

    def _record_versions(self) -> None:
        """Every registry's tables exist now at this stagecrawl's version."""
        with self.engine.connect() as conn:
            stored = self._stored_versions(conn, {names.SCHEMA.lower()})
        for code, schema in self.schemas.items():
            if stored.get(code) != schema.version:
                self._record(code, schema.version)

    def _record(self, part: str, version: int) -> None:
        t = self.schema_table
        now = _utcnow()
        with self.engine.begin() as conn:
            updated = conn.execute(
                t.update().where(t.c.PART == part).values(VERSION=version, LAST_UPDATED=now)
            )
            if updated.rowcount:
                return
        try:
            with self.engine.begin() as conn:
                conn.execute(t.insert(), [{"PART": part, "VERSION": version, "LAST_UPDATED": now}])
        except IntegrityError:
            pass  # another process starting at the same moment recorded it first

    def upgrade(self) -> None:
        """Bring tables made by an older stagecrawl to the current shape (`create_all` never
        alters a table). Generic, by comparing the live table with the metadata:
        - a missing nullable column is added (`ALTER TABLE … ADD`), existing rows keep theirs;
        - a derived table (`info["derived"]`) that lacks a column or has another primary key
          is dropped, with every table derived from the same source (so none of them keeps
          rows the others lost), and created again empty;
        - any other difference is an error that names the table: nothing is changed."""
        live = inspect(self.engine)
        existing = set(live.get_table_names())
        rebuild: set[str] = set()
        add: list[tuple[Table, Column[Any]]] = []
        for table in self.metadata.sorted_tables:
            if table.name not in existing:
                continue
            columns = {c["name"] for c in live.get_columns(table.name)}
            key = live.get_pk_constraint(table.name).get("constrained_columns") or []
            missing = [c for c in table.columns if c.name not in columns]
            same_key = sorted(key) == sorted(c.name for c in table.primary_key.columns)
            if "derived" in table.info:
                if missing or not same_key:
                    rebuild.add(str(table.info["derived"]))
            elif same_key and all(c.nullable and not c.primary_key for c in missing):
                add += [(table, c) for c in missing]
            else:
                raise StorageError(
                    f"{table.name} in {self.safe_url} has a shape this stagecrawl cannot"
                    " upgrade in place (primary key or NOT NULL columns differ)"
                )
        doomed = [
            t
            for t in self.metadata.sorted_tables
            if t.name in existing and str(t.info.get("derived")) in rebuild
        ]
        if doomed:
            log.warning(
                "rebuilding %s: created by an older stagecrawl with another shape; "
                "they are derived data: %s",
                ", ".join(t.name for t in doomed),
                "; ".join(sorted(rebuild)),
            )
            self.metadata.drop_all(self.engine, tables=doomed)
        for table, column in add:
            quote = self.engine.dialect.identifier_preparer
            kind = column.type.compile(dialect=self.engine.dialect)
            statement = (
                f"ALTER TABLE {quote.format_table(table)} ADD {quote.quote(column.name)} {kind}"
            )
            log.info("adding column %s.%s", table.name, column.name)
            try:
                with self.engine.begin() as conn:
                    conn.execute(text(statement))
            except SQLAlchemyError:
                # Another process starting at the same moment may have added it first.
                names = {c["name"] for c in inspect(self.engine).get_columns(table.name)}
                if column.name not in names:
                    raise
        self._add_indexes(existing - {t.name for t in doomed})

    def _add_indexes(self, existing: set[str]) -> None:
        """Create the declared indexes an older stagecrawl did not make on tables that exist
        (`create_all` only indexes the tables it creates). On a large table this takes a
        while, once."""
        live = inspect(self.engine)
        for table in self.metadata.sorted_tables:
            if table.name not in existing or not table.indexes:
                continue
            present = {str(ix["name"]).lower() for ix in live.get_indexes(table.name)}
            for index in sorted(table.indexes, key=lambda ix: str(ix.name)):
                if str(index.name).lower() in present:
                    continue
                log.info("creating index %s on %s", index.name, table.name)
                try:
                    with self.engine.begin() as conn:
                        index.create(conn)
                except SQLAlchemyError:
                    # Another process starting at the same moment may have made it first.
                    names = {
                        str(ix["name"]).lower()
                        for ix in inspect(self.engine).get_indexes(table.name)
                    }
                    if str(index.name).lower() not in names:
                        raise

    def _case_insensitive_collation(self, conn: Connection) -> str | None:
        if self.dialect == "sqlite":
            return "NOCASE"
        if self.dialect in ("mysql", "mariadb"):
            # MariaDB lists its UCA 14 collations without the charset prefix (uca1400_ai_ci)
            # and accepts utf8mb4_0900_ai_ci only from 11.4.5, as a NO PAD alias: ask, and on
            # MariaDB prefer the PAD uca1400 collation that matches MySQL's comparison.
            version = str(conn.execute(text("SELECT VERSION()")).scalar() or "")
            available = {str(row[0]) for row in conn.execute(text("SHOW COLLATION LIKE '%ai_ci'"))}
            available |= {f"utf8mb4_{n}" for n in available if n.startswith("uca1400")}
            preference: tuple[str, ...] = MYSQL_CI_PREFERENCE
            if "mariadb" in version.lower():
                preference = ("utf8mb4_uca1400_ai_ci", *MYSQL_CI_PREFERENCE)
            for name in preference:
                if name in available:
                    return name
            return "utf8mb4_general_ci"
        if self.dialect == "postgresql":
            if self.read_only:
                return PG_CI_COLLATION  # created by the run that made the tables
            # A nondeterministic ICU collation compares case-insensitively (level 2).
            with conn.begin():
                conn.execute(
                    text(
                        f"CREATE COLLATION IF NOT EXISTS {PG_CI_COLLATION} (provider = icu,"
                        " locale = 'und-u-ks-level2', deterministic = false)"
                    )
                )
            return PG_CI_COLLATION
        return None

    def transaction(self, work: Callable[[Connection], T], attempts: int = 5) -> T:
        """Run `work` in one writing transaction; after a deadlock or a lock wait timeout (the
        database rolled all of it back, another worker's transaction went on) it runs again
        whole, up to `attempts` times. Several workers share the queue's tables, so every
        transaction they write in can be that victim."""

        def attempt() -> T:
            with self.engine.begin() as conn:
                return work(conn)

        return self._through_outages(lambda: retry_conflicts(attempt, attempts))

    def read(self, work: Callable[[Connection], T]) -> T:
        """Run `work` on a reading connection (see `reading`); a connection lost under it
        runs it again whole, within the outage bound, as `transaction` does."""

        def attempt() -> T:
            with self.reading() as conn:
                return work(conn)

        return self._through_outages(attempt)

    def _through_outages(self, attempt: Callable[[], T]) -> T:
        lost = 0
        while True:
            try:
                return attempt()
            except DBAPIError as exc:
                # The connection went away mid-transaction (the server stopped or restarted):
                # the database rolled it back, so it is redone whole once a connection can be
                # made again, within the outage bound.
                if self.is_sqlite or not self._reached or not is_connection_loss(exc):
                    raise
                self.outage.wait(exc, lost)
                lost += 1

    def _connect_through_outages(self, dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
        """SQLAlchemy's `do_connect` hook: every new connection (the pool's, after a failed
        pre-ping too) waits out an outage of a database this run has already reached."""
        attempt = 0
        while True:
            try:
                if dialect.driver == "pymysql" and not cparams.get("unix_socket"):
                    connection = _pymysql_connect_within(dialect, cargs, cparams)
                else:
                    connection = dialect.connect(*cargs, **cparams)
            except dialect.loaded_dbapi.Error as exc:
                if not self._reached or not is_connection_loss(exc):
                    raise
                self.outage.wait(exc, attempt)
                attempt += 1
                continue
            self.outage.over()
            return connection

    @contextlib.contextmanager
    def reading(self) -> Iterator[Connection]:
        """A connection for reads only. On SQLite its transaction begins deferred (plain
        BEGIN): in WAL mode a reader sees the last committed snapshot and never waits for the
        writer, nor makes it wait. It is also `query_only`, so a write on it fails at once
        instead of trying to upgrade a read snapshot to the write lock (which can fail with
        SQLITE_BUSY half-way, the reason writers begin IMMEDIATE). Elsewhere it is a plain
        connection."""
        with self.engine.connect() as conn:
            conn.execution_options(**{READING: True})
            yield conn

    @contextlib.contextmanager
    def reads(self) -> Iterator[EngineReads]:
        """A reading connection (`reading`) for the owners' portable status reads
        (storage/reads.py)."""
        with self.reading() as conn:
            yield EngineReads(conn)

    def dispose(self) -> None:
        self.engine.dispose()


class Outage:
    """How long a server has been unreachable, shared by every thread using one connection
    pool: the bound is on the outage, not per operation, so a worker stops at most
    `bound` seconds after it first lost the server, whatever was waiting."""

    BACKOFF_FIRST, BACKOFF_CAP = 0.25, 5.0

    def __init__(self, bound: float, what: str) -> None:
        self.bound = bound
        self.what = what
        self._since: float | None = None
        self._lock = threading.Lock()
        self._abandoned = threading.Event()
        self._stop_error: Callable[[str], BaseException] = DatabaseUnavailable

    def abandon(self, error: Callable[[str], BaseException]) -> None:
        """A stop was asked (SIGINT/SIGTERM): a wait ends now, raising `error(message)` (the
        caller's stop exception: storage knows nothing of the engine), rather than at the
        bound, so every stop stays bounded by its grace period."""
        self._stop_error = error
        self._abandoned.set()

    @property
    def ongoing(self) -> bool:
        return self._since is not None

    def wait(self, exc: BaseException, attempt: int) -> None:
        """After a lost connection: sleep one backoff step (full jitter, capped), or raise
        DatabaseUnavailable once the outage has lasted `bound` (then at once, every time,
        until a connection is made again)."""
        if self._abandoned.is_set():
            raise self._stop_error(f"stopped while {self.what} was unreachable: {_first_line(exc)}")
        with self._lock:
            now = time.monotonic()
            if self._since is None:
                self._since = now
                log.warning(
                    "lost the connection to %s (%s): trying again for up to %gs",
                    self.what,
                    _first_line(exc),
                    self.bound,
                )
            elapsed = now - self._since
        if elapsed >= self.bound:
            raise DatabaseUnavailable(
                f"{self.what} unreachable for {elapsed:.0f}s (outage_seconds"
                f" {self.bound:g}): {_first_line(exc)}; stopped (what it held is reclaimable"
                " once its leases run out)"
            ) from None
        step = min(self.BACKOFF_CAP, self.BACKOFF_FIRST * 2**attempt)
        if self._abandoned.wait(min(random.uniform(step / 2, step), self.bound - elapsed)):
            raise self._stop_error(f"stopped while {self.what} was unreachable: {_first_line(exc)}")

    def over(self) -> None:
        """A connection was made: the outage, if any, is over."""
        if self._since is None:
            return
        with self._lock:
            since, self._since = self._since, None
        if since is not None:
            log.warning("%s reachable again after %.1fs", self.what, time.monotonic() - since)


def _check_sqlite_folder(database: str | None) -> None:
    """Say plainly why a SQLite file cannot be made (SQLite only says 'unable to open')."""
    if not database or database == ":memory:" or Path(database).exists():
        return
    folder = Path(database).parent
    probe = folder / f".stagecrawl-probe-{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise StorageError(f"cannot create the database in {folder}: {exc.strerror}") from None


def _utcnow() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC).replace(tzinfo=None, microsecond=0)


def _first_line(exc: BaseException) -> str:
    """A driver error's first line, secrets masked (drivers may echo the URL)."""
    orig = getattr(exc, "orig", None) or exc
    return redact((str(orig) or type(orig).__name__).splitlines()[0])


def _sqlite_read_only(url: URL) -> URL:
    """`sqlite:///path` as a read-only URI; a missing file is a StorageError, not a new file."""
    path = url.database
    if not path or path == ":memory:":
        raise StorageError("a read-only command needs a database file, not :memory:")
    file = existing_database(path)
    query = {"mode": "ro", "uri": "true"}
    if immutable(file):
        query["immutable"] = "1"
    # SQLAlchemy's documented form: the file: URI as database, mode and uri as query.
    return url.set(database=file_uri(file), query=query)


def _read_only_hint(path: str | None) -> str:
    """Why SQLite could not open a database to read it, where it only says 'unable to open'."""
    if not path:
        return ""
    # a read-only command's is a `file:` URI (`file_uri`: %-escaped)
    file = Path(unquote(path.removeprefix("file:")) if path.startswith("file:") else path)
    folder = file.parent
    if os.access(folder, os.W_OK):
        return ""
    with contextlib.suppress(OSError):
        if os.statvfs(file).f_flag & os.ST_RDONLY:
            return (
                f" (it is on a read-only file system and {file.name}-wal holds commits not"
                " merged into it, which SQLite can read only with the"
                f" {file.name}-shm index it cannot make there: copy both files to writable"
                " storage)"
            )
    return (
        f" ({folder} is not writable, and a reader of a database in WAL mode needs"
        f" {file.name}-shm beside it: copy the database to a writable folder, or"
        " ask its owner to make that file)"
    )


def _sqlite_immediate_transactions(
    engine: Engine, read_only: bool = False, memory_mb: float = 0.0
) -> None:
    """SQLite is single-writer: a writing transaction takes the write lock up front (BEGIN
    IMMEDIATE), so two writers queue instead of failing half-way (SQLAlchemy's documented
    recipe for pysqlite transaction control). A transaction on a `Database.reading()`
    connection begins deferred and is query-only: readers never take the lock."""

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        if not read_only:
            dbapi_connection.execute("PRAGMA journal_mode=WAL")
            # Under WAL, NORMAL syncs at checkpoints, not at every commit. A killed process
            # (kill -9, a crash) loses nothing committed: the WAL is in the OS's page cache.
            # Only a power cut or an OS crash can lose the last commits, and the database
            # stays consistent; what those commits recorded (collected crates, LIST states)
            # is pending again in the queue, so it is only work to redo, not data lost
            # (docs/operations.md). FULL would fsync every group commit.
            dbapi_connection.execute("PRAGMA synchronous=NORMAL")
        dbapi_connection.execute("PRAGMA busy_timeout=30000")
        if memory_mb > 0:
            # Process-wide (SQLite keeps one soft heap limit): past it, a page cache reuses
            # its least recently used page instead of growing. Each connection's cache (2 MB
            # by default, one connection a thread) filled as the database grew, so a crawl's
            # peak RSS grew with its length; the pages are in the OS's cache anyway.
            dbapi_connection.execute(f"PRAGMA soft_heap_limit={int(memory_mb * 1024 * 1024)}")

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        reading = read_only or bool(conn.get_execution_options().get(READING))
        if not read_only:
            # query_only follows the connection's role; the pooled DBAPI connection remembers
            # its last setting so the pragma is sent only when the role changes.
            info = conn.connection.info
            if info.get(READING, False) != reading:
                conn.exec_driver_sql(f"PRAGMA query_only={int(reading)}")
                info[READING] = reading
        conn.exec_driver_sql("BEGIN" if reading else "BEGIN IMMEDIATE")


class _AsIs(UserDefinedType[Any]):
    """A bind type without conversion (NullType would infer one from the values)."""

    cache_ok = True

    def get_col_spec(self, **_kw: Any) -> str:
        return "BLOB"


def in_values(column: ColumnElement[Any], values: Sequence[Any]) -> ColumnElement[bool]:
    """`column IN (values)` with the values handed to the driver as they are: for keys the
    driver binds natively (bytes, str, int), without SQLAlchemy's per-value processing (a
    LargeBinary wraps every value, thousands per batch)."""
    return column.in_(
        bindparam(f"{column.key}_in", list(values), expanding=True, unique=True, type_=_AsIs())
    )


# The expanding bind of a statement built once and given its keys at each run
# (storage.bulk.execute_keyed).
KEYS = "keys"


def in_keys(column: ColumnElement[Any]) -> ColumnElement[bool]:
    """`column IN (:keys)`, the keys handed to the driver as they are (see `in_values`), for
    a statement built once (`storage.bulk.execute_keyed`)."""
    return column.in_(bindparam(KEYS, expanding=True, type_=_AsIs()))


# Errors that roll back a whole transaction because of another one, and say so: MySQL/MariaDB
# deadlock (1213) and lock wait timeout (1205); PostgreSQL deadlock and serialization failure.
_CONFLICT_CODES = {1213, 1205}
_CONFLICT_SQLSTATES = {"40P01", "40001"}
T = TypeVar("T")


def is_conflict(exc: BaseException) -> bool:
    """A deadlock or lock wait timeout: the transaction was rolled back and may be re-done."""
    orig = getattr(exc, "orig", None)
    if orig is None:
        return False
    args = getattr(orig, "args", ())
    if args and args[0] in _CONFLICT_CODES:
        return True
    return getattr(orig, "sqlstate", None) in _CONFLICT_SQLSTATES


# The connection is gone or cannot be made (an outage, not a bad statement). MySQL/MariaDB:
# can't connect through the socket (2002) or TCP (2003), server gone away (2006), lost during
# a query (2013) or at a system call (2055), server shutting down (1053), connection killed
# (1927), disconnected by the server (4031). PostgreSQL: SQLSTATE class 08 (connection
# exception), shutdown by an administrator or a crash (57P01, 57P02), cannot connect now
# (57P03: starting up, recovering); psycopg reports a refused connect or a dropped socket as
# an OperationalError without a SQLSTATE.
CONNECT_TIMEOUT = 10  # seconds: a server database's connection, its handshake included
_LOST_CODES = {2002, 2003, 2006, 2013, 2055, 1053, 1927, 4031}
_LOST_SQLSTATES = {"57P01", "57P02", "57P03"}


def _pymysql_connect_within(dialect: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
    """A PyMySQL connection whose whole handshake is bounded by `connect_timeout`.

    PyMySQL bounds only the TCP connect: the server's greeting and the login are then read with
    no timeout, so a port where another service listens (Redis, an HTTP server: each waits for
    the client to speak first) or a server that accepts and never answers held the command for
    ever, deaf to SIGINT. So the connection is made on a socket of our own (PyMySQL's public
    `connect(sock)`), which a timer shuts down if the handshake is not over in time."""
    dbapi = dialect.loaded_dbapi
    timeout = float(cparams.get("connect_timeout") or CONNECT_TIMEOUT)
    connection = dialect.connect(*cargs, **{**cparams, "defer_connect": True})
    where = f"{connection.host}:{connection.port}"
    bind = cparams.get("bind_address")
    try:
        sock = socket.create_connection(
            (connection.host, connection.port), timeout, (bind, 0) if bind else None
        )
    except OSError as exc:  # as PyMySQL words it: a connection that could not be made
        raise dbapi.OperationalError(
            2003, f"Can't connect to MySQL server on {where} ({exc})"
        ) from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    lock = threading.Lock()
    state = {"done": False, "cut": False}

    def cut() -> None:
        with lock:
            if not state["done"]:
                state["cut"] = True
                with contextlib.suppress(OSError):  # wakes the blocked read: it reads EOF
                    sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(timeout, cut)
    timer.daemon = True
    timer.start()
    try:
        connection.connect(sock)
    except dbapi.Error:
        if state["cut"]:  # 2013: a lost connection, so an outage mid-run is waited out
            raise dbapi.OperationalError(
                2013,
                f"no MySQL handshake from {where} within {timeout:g}s"
                " (is a MySQL or MariaDB server listening there?)",
            ) from None
        raise
    finally:
        with lock:
            state["done"] = True
        timer.cancel()
    return connection


def is_connection_loss(exc: BaseException) -> bool:
    """The database connection was lost or could not be made (not a bad statement)."""
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    orig = getattr(exc, "orig", None) or exc
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int) and args[0] in _LOST_CODES:
        return True
    sqlstate = getattr(orig, "sqlstate", None)
    if isinstance(sqlstate, str):
        return sqlstate.startswith("08") or sqlstate in _LOST_SQLSTATES
    kind = type(orig)
    return kind.__module__.startswith("psycopg") and kind.__name__ == "OperationalError"


def retry_conflicts(transaction: Callable[[], T], attempts: int = 5) -> T:
    """Run a whole transaction, again after a deadlock or lock wait timeout (the database
    rolled all of it back), up to `attempts` times with a short random pause between."""
    for attempt in range(1, attempts + 1):
        try:
            return transaction()
        except DBAPIError as exc:
            if attempt == attempts or not is_conflict(exc):
                raise
            log.info("transaction rolled back by a conflict (%s); again", _first_line(exc))
            time.sleep(random.uniform(0.01, 0.05) * attempt)
    raise AssertionError("unreachable")
