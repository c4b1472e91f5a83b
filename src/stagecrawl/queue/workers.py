"""The worker row and its heartbeat (TB_STAGECRAWL_WORKER): who works on the queues, since
when, how far, and whose leases are stale."""

from __future__ import annotations

import math
import os
import socket
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Connection, delete, literal, select, update
from sqlalchemy.sql.elements import ColumnElement

from stagecrawl.queue.table import utcnow
from stagecrawl.storage.db import Database

if TYPE_CHECKING:
    from stagecrawl.queue.sql import SqlQueue

# A heartbeat older than this is a dead worker's when its row says nothing else (a row
# written by an older stagecrawl): its leases may be taken back.
LIVE_WINDOW = 60.0
# A worker is dead once its heartbeat is this many of its heartbeat intervals old (one
# missed beat is not death: a loaded machine or a slow commit may delay one).
STALE_BEATS = 3
# Heartbeats are stored to the second: a heartbeat may look this much older than it is.
STORED_RESOLUTION = 1.0
# Rows of workers gone longer than this are cleared when a worker starts.
FORGET_AFTER = timedelta(hours=1)


def stale_after(heartbeat_interval: float) -> int:
    """Seconds of silence after which a worker beating every `heartbeat_interval` is dead."""
    return max(1, math.ceil(STALE_BEATS * heartbeat_interval))


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
            when = f"reclaiming at {self.dead_at:%H:%M:%S} UTC if it stays silent"
        return f"{self.rows} rows leased by worker {self.worker} ({beat}); {when}"


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class WorkerProgress:
    """What a heartbeat reports: rows finished, groups (units) finished, requests sent."""

    events: int = 0
    groups: int = 0
    requests: int = 0


class Workers:
    """The worker table of one database."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.table = db.worker

    def register(self, worker: str, shared_limit: bool, silent_after: int | None = None) -> None:
        """Write this worker's row; `silent_after`: seconds of silence after which it counts
        as dead (see `stale_after`)."""
        table = self.table
        now = utcnow()

        def work(conn: Connection) -> None:
            # Workers whose heartbeat stopped long ago are gone: clear them from the list.
            conn.execute(delete(table).where(table.c.HEARTBEAT < literal(now - FORGET_AFTER)))
            conn.execute(
                table.insert().values(
                    WORKER_ID=worker,
                    HOST=socket.gethostname(),
                    PID=os.getpid(),
                    STARTED=now,
                    HEARTBEAT=now,
                    EVENTS_DONE=0,
                    CRATES_DONE=0,
                    REQUESTS=0,
                    SHARED_LIMIT=shared_limit,
                    STALE_AFTER=silent_after,
                )
            )

        self.db.transaction(work)

    def beat(self, worker: str, progress: WorkerProgress) -> bool:
        """Record a heartbeat; False when the worker's row is gone (another worker found it
        silent too long and took its leases back)."""
        table = self.table
        statement = (
            update(table)
            .where(table.c.WORKER_ID == literal(worker))
            .values(
                HEARTBEAT=utcnow(),
                EVENTS_DONE=progress.events,
                CRATES_DONE=progress.groups,
                REQUESTS=progress.requests,
            )
        )
        return bool(self.db.transaction(lambda conn: conn.execute(statement).rowcount))

    def unregister(self, conn: Connection, worker: str) -> None:
        """Delete the worker's row (inside the caller's transaction)."""
        conn.execute(delete(self.table).where(self.table.c.WORKER_ID == literal(worker)))

    def live_ids(self, window: float = LIVE_WINDOW) -> ColumnElement[Any]:
        """A subquery: the ids of workers whose heartbeat is within `window` seconds."""
        table = self.table
        return select(table.c.WORKER_ID).where(
            table.c.HEARTBEAT >= literal(utcnow() - timedelta(seconds=window))
        )  # type: ignore[return-value]

    def live(self, conn: Connection, window: float = LIVE_WINDOW) -> list[Any]:
        """The rows of workers whose heartbeat is within `window` seconds, oldest first."""
        table = self.table
        return list(
            conn.execute(
                select(table)
                .where(table.c.HEARTBEAT >= utcnow() - timedelta(seconds=window))
                .order_by(table.c.STARTED)
            ).all()
        )

    def _dead_at(self, row: Any) -> datetime:
        silent = row.STALE_AFTER if row.STALE_AFTER else LIVE_WINDOW
        return cast(datetime, row.HEARTBEAT) + timedelta(seconds=silent + STORED_RESOLUTION)

    def dead(self, conn: Connection, now: datetime) -> list[tuple[str, datetime]]:
        """(id, last heartbeat) of workers silent longer than their own bound. The worker
        table is small (one row per running worker): read whole, judged here."""
        rows = conn.execute(
            select(self.table.c.WORKER_ID, self.table.c.HEARTBEAT, self.table.c.STALE_AFTER)
        ).all()
        return [(str(r.WORKER_ID), r.HEARTBEAT) for r in rows if now > self._dead_at(r)]

    def take_back(self, queue: SqlQueue, worker: str, heartbeat: datetime) -> int:
        """Declare `worker` dead and free its leases on `queue`, in one transaction, only if
        its heartbeat is still the one judged (a worker that beat meanwhile is alive): its row
        goes, so a late worker notices (`beat` returns False). Returns the rows freed."""
        table = self.table

        def work(conn: Connection) -> int:
            gone = conn.execute(
                delete(table).where(
                    table.c.WORKER_ID == literal(worker), table.c.HEARTBEAT == literal(heartbeat)
                )
            ).rowcount
            return queue.release_worker(conn, worker) if gone else 0

        return int(self.db.transaction(work))

    def take_back_orphan(self, queue: SqlQueue, worker: str) -> int:
        """Free the leases of a holder that has no worker row (its row was taken back or
        cleared): nobody renews them."""
        table = self.table

        def work(conn: Connection) -> int:
            known = conn.execute(
                select(table.c.WORKER_ID).where(table.c.WORKER_ID == literal(worker))
            ).first()
            return 0 if known else queue.release_worker(conn, worker)

        return int(self.db.transaction(work))

    def ids(self) -> ColumnElement[Any]:
        """A subquery: the ids of every worker with a row."""
        return select(self.table.c.WORKER_ID)  # type: ignore[return-value]

    def holders(
        self, conn: Connection, queue: SqlQueue, exclude: Collection[str] = ()
    ) -> list[Holder]:
        """Who holds live leases on `queue` (unfinished rows; groups in `exclude` left out),
        since when, and how alive each holder is, oldest claim first."""
        beats = {
            str(r.WORKER_ID): (r.HEARTBEAT, self._dead_at(r))
            for r in conn.execute(
                select(self.table.c.WORKER_ID, self.table.c.HEARTBEAT, self.table.c.STALE_AFTER)
            ).all()
        }
        found = []
        for worker, rows, since in queue.holders(conn, exclude):
            heartbeat, dead_at = beats.get(worker, (None, None))
            found.append(Holder(worker, rows, since, heartbeat, dead_at))
        return sorted(found, key=lambda h: (h.since or datetime.min, h.worker))
