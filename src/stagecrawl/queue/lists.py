"""The LIST and seed queue tables' declarations (standard library only, for `status`, which
reads them without SQLAlchemy): the ladder codes, and which column plays which part.
Registering events into a LIST is queue/events.py's.

PROCESSED ladder (docs/schema.md): 0 pending · 1 collected · 2 skipped, already in VERSION ·
4 not found in the registry · 30–34 transient failure number 1–5 · 39 given up. RESYNC makes a
finished event claimable again and clears itself when the event is done.
"""

from __future__ import annotations

from stagecrawl.queue.ladder import LadderCodes
from stagecrawl.queue.table import QueueTable

PENDING, COLLECTED, SKIPPED, NOT_FOUND = 0, 1, 2, 4
LIST_CODES = LadderCodes(
    finished={
        COLLECTED: "collected",
        SKIPPED: "skipped (already in VERSION)",
        NOT_FOUND: "not found in the index",
    }
)
TRANSIENT_FIRST, TRANSIENT_LAST, GAVE_UP = (
    LIST_CODES.first_failure,
    LIST_CODES.last_failure,
    LIST_CODES.gave_up,
)
CLAIMABLE = LIST_CODES.claimable
STATE_NAMES = LIST_CODES.names


def list_spec(table: str, group: str = "CRATE_NAME") -> QueueTable:
    """A LIST table's columns: events grouped by package (its key column, named for the
    registry: CRATE_NAME, PROJECT_NAME …), leased."""
    return QueueTable(
        table,
        id="ID",
        group=group,
        state="PROCESSED",
        reason="LAST_ERROR",
        updated="LAST_UPDATED",
        codes=LIST_CODES,
        holder="CLAIMED_BY",
        until="CLAIMED_UNTIL",
        requeue="RESYNC",
        name="NAME",
        version="VERSION",
        not_before="NOT_BEFORE",
        claimed_at="CLAIMED_AT",
    )


def seed_spec(table: str, group: str = "CRATE_NAME") -> QueueTable:
    """A seed table's columns: one name per row, the LIST's codes, no leases (seeding is
    idempotent: two processes asking for one name register the same events). RESYNC asks
    the name's events to be registered for collecting again; it clears itself when seeded."""
    return QueueTable(
        table,
        id=group,
        group=group,
        state="STATE",
        reason="LAST_ERROR",
        updated="LAST_UPDATED",
        codes=LIST_CODES,
        requeue="RESYNC",
        name="NAME",
        not_before="NOT_BEFORE",
    )
