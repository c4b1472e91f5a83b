"""Core statements sent straight to the driver's executemany, compiled once.

SQLAlchemy's own executemany processes each row's parameters in Python (several µs per value):
right for a few rows, but for collect, register and the bulk loaders (a million versions from a
dump, every OSV advisory) it costs more than the database's work. Here a Core statement is
compiled once per dialect, *shape* (a key naming the statement) and column order of the rows,
and the rows go through `Connection.exec_driver_sql`: the transaction, its events (SQLite's
BEGIN IMMEDIATE) and error wrapping stay SQLAlchemy's, while the rows go to the DBAPI's
executemany in one call (sqlite3 loops in C; PyMySQL folds an INSERT … VALUES into multi-row
statements; psycopg pipelines). The bind processors the dialect needs (SQLite's DATETIME text,
booleans) are applied, and binds the rows leave out get their column's scalar default, as Core
does: the stored bytes are those of `conn.execute(statement, rows)`.

One path, two ways in:
- `execute(conn, compiled, rows)`: rows as tuples (or lists) in the compiled column order, the
  bulk loaders' hot path (`BulkUpsert` is the upsert on it);
- `executemany(conn, shape, build, rows)`: rows as dicts, turned into tuples by one itemgetter
  call a row, then the same path (`upsert` is the upsert on it).

Knows no table: callers pass the Table or statement and their columns.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from sqlalchemy import Column, LargeBinary, Table
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql.expression import Executable
from sqlalchemy.types import TypeEngine

from stagecrawl.errors import StorageError
from stagecrawl.storage.db import KEYS

Processor = Callable[[Any], Any]
_NOTHING: Any = object()


@dataclass(frozen=True)
class Compiled:
    """A statement compiled for one dialect and one column order of the rows."""

    sql: str
    columns: tuple[str, ...]  # the values of a row, in order
    names: tuple[str, ...]  # `columns`, then the binds filled from column defaults
    defaults: tuple[Any, ...]  # the values of those defaulted binds, already processed
    processors: tuple[tuple[int, Processor], ...]  # (position in `columns`, convert)
    # Positional paramstyle: extended row → the SQL's parameters, in the SQL's order, or None
    # when the extended row is in that order already. Named: None when every name is a
    # parameter (the dict is zip(names, row)), else the picker of `params` (the SQL's names)
    # out of the extended row.
    pick: Callable[[Sequence[Any]], tuple[Any, ...]] | None
    params: tuple[str, ...] | None  # named paramstyle: the names `pick` yields
    positional: bool


# Per dialect object (so an engine's statements never serve another engine's dialect), kept
# only as long as the engine is.
_COMPILED: weakref.WeakKeyDictionary[Dialect, dict[Hashable, Compiled]] = (
    weakref.WeakKeyDictionary()
)


def compile_for(
    dialect: Dialect, shape: Hashable, build: Callable[[], Executable], columns: Sequence[str]
) -> Compiled:
    """The statement `build()` compiled for `dialect` and rows of `columns`, once: later calls
    with the same `shape` and columns return the cached one (`build` is not called)."""
    cache = _COMPILED.get(dialect)
    if cache is None:
        cache = _COMPILED[dialect] = {}
    key = (shape, tuple(columns))
    compiled = cache.get(key)
    if compiled is None:
        compiled = cache[key] = _compile(build(), dialect, tuple(columns))
    return compiled


def execute(conn: Connection, compiled: Compiled, rows: Sequence[Sequence[Any]]) -> None:
    """Send `rows` (sequences in `compiled.columns` order) in one executemany, inside the
    caller's transaction. The caller's rows are not changed."""
    if not rows:
        return
    width = len(compiled.columns)
    if set(map(len, rows)) != {width}:
        raise ValueError(f"rows must have {width} values ({', '.join(compiled.columns)})")
    _send(conn, compiled, rows)


def executemany(
    conn: Connection,
    shape: Hashable,
    build: Callable[[], Executable],
    rows: Sequence[Mapping[str, Any]],
) -> None:
    """Run one Core statement (`build()`, compiled once per `shape`, dialect and row keys)
    for many dict rows through the driver's executemany. All rows must have the keys of the
    first (extra keys are ignored)."""
    if not rows:
        return
    columns = tuple(rows[0])
    _send(conn, compile_for(conn.dialect, shape, build, columns), _tuples(rows, columns))


def _tuples(rows: Sequence[Mapping[str, Any]], columns: tuple[str, ...]) -> list[tuple[Any, ...]]:
    if len(columns) == 1:
        name = columns[0]
        return [(row[name],) for row in rows]
    return list(map(itemgetter(*columns), rows))  # one C call a row


def _send(conn: Connection, compiled: Compiled, rows: Sequence[Sequence[Any]]) -> None:
    defaults = compiled.defaults
    table: Sequence[Sequence[Any]]
    if compiled.processors:
        lists = [[*row, *defaults] for row in rows]  # copies: the caller's rows stay
        for n, convert in compiled.processors:
            # Column by column, each distinct value converted once: a batch's `now`, True and
            # False, a date repeated (equal values convert equally for what stagecrawl binds:
            # naive datetimes, bools, text). The previous row's object is checked first, the
            # cheapest hit.
            done: dict[Any, Any] = {}
            last_in: Any = _NOTHING
            last_out: Any = None
            for values in lists:
                value = values[n]
                if value is None:
                    continue
                if value is not last_in:
                    try:
                        out = done.get(value, _NOTHING)
                        if out is _NOTHING:
                            out = done[value] = convert(value)
                    except TypeError:  # unhashable
                        out = convert(value)
                    last_in, last_out = value, out
                values[n] = last_out
        table = lists
    elif defaults:
        table = [(*row, *defaults) for row in rows]
    else:
        table = rows
    params: list[Any]
    pick = compiled.pick
    if compiled.positional:
        # rows already in the SQL's order only made tuples (what exec_driver_sql takes), not
        # picked value by value
        params = list(map(tuple, table)) if pick is None else list(map(pick, table))
    elif pick is None:
        names = compiled.names
        params = [dict(zip(names, row, strict=True)) for row in table]
    else:
        assert compiled.params is not None
        names = compiled.params
        params = [dict(zip(names, pick(row), strict=True)) for row in table]
    conn.exec_driver_sql(compiled.sql, params)


def _compile(statement: Executable, dialect: Dialect, columns: tuple[str, ...]) -> Compiled:
    compiled: Any = statement.compile(dialect=dialect, column_keys=list(columns))  # type: ignore[attr-defined]
    if getattr(compiled, "escaped_bind_names", None):
        raise StorageError(f"bulk statement with escaped parameter names: {compiled.sql}")
    binds = compiled.binds
    # The SQL's parameters, in order (a name may repeat when positional).
    in_sql: tuple[str, ...] = (
        tuple(compiled.positiontup or ()) if compiled.positional else tuple(binds)
    )
    extra = [name for name in dict.fromkeys(in_sql) if name not in columns]
    defaults = []
    for name in extra:
        # A bind no row gives: the INSERT's column left out, filled with its scalar default
        # (processed once here).
        column = _column_of(statement, name)
        default = column.default if column is not None else None
        if default is None or not getattr(default, "is_scalar", False):
            raise ValueError(f"bulk statement needs a value for {name} (no scalar default)")
        value = getattr(default, "arg", None)
        convert = _processor(binds[name].type, dialect)
        defaults.append(value if convert is None or value is None else convert(value))
    names = (*columns, *extra)
    processors = []
    for n, name in enumerate(columns):
        if name in binds:
            convert = _processor(binds[name].type, dialect)
            if convert is not None:
                processors.append((n, convert))
    position = {name: n for n, name in enumerate(names)}
    pick: Callable[[Sequence[Any]], tuple[Any, ...]] | None = None
    params: tuple[str, ...] | None = None
    if compiled.positional:
        order = [position[name] for name in in_sql]
        pick = None if order == list(range(len(names))) else _picker(order)
    elif set(in_sql) != set(names):
        params = in_sql
        pick = _picker([position[name] for name in in_sql])
    return Compiled(
        compiled.string,
        columns,
        names,
        tuple(defaults),
        tuple(processors),
        pick,
        params,
        bool(compiled.positional),
    )


def _picker(positions: list[int]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    if len(positions) == 1:
        only = positions[0]
        return lambda row: (row[only],)
    return itemgetter(*positions)


def _processor(type_: TypeEngine[Any], dialect: Dialect) -> Processor | None:
    impl = type_.dialect_impl(dialect)
    # Bytes need no wrapping: sqlite3, pymysql and psycopg bind them as BLOB/bytea.
    if isinstance(impl, LargeBinary):
        return None
    return impl.bind_processor(dialect)


def _column_of(statement: Executable, name: str) -> Column[Any] | None:
    table = getattr(statement, "table", None)
    if table is None or name not in table.c:
        return None
    column: Column[Any] = table.c[name]
    return column


# -- upserts -----------------------------------------------------------------------------------
def upsert_statement(dialect: str, table: Table, update: Sequence[str]) -> Executable:
    """INSERT into `table`, or UPDATE the `update` columns where the primary key exists."""
    # The dialect's package is imported here, not at the top: a command that only reads
    # (status) never needs one, and each costs start-up time.
    if dialect in ("mysql", "mariadb"):
        from sqlalchemy.dialects import mysql

        my = mysql.insert(table)
        return my.on_duplicate_key_update({c: my.inserted[c] for c in update})
    keys = [c.name for c in table.primary_key.columns]
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql

        pg = postgresql.insert(table)
        return pg.on_conflict_do_update(
            index_elements=keys, set_={c: pg.excluded[c] for c in update}
        )
    from sqlalchemy.dialects import sqlite

    lite = sqlite.insert(table)
    return lite.on_conflict_do_update(
        index_elements=keys, set_={c: lite.excluded[c] for c in update}
    )


class BulkUpsert:
    """Insert rows (tuples in `columns` order), or update the `update` columns (default: every
    non-key column given) where the primary key already exists."""

    def __init__(
        self, table: Table, columns: Sequence[str], update: Iterable[str] | None = None
    ) -> None:
        keys = [c.name for c in table.primary_key.columns]
        missing = [k for k in keys if k not in columns]
        if missing:
            raise ValueError(f"{table.name}: an upsert needs the key columns {missing}")
        self.table = table
        self.columns = tuple(columns)
        self.update = (
            tuple(update) if update is not None else tuple(c for c in columns if c not in keys)
        )
        self.shape = ("upsert", table, self.update)

    def compiled(self, dialect: Dialect) -> Compiled:
        return compile_for(
            dialect,
            self.shape,
            lambda: upsert_statement(dialect.name, self.table, self.update),
            self.columns,
        )

    def execute(self, conn: Connection, rows: Sequence[Sequence[Any]]) -> None:
        """Send `rows` in one executemany, inside the caller's transaction."""
        if rows:
            execute(conn, self.compiled(conn.dialect), rows)

    def execute_dicts(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        """The same for dict rows (with at least the keys `columns`)."""
        if rows:
            _send(conn, self.compiled(conn.dialect), _tuples(rows, self.columns))


def upsert(
    conn: Connection,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    update: Iterable[str] | None = None,
) -> None:
    """Insert dict rows, or update the given columns (default: every non-key column of the
    rows) where the primary key already exists. Every row has the keys of the first; they go
    to the driver's executemany in one call: on pymysql that is multi-row INSERTs, on psycopg a
    pipeline."""
    if rows:
        BulkUpsert(table, tuple(rows[0]), update).execute_dicts(conn, rows)


# -- statements over a list of keys ------------------------------------------------------------


@dataclass(frozen=True)
class _Keyed:
    """A keyed statement compiled for one dialect: its SQL split at the key list, and how
    its other binds are processed."""

    head: str
    tail: str
    before: tuple[tuple[str, Processor | None], ...]  # binds before the key list, in order
    after: tuple[tuple[str, Processor | None], ...]  # and after it
    marker: str  # the paramstyle's one placeholder


_KEYED: weakref.WeakKeyDictionary[Dialect, dict[Hashable, _Keyed | None]] = (
    weakref.WeakKeyDictionary()
)


def execute_keyed(
    conn: Connection,
    shape: Hashable,
    build: Callable[[], Executable],
    keys: Sequence[Any],
    values: Mapping[str, Any],
) -> Any:
    """Run the statement `build()` (a `storage.db.in_keys(column)` and
    other named binds given in `values`), for `keys`, and return its result. On SQLite it is
    compiled once per `shape` and sent as its own SQL text with one placeholder a key: the
    keys bound as they are (bytes, str, int need no conversion), the other binds by their
    types. SQLAlchemy would build and expand the list afresh each time (a statement per
    commit of a crawl, with hundreds of keys), the costliest part of those statements. On
    other databases the statement is built once and run by SQLAlchemy, its list expanded
    there."""
    dialect = conn.dialect
    cache = _KEYED.get(dialect)
    if cache is None:
        cache = _KEYED[dialect] = {}
    if shape not in cache:
        cache[shape] = _compile_keyed(build(), dialect) if dialect.name == "sqlite" else None
    keyed = cache[shape]
    if keyed is None:
        built = _STATEMENTS.setdefault(dialect, {})
        statement = built.get(shape)
        if statement is None:
            statement = built[shape] = build()
        return conn.execute(statement, {**values, KEYS: list(keys)})
    params = [*_bound(keyed.before, values), *keys, *_bound(keyed.after, values)]
    marks = ", ".join([keyed.marker] * len(keys)) if keys else "NULL"
    return conn.exec_driver_sql(f"{keyed.head}{marks}{keyed.tail}", tuple(params))


def _bound(binds: tuple[tuple[str, Processor | None], ...], values: Mapping[str, Any]) -> list[Any]:
    out = []
    for name, convert in binds:
        value = values[name]
        out.append(value if convert is None or value is None else convert(value))
    return out


# Non-SQLite keyed statements, built once per dialect and shape (SQLAlchemy caches their
# compiled forms by the statement's cache key, memoised on the object).
_STATEMENTS: weakref.WeakKeyDictionary[Dialect, dict[Hashable, Executable]] = (
    weakref.WeakKeyDictionary()
)


def _compile_keyed(statement: Executable, dialect: Dialect) -> _Keyed:
    compiled: Any = statement.compile(dialect=dialect)  # type: ignore[attr-defined]
    if not compiled.positional:
        raise StorageError(f"keyed statement needs a positional paramstyle: {compiled.string}")
    token = f"__[POSTCOMPILE_{KEYS}]"
    sql: str = compiled.string
    if sql.count(token) != 1 or sql.count("__[POSTCOMPILE_") != 1:
        raise StorageError(f"keyed statement needs one list, of {KEYS}: {sql}")
    head, tail = sql.split(token)
    order = list(compiled.positiontup)
    at = order.index(KEYS)

    def processed(names: list[str]) -> tuple[tuple[str, Processor | None], ...]:
        return tuple((name, _processor(compiled.binds[name].type, dialect)) for name in names)

    marker = {"qmark": "?", "format": "%s", "numeric": "?"}.get(dialect.paramstyle, "?")
    return _Keyed(head, tail, processed(order[:at]), processed(order[at + 1 :]), marker)
