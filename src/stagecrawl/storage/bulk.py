"""Bulk upserts sent straight to the driver's executemany.

`storage.db.upsert` hands SQLAlchemy a list of dicts: right for a few hundred rows, but for a
bulk load (a million versions from a dump, every OSV advisory) SQLAlchemy's per-row parameter
handling costs more than the database's work. `BulkUpsert` compiles the same upsert once per
connection's dialect and sends rows as tuples through `Connection.exec_driver_sql`, so the
transaction, its events (SQLite's BEGIN IMMEDIATE) and error wrapping stay SQLAlchemy's, while
the rows go to the DBAPI's executemany (sqlite3 loops in C; PyMySQL folds an INSERT … VALUES
into multi-row statements; psycopg pipelines). The column types' bind processors are still
applied (SQLite's DateTime text, for one), so the stored bytes are those `upsert` writes.

Knows no table: callers pass the Table and the column order of their tuples.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Connection, Dialect

Processor = Callable[[Any], Any]
_NOTHING: Any = object()


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
        self.columns = list(columns)
        self.update = list(update) if update is not None else [c for c in columns if c not in keys]
        self._compiled: dict[str, _Compiled] = {}

    def _compile(self, dialect: Dialect) -> _Compiled:
        cached = self._compiled.get(dialect.name)
        if cached is not None:
            return cached
        table, keys = self.table, [c.name for c in self.table.primary_key.columns]
        statement: Any
        if dialect.name in ("mysql", "mariadb"):
            my = mysql.insert(table)
            statement = my.on_duplicate_key_update({c: my.inserted[c] for c in self.update})
        elif dialect.name == "postgresql":
            pg = postgresql.insert(table)
            statement = pg.on_conflict_do_update(
                index_elements=keys, set_={c: pg.excluded[c] for c in self.update}
            )
        else:
            lite = sqlite.insert(table)
            statement = lite.on_conflict_do_update(
                index_elements=keys, set_={c: lite.excluded[c] for c in self.update}
            )
        compiled = statement.compile(dialect=dialect, column_keys=self.columns)
        # Columns the caller leaves out that have a scalar default are compiled in as
        # parameters too: their values are appended to every row, processed once here.
        defaults: dict[str, Any] = {}
        for name, bind in compiled.binds.items():
            if name in self.columns:
                continue
            default = table.c[name].default if name in table.c else None
            if default is None or not getattr(default, "is_scalar", False):
                raise ValueError(f"{table.name}.{name}: give a value (no scalar default)")
            value = getattr(default, "arg", None)
            processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
            defaults[name] = value if processor is None or value is None else processor(value)
        names = [*self.columns, *defaults]
        order: list[int] | None = None
        if dialect.positional:
            # The parameters' order in the SQL text, as positions in the extended tuples.
            position = {name: n for n, name in enumerate(names)}
            order = [position[name] for name in compiled.positiontup or []]
        processors: list[tuple[int, Processor]] = []
        for n, name in enumerate(self.columns):
            column_type = table.c[name].type
            processor = column_type.dialect_impl(dialect).bind_processor(dialect)
            if processor is not None:
                processors.append((n, processor))
        result = _Compiled(str(compiled), names, tuple(defaults.values()), order, processors)
        self._compiled[dialect.name] = result
        return result

    def execute(self, conn: Connection, rows: Sequence[Sequence[Any]]) -> None:
        """Send `rows` in one executemany, inside the caller's transaction."""
        if not rows:
            return
        plan = self._compile(conn.dialect)
        width = len(self.columns)
        if any(len(row) != width for row in rows):
            raise ValueError(f"{self.table.name}: rows must have {width} values")
        table: list[Sequence[Any]]
        if plan.processors:
            table = [[*row, *plan.defaults] for row in rows]  # copies: the caller's rows stay
            for n, processor in plan.processors:
                # Column by column; a value that is the previous row's object (a load's one
                # timestamp) is not processed again.
                last_in: Any = _NOTHING
                last_out: Any = None
                for values in table:
                    value = values[n]
                    if value is None:
                        continue
                    if value is not last_in:
                        last_in, last_out = value, processor(value)
                    values[n] = last_out  # type: ignore[index]
        elif plan.defaults:
            table = [(*row, *plan.defaults) for row in rows]
        else:
            table = list(rows)
        params: list[Any]
        if plan.order is None:
            names = plan.names
            params = [dict(zip(names, row, strict=True)) for row in table]
        elif len(plan.order) == 1:
            params = [(row[plan.order[0]],) for row in table]
        else:
            params = list(map(itemgetter(*plan.order), table))
        conn.exec_driver_sql(plan.sql, params)


@dataclass(frozen=True)
class _Compiled:
    sql: str
    names: list[str]  # the caller's columns, then the defaulted ones
    defaults: tuple[Any, ...]  # values of the defaulted columns, already processed
    order: list[int] | None  # positional: the SQL's parameters as positions in `names`
    processors: list[tuple[int, Processor]]
