"""The shared rate limit (Redis) lost mid-run: the worker stops, cleanly, and says so."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from tests.acceptance.conftest import NAMES, Mirror, redis_server, spawn, stagecrawl


def counts(db_file: Path) -> tuple[int, int, int]:
    """(events, collected, still claimed by someone)."""
    with sqlite3.connect(f"file:{db_file}?mode=ro", uri=True, timeout=10) as conn:
        total, collected, held = conn.execute(
            "SELECT COUNT(*), SUM(PROCESSED = 1), SUM(CLAIMED_BY IS NOT NULL)"
            " FROM TB_COMP_LIB_RUST_LIST"
        ).fetchone()
    return int(total), int(collected or 0), int(held or 0)


def test_losing_redis_mid_run_stops_the_worker_with_one_line(
    mirror: Mirror, tmp_path: Path
) -> None:
    db_file = tmp_path / "loss.db"
    url = f"sqlite:///{db_file}"
    seeded = stagecrawl("crates", "seed", *NAMES, "--db", url, *mirror.urls())
    assert seeded.returncode == 0, seeded.stderr
    total, _, _ = counts(db_file)
    mirror.api.rule("/api/*", stall=0.4)  # a slow API: the run is still going when Redis dies
    with redis_server("--requirepass", "red1s-pa55") as (port, server):
        redis_url = f"redis://:red1s-pa55@127.0.0.1:{port}/0"
        worker = spawn(
            "crates",
            "collect",
            "--db",
            url,
            *mirror.urls(),
            "--redis-url",
            redis_url,
            "--api-rate",
            "20",
            "--concurrency",
            "2",
            env={"STAGECRAWL_OUTAGE_SECONDS": "2"},  # waited out for 2 s, then it stops
        )
        try:
            deadline = time.monotonic() + 60
            while counts(db_file)[1] < 3:  # some crates collected through the shared limit
                assert worker.poll() is None, worker.communicate()
                assert time.monotonic() < deadline, "no progress"
                time.sleep(0.1)
            server.kill()
            server.wait()
            out, err = worker.communicate(timeout=120)
        finally:
            if worker.poll() is None:  # a hung worker is the failure; never leave it running
                worker.kill()
                worker.communicate()
    assert worker.returncode == 1, err
    assert "Traceback" not in err and "red1s-pa55" not in out + err
    assert "did not finish within the grace period" not in err  # no stop was asked for
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert f"redis://:***@127.0.0.1:{port}/0" in errors[0], errors[0]
    assert "lost the shared rate limit" in errors[0]
    events, collected, held = counts(db_file)
    assert events == total and 3 <= collected < total
    assert held == 0  # every lease was given back as the worker stopped
    again = stagecrawl("crates", "collect", "--db", url, *mirror.urls(), "--api-rate", "50")
    assert again.returncode == 0, again.stderr
    assert counts(db_file) == (total, total, 0)  # the rerun without Redis finished the work


def test_losing_redis_mid_refresh_stops_it_with_one_line(mirror: Mirror, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'refresh.db'}"
    crawled = stagecrawl("crates", "crawl", *NAMES, "--db", url, *mirror.urls(), "--api-rate", "50")
    assert crawled.returncode == 0, crawled.stderr
    mirror.index.log.clear()
    mirror.index.rule("/*", stall=0.3)
    with redis_server() as (port, server):
        redis_url = f"redis://127.0.0.1:{port}/0"
        refresh = spawn("crates", "refresh", "--db", url, *mirror.urls(), "--redis-url", redis_url,
                        "--index-rate", "5", env={"STAGECRAWL_OUTAGE_SECONDS": "2"})  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while len(mirror.index.log) < 3:
                assert refresh.poll() is None, refresh.communicate()
                assert time.monotonic() < deadline, "no progress"
                time.sleep(0.05)
            server.kill()
            server.wait()
            _out, err = refresh.communicate(timeout=120)
        finally:
            if refresh.poll() is None:
                refresh.kill()
                refresh.communicate()
    assert refresh.returncode == 1, err
    assert "Traceback" not in err and "did not finish within the grace period" not in err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"lost the shared rate limit at {redis_url}" in errors[0], err
    asked = len(mirror.index.log)
    assert asked < len(NAMES)  # it stopped asking
    mirror.index.clear_rules()
    again = stagecrawl("crates", "refresh", "--db", url, *mirror.urls(), "--index-rate", "100")
    assert again.returncode == 0, again.stderr
