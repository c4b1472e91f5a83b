"""The worker table after workers die: each row is judged by its own heartbeat bound
(STALE_AFTER), so `status` shows a killed worker as dead once that bound has passed (not a
minute later), and the next worker to start clears the rows of the dead."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import delete, select

from stagecrawl.queue.reads import WorkerReads
from stagecrawl.queue.table import utcnow
from stagecrawl.queue.workers import Workers
from stagecrawl.storage.db import Database
from stagecrawl.storage.reads import ReadSource, SqliteFile, sqlite_file
from tests.services import MARIADB_URL, POSTGRES_URL, drop_stagecrawl_tables

# WORKER_ID, seconds since its last heartbeat, STALE_AFTER (None: a row an older stagecrawl
# wrote, judged by the one-minute LIVE_WINDOW)
ROWS = [
    ("beating", 0, 15),
    ("killed", 20, 15),  # three 5 s beats missed: dead, though its last beat is recent
    ("slow", 20, 30),
    ("old-live", 30, None),
    ("old-dead", 90, None),
]


@pytest.fixture(params=["sqlite", "mariadb", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    url = {
        "sqlite": f"sqlite:///{tmp_path / 'workers.db'}",
        "mariadb": MARIADB_URL,
        "postgresql": POSTGRES_URL,
    }[request.param]
    if request.param != "sqlite":
        drop_stagecrawl_tables(url)
    database = Database(url)
    yield database
    database.dispose()
    if request.param != "sqlite":
        drop_stagecrawl_tables(url)


def fill(db: Database) -> datetime:
    now = utcnow().replace(microsecond=0)
    table = db.worker

    def work(conn: object) -> None:
        conn.execute(delete(table))  # type: ignore[attr-defined]
        conn.execute(  # type: ignore[attr-defined]
            table.insert(),
            [
                {
                    "WORKER_ID": worker,
                    "HOST": "h",
                    "PID": 1,
                    "STARTED": now - timedelta(seconds=600 + i),
                    "HEARTBEAT": now - timedelta(seconds=silent),
                    "EVENTS_DONE": 0,
                    "CRATES_DONE": 0,
                    "REQUESTS": 0,
                    "SHARED_LIMIT": False,
                    "STALE_AFTER": bound,
                }
                for i, (worker, silent, bound) in enumerate(ROWS)
            ],
        )

    db.transaction(work)
    return now


def sources(db: Database) -> list[ReadSource]:
    found: list[ReadSource] = [db]
    path = sqlite_file(db.url)
    if path is not None:
        found.append(SqliteFile(db.url, path))  # status's own path on SQLite
    return found


def test_each_worker_is_live_or_dead_by_its_own_bound(db: Database) -> None:
    now = fill(db)
    for source in sources(db):
        with source.reads() as r:
            live = {w.worker for w in WorkerReads().live(r, now)}
            dead = {w.worker: w.dead_at for w in WorkerReads().silent(r, now)}
        assert live == {"beating", "slow", "old-live"}, type(source).__name__
        assert dead == {
            "killed": now - timedelta(seconds=20 - 15 - 1),
            "old-dead": now - timedelta(seconds=90 - 60 - 1),
        }


def test_the_next_worker_clears_the_rows_of_dead_workers(db: Database) -> None:
    fill(db)
    Workers(db).register("next", shared_limit=False, silent_after=15)
    with db.reading() as conn:
        left = {w for (w,) in conn.execute(select(db.worker.c.WORKER_ID))}
    assert left == {"beating", "slow", "old-live", "next"}
