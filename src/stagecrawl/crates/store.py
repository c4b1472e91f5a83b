"""The crates pipeline's writes: a batch of claimed crates in one transaction (group commit).

Each crate stays all-or-nothing and lease-checked: a crate whose lease this worker lost is left
out of the batch (its rows are not written, the worker that holds it now writes them), and the
others are written together. A kill loses at most the open batch, whose leases run out and
whose crates are redone.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, literal, select, update

from stagecrawl.crates.queue import GAVE_UP, Outcome, utcnow
from stagecrawl.storage.bulk import upsert
from stagecrawl.storage.db import Database, in_values

LANGUAGE, REPOSITORY = "rust", "Cargo"


@dataclass
class CrateWrite:
    """What one claimed crate produced."""

    event_ids: list[bytes]
    outcomes: list[Outcome]
    versions: list[dict[str, Any]] = field(default_factory=list)
    product: dict[str, Any] | None = None
    index_state: dict[str, Any] | None = None


def write_crates(db: Database, worker: str, batch: Sequence[CrateWrite]) -> list[bool]:
    """One transaction for the batch; False for each crate whose lease is no longer ours.

    Several workers share one queue: on MySQL/MariaDB and PostgreSQL two batches can deadlock
    on LIST or VERSION rows; the database rolls one back whole, and it is done again (a few
    times, see `Database.transaction`), all or nothing."""
    return db.transaction(lambda conn: _write_crates(conn, db, worker, batch))


def _write_crates(
    conn: Connection, db: Database, worker: str, batch: Sequence[CrateWrite]
) -> list[bool]:
    table = db.list
    now = utcnow()
    ids = [i for crate in batch for i in crate.event_ids]
    held_query = select(table.c.ID).where(
        in_values(table.c.ID, ids),
        table.c.CLAIMED_BY == literal(worker),
        table.c.CLAIMED_UNTIL >= literal(now),
    )
    if not db.is_sqlite:
        held_query = held_query.with_for_update()
    held = set(conn.execute(held_query).scalars().all())
    kept = [all(i in held for i in crate.event_ids) for crate in batch]
    writes = [crate for crate, ok in zip(batch, kept, strict=True) if ok]
    versions = [row for crate in writes for row in crate.versions]
    products = [crate.product for crate in writes if crate.product is not None]
    states = [crate.index_state for crate in writes if crate.index_state is not None]
    if versions:
        upsert(conn, db.version, versions)
    if products:
        upsert(conn, db.product, products)
    if states:
        upsert(conn, db.index_state, states)
    outcomes = [o for crate in writes for o in crate.outcomes]
    # Outcomes with the same values (nearly all: collected, yanked or not) are one UPDATE
    # … WHERE ID IN (…): pymysql's executemany sends an UPDATE row by row, one round trip
    # each, and on every backend a few statements beat thousands of rows' worth.
    same: dict[tuple[int, bool | None, str | None, bool], list[bytes]] = defaultdict(list)
    for o in outcomes:
        # a failed resync stays asked for; a done one clears itself
        resync = o.event.resync and (o.processed >= 30 and o.processed != GAVE_UP)
        same[(o.processed, o.yanked, o.error, resync)].append(o.event.id)
    for (processed, yanked, error, resync), same_ids in same.items():
        values: dict[str, Any] = {
            "PROCESSED": processed,
            "LAST_ERROR": error,
            "RESYNC": resync,
            "CLAIMED_BY": None,
            "CLAIMED_UNTIL": None,
            "LAST_UPDATED": now,
        }
        if yanked is not None:
            values["YANKED"] = yanked
        for start in range(0, len(same_ids), 1000):
            conn.execute(
                update(table)
                .where(in_values(table.c.ID, same_ids[start : start + 1000]))
                .values(**values)
            )
    return kept


def existing_versions(db: Database, product_keys: Sequence[str]) -> dict[str, set[str]]:
    """The versions already in VERSION for each crate (a read: no write lock)."""
    table = db.version
    found: dict[str, set[str]] = {key: set() for key in product_keys}
    if not product_keys:
        return found
    with db.reading() as conn:
        rows = conn.execute(
            select(table.c.PRODUCT_KEY, table.c.VERSION).where(
                table.c.LANGUAGE == literal(LANGUAGE),
                table.c.REPOSITORY == literal(REPOSITORY),
                table.c.PRODUCT_KEY.in_(list(product_keys)),
            )
        )
        for key, version in rows:
            found.setdefault(str(key).lower(), set()).add(version)
    return found
