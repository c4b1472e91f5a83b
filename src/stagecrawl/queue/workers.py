"""The worker row and its heartbeat (TB_STAGECRAWL_WORKER): who works on the queues, since
when, how far, and whose leases are stale."""

from __future__ import annotations

import math
import os
import socket
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, delete, literal, select, update
from sqlalchemy.sql.elements import ColumnElement

from stagecrawl.queue.reads import LIVE_WINDOW, STORED_RESOLUTION, Holder, WorkerReads
from stagecrawl.queue.table import utcnow
from stagecrawl.storage.db import Database
from stagecrawl.storage.reads import EngineReads

__all__ = [
    "LIVE_WINDOW",
    "STORED_RESOLUTION",
    "Holder",
    "WorkerProgress",
    "Workers",
    "stale_after",
    "worker_id",
]

if TYPE_CHECKING:
    from stagecrawl.queue.sql import SqlQueue

# A worker is dead once its heartbeat is this many of its heartbeat intervals old (one
# missed beat is not death: a loaded machine or a slow commit may delay one).
STALE_BEATS = 3


def stale_after(heartbeat_interval: float) -> int:
    """Seconds of silence after which a worker beating every `heartbeat_interval` is dead."""
    return max(1, math.ceil(STALE_BEATS * heartbeat_interval))


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class WorkerProgress:
    """What a heartbeat reports: rows finished, groups (units) finished, requests sent."""

    events: int = 0
    groups: int = 0
    requests: int = 0


class Workers(WorkerReads):
    """The worker table of one database (its status reads are WorkerReads')."""

    def __init__(self, db: Database) -> None:
        super().__init__(db.worker.name)
        self.db = db
        self.table = db.worker

    def register(self, worker: str, shared_limit: bool, silent_after: int | None = None) -> None:
        """Write this worker's row; `silent_after`: seconds of silence after which it counts
        as dead (see `stale_after`)."""
        table = self.table
        now = utcnow()

        def work(conn: Connection) -> None:
            # Workers silent past their own bound are gone (killed, or their machine lost):
            # their rows go, each only if its heartbeat is still the one judged. Their leases
            # were taken back before (`QueueRun.open`), or are an orphan's, taken back too.
            for gone, heartbeat in self.dead(conn, now):
                conn.execute(
                    delete(table).where(
                        table.c.WORKER_ID == literal(gone),
                        table.c.HEARTBEAT == literal(heartbeat),
                    )
                )
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

    def dead(self, conn: Connection, now: datetime) -> list[tuple[str, datetime]]:
        """(id, last heartbeat) of workers silent longer than their own bound (`beats`)."""
        beats = self.beats(EngineReads(conn))
        return [(worker, beat) for worker, (beat, dead_at) in beats.items() if now > dead_at]

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
