"""Read-only queries as portable SQL text, for `stagecrawl status` (standard library only).

The owners' status reads (queue/reads.py, `TableReads.count` here) are each one SQL text,
built from their table's column names with the dialect's identifier quoting and with
`:name` parameters, run by both paths:
- `EngineReads`: a SQLAlchemy connection (`Database.reads()`, every backend), through `text()`;
- `SqliteReads`: the standard library's sqlite3 on a read-only SQLite file (`SqliteFile`), so
  `status` on SQLite never loads SQLAlchemy (a third of a second of start-up; issue 20).

Both see the values as stored: SQLAlchemy writes a SQLite DATETIME as the text
'YYYY-MM-DD HH:MM:SS.ffffff' and a BOOLEAN as 0/1, so a time is bound in that form there
(`Reads.time`) and read back with `parse_time`; the servers' drivers bind and return datetimes.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from stagecrawl.errors import StorageError
from stagecrawl.secrets import mask_url

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

# A plain `sqlite:///<path>` URL (the default's form): what the sqlite3 path opens itself.
# Any other form (a driver name, query options, %-escapes, :memory:) goes through SQLAlchemy.
SQLITE_PREFIX = "sqlite:///"


class Reads:
    """One read-only connection: runs SQL text with `:name` parameters."""

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect  # sqlite, mysql, mariadb, postgresql

    def q(self, name: str) -> str:
        """An identifier quoted for this dialect: PostgreSQL folds unquoted names to lower
        case, so its are double-quoted; MySQL and MariaDB quote with backticks, and so does
        SQLite here: a double-quoted name that is no column is a string literal to SQLite
        (its compatibility misfeature), so a column missing from an older table would read
        as its own name instead of failing (and being handed to the full path)."""
        if self.dialect in ("mysql", "mariadb", "sqlite"):
            return "`{}`".format(name.replace("`", "``"))
        return '"{}"'.format(name.replace('"', '""'))

    def time(self, value: datetime) -> Any:
        """A time as a parameter, in the form the column stores it (SQLAlchemy's SQLite
        DATETIME text, compared as text; a datetime for the servers' drivers)."""
        if self.dialect == "sqlite":
            return value.isoformat(" ", timespec="microseconds")
        return value

    def rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def table_names(self) -> set[str]:
        raise NotImplementedError

    def one(self, sql: str, params: Mapping[str, Any] | None = None) -> tuple[Any, ...]:
        return self.rows(sql, params)[0]

    def scalar(self, sql: str, params: Mapping[str, Any] | None = None) -> Any:
        found = self.rows(sql, params)
        return found[0][0] if found else None


def parse_time(value: Any) -> datetime | None:
    """A stored time as a datetime: SQLite's text form parsed, a driver's datetime as is."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        return datetime.fromisoformat(value)
    return None


def placeholders(prefix: str, values: Sequence[Any], params: dict[str, Any]) -> str:
    """`(:prefix_0, :prefix_1, …)` for an IN list, the values added to `params`."""
    names = [f"{prefix}_{n}" for n in range(len(values))]
    params.update(zip(names, values, strict=True))
    return "({})".format(", ".join(f":{name}" for name in names))


class EngineReads(Reads):
    """`Reads` on a SQLAlchemy connection (any backend)."""

    def __init__(self, conn: Connection) -> None:
        super().__init__(conn.dialect.name)
        self.conn = conn

    def rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        from sqlalchemy import text  # loaded already: this connection is SQLAlchemy's

        return [tuple(row) for row in self.conn.execute(text(sql), dict(params or {}))]

    def table_names(self) -> set[str]:
        from sqlalchemy import inspect

        return set(inspect(self.conn).get_table_names())


class SqliteReads(Reads):
    """`Reads` on a sqlite3 connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__("sqlite")
        self.conn = conn

    def rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in self.conn.execute(sql, dict(params or {}))]

    def table_names(self) -> set[str]:
        found = self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        return {str(name) for (name,) in found}


