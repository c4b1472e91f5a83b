"""The worker row and its heartbeat (TB_STAGECRAWL_WORKER): who works on the queues, since
when, how far, and whose leases are stale."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import Connection, delete, literal, select, update
from sqlalchemy.sql.elements import ColumnElement

from stagecrawl.queue.table import utcnow
from stagecrawl.storage.db import Database

# A heartbeat older than this is a dead worker's: its leases may be taken back at start.
LIVE_WINDOW = 60.0
# Rows of workers gone longer than this are cleared when a worker starts.
FORGET_AFTER = timedelta(hours=1)


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

    def register(self, worker: str, shared_limit: bool) -> None:
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
                )
            )

        self.db.transaction(work)

    def beat(self, worker: str, progress: WorkerProgress) -> None:
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
        self.db.transaction(lambda conn: conn.execute(statement))

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
