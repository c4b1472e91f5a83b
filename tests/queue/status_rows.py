"""Rows on every part `stagecrawl status` shows, in both registries' tables: each rung of the
ladder, a requeue, a live worker's leases, a dead worker's and an orphan's, work waiting for a
pause (seeds and events), live and silent worker rows, versions and products; reasons quoting
a URL with a password (status masks it)."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, delete

from stagecrawl.queue.table import utcnow
from stagecrawl.storage.db import Database

SECRET_URL = "https://crawler:S3cr3tPw@mirror.example/x"
ago, ahead = (lambda seconds: timedelta(seconds=-seconds)), (lambda s: timedelta(seconds=s))

# name, PROCESSED, RESYNC, LAST_ERROR, CLAIMED_BY, CLAIMED_UNTIL, CLAIMED_AT, NOT_BEFORE, SOURCE
EVENTS: list[tuple[Any, ...]] = [
    ("Alpha", 0, False, None, "w1", ahead(300), ago(40), None, "seed"),
    ("alpha2", 0, False, None, "w1", ahead(300), ago(90), None, "lock"),
    ("beta", 30, False, f"HTTP 503 from {SECRET_URL}", "w2", ahead(300), ago(1200), None, "seed"),
    ("gamma", 39, False, "gave up: timeout", None, None, None, None, "lock,seed"),
    ("delta", 1, True, None, None, None, None, None, "seed"),
    ("eps", 0, False, "host asked to wait", None, None, None, ahead(600), "seed"),
    ("zeta", 30, False, "our budget is spent", None, None, None, ahead(1800), "lock"),
    ("eta", 0, False, None, "ghost", ahead(120), None, None, "seed"),
    ("theta", 1, False, None, "w1", ago(120), ago(540), None, "seed"),  # a lease run out
]
# the key column (CRATE_NAME, PROJECT_NAME …), NAME, STATE, RESYNC, LAST_ERROR, NOT_BEFORE
SEEDS: list[tuple[Any, ...]] = [
    ("s1", "S1", 0, False, None, None),
    ("s2", "S2", 31, True, f"fetch {SECRET_URL} failed", None),
    ("s3", "S3", 0, False, "paused by host", ahead(7200)),
    ("s4", "S4", 39, False, "gave up", None),
]
# WORKER_ID, STARTED, HEARTBEAT, EVENTS_DONE, REQUESTS, SHARED_LIMIT, STALE_AFTER
WORKERS: list[tuple[Any, ...]] = [
    ("w1", ago(600), ago(0), 120, 300, True, 30),
    ("w0", ago(660), ago(5), 5, 9, False, None),
    ("w2", ago(3600), ago(600), 50, 80, False, 15),  # silent: dead, not live
]


def fill_for_status(url: str) -> datetime:
    """Replace the rows of the status tables of `url` (created if need be); returns the
    `now` the times are relative to."""
    db = Database(url)
    now = utcnow()

    def at(offset: timedelta | None) -> datetime | None:
        return None if offset is None else now + offset

    def registry(conn: Connection, code: str) -> None:
        t = db.registry(code)
        for table in (t.list, t.seed, t.version, t.product):
            conn.execute(delete(table))
        conn.execute(
            t.list.insert(),
            [
                {
                    "ID": hashlib.sha256(f"{name}@{version}".encode()).digest(),
                    t.names.group: name.lower(),
                    "NAME": name,
                    "VERSION": version,
                    "SOURCE": source,
                    "REF_TAGS": "[]",
                    "YANKED": False,
                    "PROCESSED": state,
                    "RESYNC": resync,
                    "LAST_ERROR": error,
                    "CLAIMED_BY": holder,
                    "CLAIMED_UNTIL": at(until),
                    "CLAIMED_AT": at(claimed),
                    "NOT_BEFORE": at(not_before),
                    "TIMESTAMP": now,
                    "LAST_UPDATED": now,
                }
                for name, state, resync, error, holder, until, claimed, not_before, source in EVENTS
                for version in ("1.0.0", "2.0.0")
            ],
        )
        conn.execute(
            t.seed.insert(),
            [
                {
                    t.names.group: key,
                    "NAME": name,
                    "STATE": state,
                    "RESYNC": resync,
                    "LAST_ERROR": error,
                    "NOT_BEFORE": at(not_before),
                    "LAST_UPDATED": now,
                }
                for key, name, state, resync, error, not_before in SEEDS
            ],
        )
        owner = {"LANGUAGE": code.lower(), "REPOSITORY": code, "PRODUCT_KEY": "alpha"}
        conn.execute(
            t.version.insert(),
            [
                {**owner, "VERSION": v, "NAME": "Alpha", "DEPENDENCIES": "[]", "FEATURES": "{}"}
                | {"YANKED": False, "PROCESSED": 1, "LAST_UPDATED": now}
                for v in ("1.0.0", "2.0.0", "3.0.0")
            ],
        )
        conn.execute(
            t.product.insert(),
            [
                {**owner, "NAME": "Alpha", "COMP_STATUS": "ACTIVE", "VERSION_COUNT": 3}
                | {"LAST_UPDATED": now}
            ],
        )

    def work(conn: Connection) -> None:
        for code in db.registries:
            registry(conn, code)
        conn.execute(delete(db.worker))
        conn.execute(
            db.worker.insert(),
            [
                {
                    "WORKER_ID": worker,
                    "HOST": "h",
                    "PID": 1,
                    "STARTED": at(started),
                    "HEARTBEAT": at(beat),
                    "EVENTS_DONE": done,
                    "CRATES_DONE": 0,
                    "REQUESTS": requests,
                    "SHARED_LIMIT": shared,
                    "STALE_AFTER": stale,
                }
                for worker, started, beat, done, requests, shared, stale in WORKERS
            ],
        )

    db.transaction(work)
    db.dispose()
    return now
