"""Tidy after any end: a crawl killed with -9 shows as dead in `status` once its own heartbeat
bound has passed, and the next run clears its worker row and takes its lock file over; a
crawl that fails leaves no lock file behind."""

from __future__ import annotations

import json
import sqlite3
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.acceptance.conftest import NAMES, Mirror, spawn, stagecrawl
from tests.kills import kill_when, sqlite_count

COLLECTED_EVENTS = "SELECT COUNT(*) FROM TB_COMP_LIB_RUST_LIST WHERE PROCESSED = 1"
BEATING = {"STAGECRAWL_HEARTBEAT_SECONDS": "1"}  # dead after 3 s of silence


def worker_rows(path: Path) -> list[tuple[str, datetime, int]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT WORKER_ID, HEARTBEAT, STALE_AFTER FROM TB_STAGECRAWL_WORKER"
        ).fetchall()
    finally:
        conn.close()
    return [(w, datetime.fromisoformat(beat), int(bound)) for w, beat, bound in rows]


def test_a_worker_killed_with_9_is_dead_within_its_bound_and_cleared_by_the_next_run(
    mirror: Mirror, tmp_path: Path
) -> None:
    path = tmp_path / "killed.db"
    url = f"sqlite:///{path}"
    crawl = ["crates", "crawl", *NAMES, "--db", url, *mirror.urls(), "--api-rate", "5"]
    process = spawn(*crawl, env=BEATING)
    kill_when(process, lambda: sqlite_count(path, COLLECTED_EVENTS), 2)
    lock_file = tmp_path / "killed.db.collect.lock"
    assert lock_file.exists()  # a kill -9 leaves it (and the kernel's lock goes with the process)

    [(killed, heartbeat, bound)] = worker_rows(path)
    assert bound == 3
    # Past its own bound (and the second heartbeats are stored to), not a minute later; the
    # times are judged to the second, so once a whole second later than that:
    dead_at = heartbeat + timedelta(seconds=bound + 1)
    later = dead_at + timedelta(seconds=1) - datetime.now(UTC).replace(tzinfo=None)
    time.sleep(max(0.0, later.total_seconds()))
    shown = stagecrawl("status", "--db", url, "--format", "json")
    assert shown.returncode == 0, shown.stderr
    crates = json.loads(shown.stdout)["crates"]
    assert crates["workers"] == []
    assert [w["worker"] for w in crates["dead_workers"]] == [killed]
    table = stagecrawl("status", "--db", url)
    assert "no live workers" in table.stdout and "dead workers" in table.stdout

    again = stagecrawl(*crawl, "--api-rate", "50", env=BEATING)
    assert again.returncode == 0, again.stderr
    assert worker_rows(path) == []  # the killed worker's row cleared, the rerun's own too
    assert not lock_file.exists()  # taken over, then removed as the rerun ended


def test_a_crawl_that_fails_leaves_no_lock_file(mirror: Mirror, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'failed.db'}"
    done = stagecrawl("crates", "crawl", "no-such-crate", "--db", url, *mirror.urls())
    assert done.returncode == 1, done.stderr
    assert not (tmp_path / "failed.db.collect.lock").exists()
