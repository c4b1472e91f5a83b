"""What a unit's rows hold in memory, as the work loop bounds what waits for a commit: about
their text, read from three rows of each set (dict rows and a bulk upsert's tuples alike)."""

from __future__ import annotations

from sqlalchemy import Column, MetaData, String, Table, Text

from stagecrawl.storage.bounds import RowSet, weight

TABLE = Table("T", MetaData(), Column("NAME", String(64)), Column("DEPS", Text))


def exact(rows: list[dict[str, object]]) -> int:
    return sum(len(v) if isinstance(v, str) else 8 for row in rows for v in row.values())


def test_alike_rows_weigh_what_they_hold() -> None:
    rows = [{"NAME": f"demo-{i:03d}", "DEPS": "x" * 2000, "N": i} for i in range(30)]
    assert weight([RowSet(TABLE, rows)]) == exact(rows)
    as_tuples = [tuple(row.values()) for row in rows]
    assert weight([RowSet(TABLE, as_tuples, ["NAME", "DEPS", "N"])]) == exact(rows)


def test_rows_that_grow_are_weighed_near_their_mean() -> None:
    """A module's go.mods grow from version to version: first, middle and last stand in."""
    rows = [{"NAME": "m", "DEPS": "x" * (100 * i)} for i in range(1, 31)]
    assert 0.9 < weight([RowSet(TABLE, rows)]) / exact(rows) < 1.1


def test_sets_add_up_and_an_empty_one_weighs_nothing() -> None:
    one = [{"NAME": "a", "DEPS": "b" * 10}]
    assert weight([RowSet(TABLE, one), RowSet(TABLE, []), RowSet(TABLE, one * 3)]) == 4 * exact(one)
