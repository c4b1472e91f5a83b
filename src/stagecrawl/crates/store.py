"""The crates pipeline's writes: a batch of claimed crates in one transaction (group commit).

Each crate stays all-or-nothing and lease-checked: a crate whose lease this worker lost is left
out of the batch (its rows are not written, the worker that holds it now writes them), and the
others are written together. A kill loses at most the open batch, whose leases run out and
whose crates are redone.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from stagecrawl.crates.queue import Outcome, event_list
from stagecrawl.crates.rows import VERSION_COLUMNS
from stagecrawl.crates.tables import products, versions
from stagecrawl.storage.bulk import upsert
from stagecrawl.storage.db import Database


@dataclass
class CrateWrite:
    """What one claimed crate produced."""

    event_ids: Sequence[Hashable]
    outcomes: list[Outcome]
    versions: list[tuple[Any, ...]] = field(default_factory=list)  # rows.VERSION_COLUMNS
    product: dict[str, Any] | None = None
    index_state: dict[str, Any] | None = None


def write_crates(db: Database, worker: str, batch: Sequence[CrateWrite]) -> list[bool]:
    """One transaction for the batch; False for each crate whose lease is no longer ours.

    Several workers share one queue: on MySQL/MariaDB and PostgreSQL two batches can deadlock
    on LIST or VERSION rows; the database rolls one back whole, and it is done again (a few
    times, see `Database.transaction`), all or nothing."""

    def write(conn: Connection, kept: list[int]) -> None:
        write_rows(conn, db, [batch[n] for n in kept])

    return event_list(db).queue.complete(
        worker, [crate.outcomes for crate in batch], write, [crate.event_ids for crate in batch]
    )


def write_rows(conn: Connection, db: Database, writes: Sequence[CrateWrite]) -> None:
    """The VERSION, PRODUCT and index-state rows of crates whose leases are held."""
    version_rows = [row for crate in writes for row in crate.versions]
    product_rows = [crate.product for crate in writes if crate.product is not None]
    states = [crate.index_state for crate in writes if crate.index_state is not None]
    if version_rows:
        versions(db).bulk(VERSION_COLUMNS).execute(conn, version_rows)
    if product_rows:
        products(db).upsert(conn, product_rows)
    if states:
        upsert(conn, db.index_state, states)


def existing_versions(db: Database, product_keys: Sequence[str]) -> dict[str, set[str]]:
    """The versions already in VERSION for each crate (a read: no write lock)."""
    return versions(db).existing(product_keys)
