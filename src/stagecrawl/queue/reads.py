"""The queue tables' read-only status queries, one portable SQL text each (standard library
only): how many rows on each rung, the ladder, leases and their holders, what waits for a
pause, the worker table's live rows. Their owners inherit them (`SqlQueue`, `EventList`,
`Workers`), and `stagecrawl status` asks them on any backend through `storage.reads.Reads`,
on SQLite without loading SQLAlchemy (issue 20's start-up budget)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from stagecrawl.pauses import Waiting, utc_moment
from stagecrawl.queue.ladder import ThisRun
from stagecrawl.queue.lists import list_spec, seed_spec
from stagecrawl.queue.table import QueueTable, utcnow
from stagecrawl.storage.names import WORKER, RegistryNames
from stagecrawl.storage.reads import Reads, TableReads, parse_time, placeholders

# A heartbeat older than this is a dead worker's when its row says nothing else (a row
# written by an older stagecrawl): its leases may be taken back.
LIVE_WINDOW = 60.0
# Heartbeats are stored to the second: a heartbeat may look this much older than it is.
STORED_RESOLUTION = 1.0


def snapshot(groups: Collection[str] | None) -> list[str]:
    """The groups now, sorted: a `ThisRun` may grow in another thread meanwhile."""
    if not groups:
        return []
    if isinstance(groups, ThisRun):
        return groups.snapshot()
    return sorted(groups)


class QueueReads:
    """The status reads of one queue table (`SqlQueue` adds claims and writes)."""

    def __init__(self, spec: QueueTable) -> None:
        self.spec = spec
        self.codes = spec.codes

    def _wanted_sql(self, r: Reads, params: dict[str, Any]) -> str:
        """Rows on the claimable rungs, or finished ones asked again (requeue)."""
        s = self.spec
        rungs = ", ".join(str(int(code)) for code in self.codes.claimable)
        if s.requeue is None:
            return f"{r.q(s.state)} IN ({rungs})"
        params["requeue"] = True  # a BOOLEAN: 0/1 on SQLite and MySQL
        return f"({r.q(s.state)} IN ({rungs}) OR {r.q(s.requeue)} = :requeue)"

    def by_state(self, r: Reads) -> list[tuple[int, int]]:
        """(state, rows) for every state present."""
        state = r.q(self.spec.state)
        rows = r.rows(f"SELECT {state}, COUNT(*) FROM {r.q(self.spec.table)} GROUP BY {state}")
        return sorted((int(k), int(n)) for k, n in rows)

    def on_ladder(self, r: Reads, limit: int) -> list[tuple[str, int, str | None]]:
        """(name, state, reason) of rows that failed or were given up, by name."""
        s = self.spec
        name, state, reason = r.q(s.name or s.group), r.q(s.state), r.q(s.reason)
        rows = r.rows(
            f"SELECT {name}, {state}, {reason} FROM {r.q(s.table)} WHERE {state} >= :failed"
            f" GROUP BY {name}, {state}, {reason} ORDER BY {name} LIMIT {int(limit)}",
            {"failed": self.codes.first_failure},
        )
        return [(str(n), int(p), e) for n, p, e in rows]

    def count(self, r: Reads, state: int | None = None, requeue: bool = False) -> int:
        """Rows in `state`, or asking a requeue."""
        s = self.spec
        value: bool | int | None
        if requeue:
            if not s.requeue:
                return 0
            column, value = s.requeue, True
        else:
            column, value = s.state, state
        sql = f"SELECT COUNT(*) FROM {r.q(s.table)} WHERE {r.q(column)} = :value"
        return int(r.scalar(sql, {"value": value}))

    def leases(self, r: Reads) -> dict[str, int]:
        """Live leases per holder."""
        s = self.spec
        if not (s.holder and s.until):
            return {}
        holder = r.q(s.holder)
        rows = r.rows(
            f"SELECT {holder}, COUNT(*) FROM {r.q(s.table)} WHERE {r.q(s.until)} >= :now"
            f" GROUP BY {holder}",
            {"now": r.time(utcnow())},
        )
        return {str(k): int(v) for k, v in rows}

    def holders(
        self, r: Reads, exclude: Collection[str] = ()
    ) -> list[tuple[str, int, datetime | None]]:
        """(holder, rows, oldest claim) of the live leases on unfinished rows."""
        s = self.spec
        if not (s.holder and s.until):
            return []
        params: dict[str, Any] = {"now": r.time(utcnow())}
        holder = r.q(s.holder)
        since = f"MIN({r.q(s.claimed_at)})" if s.claimed_at else "NULL"
        condition = (
            f"{self._wanted_sql(r, params)} AND {holder} IS NOT NULL AND {r.q(s.until)} >= :now"
        )
        if exclude:
            kept_out = placeholders("exclude", snapshot(exclude), params)
            condition += f" AND {r.q(s.group)} NOT IN {kept_out}"
        rows = r.rows(
            f"SELECT {holder}, COUNT(*), {since} FROM {r.q(s.table)} WHERE {condition}"
            f" GROUP BY {holder}",
            params,
        )
        return [(str(h), int(n), parse_time(first)) for h, n, first in rows]

    def waiting(self, r: Reads) -> Waiting | None:
        """Rows that were not attempted and wait for a time still to come (a host's pause,
        our budget): how many, until when, and the reason stored with the latest."""
        s = self.spec
        if not s.not_before:
            return None
        params: dict[str, Any] = {"now": r.time(utcnow())}
        not_before, table = r.q(s.not_before), r.q(s.table)
        condition = f"{self._wanted_sql(r, params)} AND {not_before} > :now"
        rows, latest = r.one(
            f"SELECT COUNT(*), MAX({not_before}) FROM {table} WHERE {condition}", params
        )
        until = parse_time(latest)
        if not rows or until is None:
            return None
        reason = r.scalar(
            f"SELECT {r.q(s.reason)} FROM {table} WHERE {condition} AND {not_before} = :latest"
            " LIMIT 1",
            {**params, "latest": latest},  # as stored: compared exactly
        )
        return Waiting(int(rows), until, str(reason or "waiting"))


class EventListReads:
    """The status reads of a LIST table beyond its queue's (`EventList` adds registering)."""

    def __init__(self, queue: QueueReads) -> None:
        self.queue = queue

    def sources(self, r: Reads) -> dict[str, int]:
        """Events per SOURCE (seed, lock, lock,seed)."""
        source = r.q("SOURCE")
        rows = r.rows(
            f"SELECT {source}, COUNT(*) FROM {r.q(self.queue.spec.table)} GROUP BY {source}"
        )
        return {str(s): int(n) for s, n in sorted(rows)}


