"""The crates LIST (TB_COMP_LIB_RUST_LIST) and seed queue, declared on the generic queue.

crates.io's part is only its identity rules (names.py): the group key is the crate's identity
key and an event's id the sha256 of `identity@version`. Claims, leases, the ladder and the
registering upsert are the generic queue's (stagecrawl.queue); the codes are re-exported here
for the crates modules.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Sequence

from stagecrawl.crates.names import event_id, identity_key
from stagecrawl.queue import Claimed, Outcome, SqlQueue, utcnow
from stagecrawl.queue.events import (
    CLAIMABLE,
    COLLECTED,
    GAVE_UP,
    LIST_CODES,
    NOT_FOUND,
    PENDING,
    SKIPPED,
    STATE_NAMES,
    TRANSIENT_FIRST,
    TRANSIENT_LAST,
    EventList,
    NewEvent,
    RegisterCounts,
    seed_spec,
)
from stagecrawl.storage.db import Database

__all__ = [
    "CLAIMABLE",
    "COLLECTED",
    "GAVE_UP",
    "NOT_FOUND",
    "PENDING",
    "SKIPPED",
    "STATE_NAMES",
    "TRANSIENT_FIRST",
    "TRANSIENT_LAST",
    "Claimed",
    "NewEvent",
    "Outcome",
    "RegisterCounts",
    "claim",
    "event_list",
    "next_failure_state",
    "outcome",
    "register",
    "release",
    "seed_queue",
    "utcnow",
]


def event_list(db: Database) -> EventList:
    return EventList(db, db.list, identity_key, event_id)


def seed_queue(db: Database) -> SqlQueue:
    return SqlQueue(db, seed_spec(db.seed.name))


def next_failure_state(processed: int) -> int:
    """One rung up the transient ladder: 0 → 30, 30 → 31 … 34 → 39 (given up)."""
    return LIST_CODES.after_failure(processed)


def outcome(
    event: Claimed, processed: int, yanked: bool | None = None, error: str | None = None
) -> Outcome:
    """What became of one event; a known YANKED flag is refreshed with it."""
    values = () if yanked is None else (("YANKED", yanked),)
    return Outcome(event, processed, error, values)


def register(db: Database, events: Iterable[NewEvent], resync: bool = False) -> RegisterCounts:
    return event_list(db).register(events, resync)


def claim(
    db: Database,
    worker: str,
    crates: int,
    lease_seconds: float,
    exclude_crates: Collection[str] | None = None,
    max_events: int | None = None,
    after: str | None = None,
) -> list[Claimed]:
    """Lease the claimable events of up to `crates` whole crates (see `SqlQueue.claim`)."""
    return event_list(db).queue.claim(
        worker, crates, lease_seconds, exclude_crates, max_events, after
    )


def release(db: Database, worker: str, ids: Sequence[Hashable]) -> None:
    event_list(db).queue.release(worker, ids)
