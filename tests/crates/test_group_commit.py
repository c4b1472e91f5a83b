"""The group commit is all or nothing: a batch that fails half-way leaves no crate of it
written and every lease still held, so the same batch can be done again."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import DBAPIError

from stagecrawl.crates.rows import VERSION_COLUMNS
from stagecrawl.queue.events import COLLECTED
from stagecrawl.storage.db import Database
from tests.crates.kernel import (
    CrateWrite,
    NewEvent,
    claim,
    existing_versions,
    outcome,
    register,
    rust,
    write_crates,
)


def _version(name: str, version: str, description: str | None = "ok") -> dict[str, Any]:
    """A VERSION row's values by column (`_row` makes it the tuple a CrateWrite holds)."""
    now = datetime(2024, 1, 1, 12, 0, 0)
    return {
        "LANGUAGE": "rust",
        "REPOSITORY": "Cargo",
        "PRODUCT_KEY": name,
        "VERSION": version,
        "NAME": name,
        "DESCRIPTION": description,
        "DEPENDENCIES": "[]",
        "FEATURES": "{}",
        "YANKED": False,
        "PROCESSED": COLLECTED,
        "LAST_UPDATED": now,
    }


def _row(values: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(values.get(column) for column in VERSION_COLUMNS)


def test_a_batch_failing_half_way_writes_nothing_and_is_done_again(db_url: str) -> None:
    db = Database(db_url)
    register(db, [NewEvent(n, v, "seed") for n in ("alpha", "beta") for v in ("1.0.0", "2.0.0")])
    claimed = claim(db, "w", 10, lease_seconds=600)
    by_crate: dict[str, list[Any]] = {}
    for event in claimed:
        by_crate.setdefault(event.group, []).append(event)

    def batch(broken: bool) -> list[CrateWrite]:
        writes = []
        for name, events in sorted(by_crate.items()):
            rows = [_version(name, e.version) for e in events]
            if broken and name == "beta":
                rows[-1]["NAME"] = None  # NOT NULL: the second crate's upsert fails
            writes.append(
                CrateWrite(
                    [e.id for e in events],
                    [outcome(e, COLLECTED, yanked=False) for e in events],
                    [_row(row) for row in rows],
                )
            )
        return writes

    with pytest.raises(DBAPIError):
        write_crates(db, "w", batch(broken=True))
    # Nothing of the batch, not even the first crate, and the leases are still ours.
    assert existing_versions(db, ["alpha", "beta"]) == {"alpha": set(), "beta": set()}
    with db.reading() as conn:
        states = conn.execute(select(rust(db).list.c.PROCESSED, rust(db).list.c.CLAIMED_BY)).all()
    assert sorted(states) == [(0, "w")] * 4

    assert write_crates(db, "w", batch(broken=False)) == [True, True]
    assert existing_versions(db, ["alpha", "beta"]) == {
        "alpha": {"1.0.0", "2.0.0"},
        "beta": {"1.0.0", "2.0.0"},
    }
    with db.reading() as conn:
        done = conn.execute(
            select(func.count()).where(rust(db).list.c.PROCESSED == COLLECTED)
        ).scalar_one()
        held = conn.execute(
            select(func.count()).where(rust(db).list.c.CLAIMED_BY.is_not(None))
        ).scalar_one()
    assert (done, held) == (4, 0)
    db.dispose()
