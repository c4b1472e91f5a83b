"""Values against their columns' bounds, before they enter a batch.

The bounds are declared once (storage/names.py: the DDL takes its column lengths from there);
this module reads them back from the declared tables, so the check and the DDL cannot
disagree. A value one over its column fails the one unit it belongs to, with its reason, on
every backend alike — where PostgreSQL and strict MySQL would abort the whole batch (and every
rerun) and SQLite would silently store it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sqlalchemy import String, Table

SHOWN = 60  # of a value too long, its first characters in the reason


@lru_cache(maxsize=64)
def _bounded(table: Table) -> tuple[tuple[str, int], ...]:
    """The table's bounded text columns, with their lengths (read once per table)."""
    return tuple(
        (column.name, column.type.length)
        for column in table.columns
        if isinstance(column.type, String) and column.type.length
    )


def too_long(what: str, value: str, bound: int) -> str:
    """The reason a value does not fit, in words (the value's start, its length, the bound)."""
    shown = value if len(value) <= SHOWN else value[:SHOWN] + "…"
    return f"{what} {shown!r} is {len(value)} characters, longer than its {bound}"


@dataclass(frozen=True)
class RowSet:
    """Rows bound for one table: dicts, or tuples in `columns` order (a bulk upsert's)."""

    table: Table
    rows: Sequence[Mapping[str, Any]] | Sequence[Sequence[Any]]
    columns: Sequence[str] | None = None


def weight(sets: Iterable[RowSet]) -> int:
    """About what the rows' values hold in memory, in bytes: their text's length and a word a
    value, from the first, middle and last row of each set times its rows (a unit's rows are
    alike, and a bound on memory needs no more; the crates crawl writes thousands of rows a
    second and need not read every value twice)."""
    total = 0
    for row_set in sets:
        rows = row_set.rows
        if not rows:
            continue
        samples = {0, len(rows) // 2, len(rows) - 1}
        sampled = 0
        for index in samples:
            row = rows[index]
            values = row.values() if isinstance(row, Mapping) else row
            sampled += sum(len(v) if isinstance(v, str | bytes) else 8 for v in values)
        total += sampled * len(rows) // len(samples)
    return total


def row_problem(sets: Iterable[RowSet]) -> str | None:
    """The first value of `sets` longer than its column, in words; None when all fit."""
    for row_set in sets:
        bounded = _bounded(row_set.table)
        if row_set.columns is not None:
            at = {name: i for i, name in enumerate(row_set.columns)}
            checks = [(name, at[name], bound) for name, bound in bounded if name in at]
            for row in row_set.rows:
                assert not isinstance(row, Mapping)
                for name, position, bound in checks:
                    value = row[position]
                    if isinstance(value, str) and len(value) > bound:
                        return too_long(f"{row_set.table.name}.{name}", value, bound)
            continue
        for row in row_set.rows:
            assert isinstance(row, Mapping)
            for name, bound in bounded:
                value = row.get(name)
                if isinstance(value, str) and len(value) > bound:
                    return too_long(f"{row_set.table.name}.{name}", value, bound)
    return None
