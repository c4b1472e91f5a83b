"""The crates pipeline's writes: a batch of claimed crates in one transaction (group commit).

Each crate stays all-or-nothing and lease-checked: a crate whose lease this worker lost is left
out of the batch (its rows are not written, the worker that holds it now writes them), and the
others are written together. A kill loses at most the open batch, whose leases run out and
whose crates are redone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, func, literal, null, select, update

from stagecrawl.crates.queue import GAVE_UP, Outcome, utcnow
from stagecrawl.storage.db import Database, executemany, upsert

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
    """One transaction for the batch; False for each crate whose lease is no longer ours."""
    table = db.list
    now = utcnow()
    ids = [i for crate in batch for i in crate.event_ids]
    with db.engine.begin() as conn:
        held_query = select(table.c.ID).where(
            table.c.ID.in_(ids),
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
        if outcomes:
            executemany(
                conn,
                ("write_crates-outcomes",),
                lambda: (
                    update(table)
                    .where(table.c.ID == bindparam("b_id"))
                    .values(
                        PROCESSED=bindparam("b_processed"),
                        YANKED=func.coalesce(bindparam("b_yanked"), table.c.YANKED),
                        LAST_ERROR=bindparam("b_error"),
                        RESYNC=bindparam("b_resync"),
                        CLAIMED_BY=null(),
                        CLAIMED_UNTIL=null(),
                        LAST_UPDATED=bindparam("b_now"),
                    )
                ),
                [
                    {
                        "b_id": o.event.id,
                        "b_processed": o.processed,
                        "b_yanked": o.yanked,
                        "b_error": o.error,
                        # a failed resync stays asked for; a done one clears itself
                        "b_resync": o.event.resync
                        and (o.processed >= 30 and o.processed != GAVE_UP),
                        "b_now": now,
                    }
                    for o in outcomes
                ],
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