class ReadSource(Protocol):
    """Where status reads: a `Database` or a `SqliteFile`."""

    safe_url: str

    def reads(self) -> contextlib.AbstractContextManager[Reads]: ...


def sqlite_file(url: str) -> str | None:
    """The file of a plain `sqlite:///<path>` URL (relative, or absolute with a fourth
    slash), None for any other URL."""
    if not url.startswith(SQLITE_PREFIX):
        return None
    path = url[len(SQLITE_PREFIX) :]
    if not path or path == ":memory:" or any(c in path for c in "?%#"):
        return None
    return path


def existing_database(path: str) -> Path:
    """A read-only command's SQLite file; a missing file is a StorageError, not a new file."""
    if not Path(path).is_file():
        raise StorageError(f"no database at {path}: nothing collected yet (or a wrong --db)")
    return Path(path).resolve()


def file_uri(path: Path) -> str:
    """`path` (absolute) as SQLite's `file:` URI, without a query. SQLite reads a `?` or `#`
    in a URI's path as the start of its query or fragment and decodes `%HH`, so these are
    escaped: unescaped, a folder named `a#b` made `file:/x/a#b/s.db?mode=ro` open `/x/a` read
    and write, creating that file, with no `mode=ro`."""
    text = str(path).replace("%", "%25").replace("?", "%3F").replace("#", "%23")
    return f"file:{text}"


def immutable(path: Path) -> bool:
    """Whether SQLite must read `path` as immutable: it is on a file system mounted read-only
    (a snapshot, a CD, a read-only volume in a container), no commits wait in its WAL, and a
    plain read-only open fails there.

    Our databases are in WAL mode, and a reader of a WAL database needs the `-shm` index
    beside it, which SQLite cannot create on read-only media: it says only "unable to open
    database file". Read as immutable (no locks, no index), it opens (CPython's dbm.sqlite3
    does the same, gh-135386). Only when the plain open fails: a read-only mount may be a view
    of a volume another machine or container writes, and there the index exists and its locks
    keep a read from being torn by a checkpoint."""
    try:
        if not os.statvfs(path).f_flag & os.ST_RDONLY:
            return False
        wal = path.with_name(f"{path.name}-wal")
        if wal.exists() and wal.stat().st_size > 0:
            return False  # commits that immutable mode would not see
    except OSError:
        return False
    try:
        probe = sqlite3.connect(f"{file_uri(path)}?mode=ro", uri=True, timeout=1)
        try:
            probe.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            probe.close()
    except sqlite3.Error:
        return True
    return False


class SqliteFile:
    """A SQLite database opened read-only with the standard library (`mode=ro`: no file,
    table or journal is ever made). A sqlite3.Error from it (no such table or column: a
    database made by an older stagecrawl, or not stagecrawl's) is the caller's to hand to
    the full path, which names the problem as every command does."""

    def __init__(self, url: str, path: str) -> None:
        self.safe_url = mask_url(url)
        self.path = existing_database(path)
        # decided once: `status` opens several snapshots, and on a read-only mount the
        # decision probes the file
        mode = "mode=ro&immutable=1" if immutable(self.path) else "mode=ro"
        self.uri = f"{file_uri(self.path)}?{mode}"

    @contextlib.contextmanager
    def reads(self) -> Iterator[Reads]:
        """One snapshot (a deferred transaction: in WAL mode it never waits for a writer,
        nor makes one wait), as `Database.reading` gives on SQLite."""
        # timeout: as the SQLAlchemy path's, for a database locked in another journal mode
        conn = sqlite3.connect(self.uri, uri=True, timeout=30, isolation_level=None)
        try:
            conn.execute("BEGIN")
            yield SqliteReads(conn)
            conn.execute("ROLLBACK")
        finally:
            conn.close()


class TableReads:
    """The status reads of a table any owner has (storage/owners.py)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def count(self, reads: Reads) -> int:
        """Rows in the table."""
        return int(reads.scalar(f"SELECT COUNT(*) FROM {reads.q(self.name)}"))