@dataclass(frozen=True)
class RegistryReads:
    """The status reads of one registry's tables (`registry_reads`)."""

    events: EventListReads
    seeds: QueueReads
    versions: TableReads
    products: TableReads


def registry_reads(names: RegistryNames) -> RegistryReads:
    """A registry's LIST, seed queue, VERSION and PRODUCT, for their status reads."""
    return RegistryReads(
        EventListReads(QueueReads(list_spec(names.list, names.group))),
        QueueReads(seed_spec(names.seed, names.group)),
        TableReads(names.version),
        TableReads(names.product),
    )


@dataclass(frozen=True)
class Holder:
    """A worker that holds leases on a queue: how many rows, since when (the oldest claim),
    its last heartbeat, and when it counts as dead (None: no worker row, dead already)."""

    worker: str
    rows: int
    since: datetime | None
    heartbeat: datetime | None
    dead_at: datetime | None

    def dead(self, now: datetime) -> bool:
        return self.dead_at is None or now > self.dead_at

    def describe(self, now: datetime) -> str:
        """`12 events leased by worker X (heartbeat 40 s ago); reclaiming at 14:05:07 UTC`."""
        if self.heartbeat is None:
            beat = "no worker row"
        else:
            beat = f"heartbeat {max(0, (now - self.heartbeat).total_seconds()):.0f} s ago"
        if self.dead(now):
            when = "reclaimable now"
        else:
            assert self.dead_at is not None
            when = f"reclaiming at {utc_moment(self.dead_at, now)} if it stays silent"
        return f"{self.rows} rows leased by worker {self.worker} ({beat}); {when}"


