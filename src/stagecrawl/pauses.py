"""Work that waits for a pause: a host asked for one longer than a run may wait (its
Retry-After, our backoff after 429s) or our budget is spent. Such work was not attempted, so it
is no failure: it climbs no retry ladder, and the command ends saying what waits, until when
and why (cli/common.py's waiting line). Shared by the queues and the crawl engine; standard
library only, so the engine's commands load no SQL toolkit for it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any


def utc_moment(when: datetime, now: datetime | None = None) -> str:
    """A moment as a pause (or a deadline) is said: `07:28:01 UTC` when it is today (UTC),
    `2099-01-01 07:28:01 UTC` on any other day, so a long pause is never read as today's.
    `when` and `now` are UTC, naive or aware."""
    if when.tzinfo is not None:
        when = when.astimezone(UTC).replace(tzinfo=None)
    now = now or datetime.now(UTC)
    if now.tzinfo is not None:
        now = now.astimezone(UTC).replace(tzinfo=None)
    if when.date() == now.date():
        return f"{when:%H:%M:%S} UTC"
    return f"{when:%Y-%m-%d %H:%M:%S} UTC"


@dataclass(frozen=True)
class Waiting:
    """Work not attempted that waits for a time: how many, the latest time, and why."""

    rows: int
    until: datetime
    reason: str

    @staticmethod
    def merge(found: Sequence[Waiting | None]) -> Waiting | None:
        """Several waits as one: the rows added up, the latest time and its reason."""
        present = [w for w in found if w is not None]
        if not present:
            return None
        latest = max(present, key=lambda w: w.until)
        return Waiting(sum(w.rows for w in present), latest.until, latest.reason)

    def as_json(self) -> dict[str, Any]:
        return {
            "items": self.rows,
            "until": f"{self.until:%Y-%m-%dT%H:%M:%SZ}",
            "reason": self.reason,
        }


@dataclass
class NotAsked:
    """What a run held back without asking, because of a pause that outlasts the run: each
    item with why, and the latest time the pause lasts. Not stored: a refresh keeps no queue
    row, so the next run asks again. A run that meets one pause asks nothing more until it
    ends (every item after it is held)."""

    reasons: dict[str, str] = field(default_factory=dict)
    until: datetime | None = None
    reason: str = ""

    def hold(self, item: str, until: datetime, reason: str) -> None:
        """`item` was refused with a pause: it waits, and so does everything after it."""
        if self.until is None or until > self.until:
            self.until, self.reason = until, reason
        self.reasons[item] = reason

    def holds(self, item: str) -> bool:
        """Whether a pause is on: then `item` is not asked, and waits with the pause's reason."""
        if self.until is None:
            return False
        self.reasons[item] = self.reason
        return True

    @property
    def waiting(self) -> Waiting | None:
        """As the queues say what waits: how many, until when, why."""
        if not self.reasons or self.until is None:
            return None
        return Waiting(len(self.reasons), self.until, self.reason)
