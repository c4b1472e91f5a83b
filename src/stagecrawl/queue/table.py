"""What a registry declares about its queue table: which column plays which part."""

from __future__ import annotations

from collections.abc import Collection, Hashable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from stagecrawl.queue.ladder import LadderCodes


def utcnow() -> datetime:
    """Now in UTC, naive and to the second: how every queue table stores times."""
    return datetime.now(UTC).replace(tzinfo=None, microsecond=0)


@dataclass(frozen=True)
class QueueTable:
    """A queue table's name and the names of its columns (names only, no SQLAlchemy: the
    status reads run without it, queue/reads.py).

    - `id`: the row's key; `group`: rows claimed together (all the claimable rows of a group
      go to one worker, e.g. a crate's versions: one index and one API request whoever takes
      it); for a one-row unit, the id column again;
    - `state`: the ladder (`codes`); `reason`: why the last attempt failed; `updated`: when the
      row last changed;
    - `holder`, `until`: the lease (worker id, UTC expiry), or None for a queue without leases
      (its claims are reads; two processes may both take a row, so its work must be idempotent);
    - `requeue`: a boolean that makes a finished row claimable again and clears itself when
      it is done (LIST's RESYNC), or None;
    - `name`, `version`: extra columns handed out with each claimed row, or None;
    - `not_before`: when a row that could not be attempted (a host's pause, our budget) may
      go again: claims skip it until then, and its state stays where it was (no rung), or
      None;
    - `claimed_at`: when the lease was taken (for `status`: who holds what since when), or
      None."""

    table: str
    id: str
    group: str
    state: str
    reason: str
    updated: str
    codes: LadderCodes
    holder: str | None = None
    until: str | None = None
    requeue: str | None = None
    name: str | None = None
    version: str | None = None
    not_before: str | None = None
    claimed_at: str | None = None

    @property
    def leased(self) -> bool:
        return self.holder is not None and self.until is not None


class Claimed(NamedTuple):
    """One claimed row: its key, group, state on the ladder, whether a requeue was asked, and
    the declared name/version columns (None when the table declares none). A named tuple: a
    crawl makes one per event, and a frozen dataclass's `__init__` (one `object.__setattr__`
    a field) cost several times the tuple's."""

    id: Hashable
    group: str
    state: int
    requeue: bool
    name: str
    version: str


@dataclass
class Outcome:
    """What became of one claimed row: its new state, the reason (a failure), and other
    columns of the row to set with it (e.g. LIST's YANKED).

    `not_before`: the row was not attempted (the host asked for a pause, our budget is
    spent): it keeps its state (see `waits`), `error` says why and names the source, and it
    is not claimed before that time."""

    event: Claimed
    state: int
    error: str | None = None
    values: tuple[tuple[str, Any], ...] = ()
    not_before: datetime | None = None

    @classmethod
    def waits(cls, event: Claimed, reason: str, until: datetime) -> Outcome:
        """Not attempted: the row stays on its rung, with the reason and when it may go."""
        return cls(event, event.state, reason, (), until)


@dataclass
class Lease:
    """Rows registered already leased to a worker of this process (`EventList.register_on`):
    the events inserted new (not those already in the table) outside `exclude` get `worker`'s
    lease of `seconds` in the registering transaction, and are listed in `rows` as claimed,
    so that worker need not claim them back from the table."""

    worker: str
    seconds: float
    exclude: Collection[str] = ()
    rows: list[Claimed] = field(default_factory=list)