class LiveWorker(NamedTuple):
    """A worker row whose heartbeat is within its own bound (`WorkerReads.live`)."""

    worker: str
    started: datetime
    heartbeat: datetime
    events_done: int
    requests: int
    shared_limit: bool


class SilentWorker(NamedTuple):
    """A worker row silent past its own bound (`WorkerReads.silent`): a dead worker (killed,
    or its machine lost) whose row the next run clears."""

    worker: str
    started: datetime
    heartbeat: datetime
    dead_at: datetime


def dead_after(heartbeat: datetime, stale_after: Any) -> datetime:
    """When a worker whose last beat is `heartbeat` counts as dead: silent longer than its own
    bound (its STALE_AFTER, else LIVE_WINDOW), give or take the stored resolution."""
    silent = float(stale_after) if stale_after else LIVE_WINDOW
    return heartbeat + timedelta(seconds=silent + STORED_RESOLUTION)


class WorkerReads:
    """The status reads of the worker table (`Workers` adds registering and heartbeats)."""

    def __init__(self, table: str = WORKER) -> None:
        self.name = table

    def _rows(self, r: Reads) -> list[tuple[Any, ...]]:
        """Every row, oldest first: the table is small (one row per running worker), so it
        is read whole and each row judged by its own bound here."""
        names = (
            "WORKER_ID",
            "STARTED",
            "HEARTBEAT",
            "EVENTS_DONE",
            "REQUESTS",
            "SHARED_LIMIT",
            "STALE_AFTER",
        )
        return r.rows(
            f"SELECT {', '.join(map(r.q, names))} FROM {r.q(self.name)}"
            f" ORDER BY {r.q('STARTED')}, {r.q('WORKER_ID')}"
        )

    def live(self, r: Reads, now: datetime | None = None) -> list[LiveWorker]:
        """The rows of workers within their own heartbeat bound (`dead_after`), oldest first."""
        now = now or utcnow()
        return [
            LiveWorker(str(w), _stored(s), _stored(b), int(done), int(requests), bool(shared))
            for w, s, b, done, requests, shared, bound in self._rows(r)
            if now <= dead_after(_stored(b), bound)
        ]

    def silent(self, r: Reads, now: datetime | None = None) -> list[SilentWorker]:
        """The rows of workers silent past their own bound: dead, not cleared yet."""
        now = now or utcnow()
        found = []
        for w, s, b, _done, _requests, _shared, bound in self._rows(r):
            dead_at = dead_after(_stored(b), bound)
            if now > dead_at:
                found.append(SilentWorker(str(w), _stored(s), _stored(b), dead_at))
        return found

    def beats(self, r: Reads) -> dict[str, tuple[datetime, datetime]]:
        """Every worker's last heartbeat and when it counts as dead (`dead_after`)."""
        columns = ", ".join(map(r.q, ("WORKER_ID", "HEARTBEAT", "STALE_AFTER")))
        found: dict[str, tuple[datetime, datetime]] = {}
        for worker, stored, stale_after in r.rows(f"SELECT {columns} FROM {r.q(self.name)}"):
            heartbeat = _stored(stored)
            found[str(worker)] = (heartbeat, dead_after(heartbeat, stale_after))
        return found

    def holders(self, r: Reads, queue: QueueReads, exclude: Collection[str] = ()) -> list[Holder]:
        """Who holds live leases on `queue` (unfinished rows; groups in `exclude` left out),
        since when, and how alive each holder is, oldest claim first."""
        beats = self.beats(r)
        found = []
        for worker, rows, since in queue.holders(r, exclude):
            heartbeat, dead_at = beats.get(worker, (None, None))
            found.append(Holder(worker, rows, since, heartbeat, dead_at))
        return sorted(found, key=lambda h: (h.since or datetime.min, h.worker))


def _stored(value: Any) -> datetime:
    """A NOT NULL time column's value."""
    found = parse_time(value)
    if found is None:
        raise ValueError(f"not a stored time: {value!r}")
    return found
