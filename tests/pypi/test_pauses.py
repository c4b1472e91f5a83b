"""PyPI against a server that rate-limits us (as crates does, tests/acceptance/test_healing.py):
a 429 asking for a pause longer than the run may wait is not a failure of the work that asked.
`pypi seed`, `collect` and `refresh` give the work back off the retry ladder, exit 1 with one
line saying when to rerun (stderr, any format), carry `waiting` in their JSON, and a rerun
after the pause completes. The CLI runs in a real process against the loopback look-alike."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis

from stagecrawl.queue import utcnow
from stagecrawl.testing.pypi_origin import PyPIOrigin, synthetic_project
from tests.cli import stagecrawl
from tests.services import REDIS_URL

NAMES = [f"paused-{i}" for i in range(4)]
LIST, SEED = "TB_COMP_LIB_PYPI_LIST", "TB_STAGECRAWL_SEED_PYPI"
VERSION, PRODUCT = "TB_COMP_LIB_VERSION_PYPI", "TB_COMP_LIB_PRODUCT_PYPI"
PAUSE = "900"  # seconds: over the 600 s (max_retry_after) a run may wait for one request


@pytest.fixture
def origin() -> Iterator[PyPIOrigin]:
    server = PyPIOrigin()
    for name in NAMES:
        server.add_project(synthetic_project(name, 3, requires=["six>=1.0"]))
    server.start()
    yield server
    server.stop()


def urls(origin: PyPIOrigin) -> list[str]:
    return [
        *("--index-url", f"{origin.url}/simple/", "--api-url", f"{origin.url}/"),
        *("--contact", "tests@example.org", "--index-rate", "50", "--api-rate", "50"),
        *("--files-rate", "50"),
    ]


def rate_limit(origin: PyPIOrigin) -> None:
    """From now on every request gets 429 with a Retry-After of 15 minutes."""
    origin.rule("*", too_many=10**9, retry_after=PAUSE)


def recover(origin: PyPIOrigin, db: Path) -> None:
    """The origin answers again, and the clock moves past the pause: the stored times lie in
    the past (what a rerun after that time sees)."""
    origin.clear_rules()
    past = f"{utcnow() - timedelta(seconds=1):%Y-%m-%d %H:%M:%S.%f}"
    with sqlite3.connect(db) as connection:
        for table in (LIST, SEED):
            connection.execute(
                f"UPDATE {table} SET NOT_BEFORE = ? WHERE NOT_BEFORE IS NOT NULL", (past,)
            )
    connection.close()


def rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    connection = sqlite3.connect(db)
    try:
        return list(connection.execute(sql).fetchall())
    finally:
        connection.close()


def waiting_line(stderr: str, origin: PyPIOrigin) -> str:
    """The one line that says what waits and when to rerun; no traceback, no failure."""
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if "rerun after that" in line]
    assert len(lines) == 1, stderr
    host = re.escape(origin.url.split("//", 1)[1])
    assert re.fullmatch(
        rf"{host} asked for a pause until"
        r" (\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d UTC \(server Retry-After\);"
        r" (nothing sent|\d+ queued item\(s\) wait); rerun after that",
        lines[0],
    ), lines[0]
    return lines[0]


def test_seed_waits_out_a_long_retry_after_off_the_ladder(
    origin: PyPIOrigin, tmp_path: Path
) -> None:
    db = tmp_path / "seed.db"
    rate_limit(origin)
    paused = stagecrawl("pypi", "seed", *NAMES, "--db", f"sqlite:///{db}", *urls(origin))
    assert paused.returncode == 1, paused.stderr
    assert any(r.status == 429 for r in origin.log)
    waiting_line(paused.stderr, origin)
    assert "rate limited" not in paused.stderr  # no seed reported as failed
    # Every seed still pending (state 0, not a rung of the ladder), with why and until when.
    seeds = rows(db, f"SELECT STATE, LAST_ERROR, NOT_BEFORE FROM {SEED}")
    assert len(seeds) == len(NAMES)
    assert {state for state, _, _ in seeds} == {0}, seeds
    waited = [s for s in seeds if s[2] is not None]
    assert waited and all("asked for a pause" in str(reason) for _, reason, _ in waited)
    assert rows(db, f"SELECT COUNT(*) FROM {LIST}") == [(0,)]

    # Within the pause: the JSON report carries `waiting`, the line stays on stderr.
    again = stagecrawl(
        "pypi", "seed", *NAMES, "--db", f"sqlite:///{db}", *urls(origin), "--format", "json"
    )
    assert again.returncode == 1, again.stderr
    document = json.loads(again.stdout)
    assert document["waiting"]["items"] >= len(waited)
    assert "asked for a pause" in document["waiting"]["reason"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", document["waiting"]["until"])
    assert document["seed"]["failed"] == {}
    waiting_line(again.stderr, origin)
    assert {s[0] for s in rows(db, f"SELECT STATE FROM {SEED}")} == {0}

    recover(origin, db)
    after = stagecrawl("pypi", "crawl", *NAMES, "--db", f"sqlite:///{db}", *urls(origin))
    assert after.returncode == 0, after.stderr
    assert "rerun after that" not in after.stderr
    assert rows(db, f"SELECT DISTINCT STATE, NOT_BEFORE FROM {SEED}") == [(1, None)]
    assert rows(db, f"SELECT COUNT(*) FROM {VERSION}") == [(3 * len(NAMES),)]


def test_collect_waits_out_a_long_retry_after_off_the_ladder(
    origin: PyPIOrigin, tmp_path: Path
) -> None:
    db = tmp_path / "collect.db"
    seeded = stagecrawl("pypi", "seed", *NAMES, "--db", f"sqlite:///{db}", *urls(origin))
    assert seeded.returncode == 0, seeded.stderr
    events = 3 * len(NAMES)
    assert rows(db, f"SELECT COUNT(*) FROM {LIST} WHERE PROCESSED = 0") == [(events,)]

    rate_limit(origin)
    paused = stagecrawl(
        "pypi", "collect", "--db", f"sqlite:///{db}", *urls(origin), "--format", "json"
    )
    assert paused.returncode == 1, paused.stderr
    waiting_line(paused.stderr, origin)
    document = json.loads(paused.stdout)
    assert document["waiting"]["items"] > 0
    assert document["collect"]["failed"] == 0 and document["collect"]["failures"] == {}
    assert document["collect"]["waiting"]  # the projects not attempted, with why
    # Every event still pending: none on the retry ladder, none collected.
    assert rows(db, f"SELECT DISTINCT PROCESSED FROM {LIST}") == [(0,)]
    waited = rows(db, f"SELECT LAST_ERROR FROM {LIST} WHERE NOT_BEFORE IS NOT NULL")
    assert len(waited) == document["waiting"]["items"]
    assert all("asked for a pause" in str(reason) for (reason,) in waited)
    assert rows(db, f"SELECT COUNT(*) FROM {VERSION}") == [(0,)]
    # `status` says what waits and why, and that nothing is on a ladder.
    status = stagecrawl("status", "--db", f"sqlite:///{db}", "--format", "json")
    assert status.returncode == 0, status.stderr
    pypi = json.loads(status.stdout)["pypi"]
    assert pypi["waiting"] == document["waiting"]
    assert pypi["ladder"] == [] and pypi["seed_ladder"] == []

    # The table report too: the line on stderr, exit 1.
    table = stagecrawl("pypi", "collect", "--db", f"sqlite:///{db}", *urls(origin))
    assert table.returncode == 1, table.stderr
    waiting_line(table.stderr, origin)
    assert rows(db, f"SELECT DISTINCT PROCESSED FROM {LIST}") == [(0,)]

    recover(origin, db)
    after = stagecrawl("pypi", "collect", "--db", f"sqlite:///{db}", *urls(origin))
    assert after.returncode == 0, after.stderr
    assert "rerun after that" not in after.stderr
    assert rows(db, f"SELECT DISTINCT PROCESSED, NOT_BEFORE FROM {LIST}") == [(1, None)]
    assert rows(db, f"SELECT COUNT(*) FROM {VERSION}") == [(events,)]


def test_refresh_waits_out_a_long_retry_after(origin: PyPIOrigin, tmp_path: Path) -> None:
    db = tmp_path / "refresh.db"
    crawled = stagecrawl("pypi", "crawl", *NAMES, "--db", f"sqlite:///{db}", *urls(origin))
    assert crawled.returncode == 0, crawled.stderr
    origin.yank(NAMES[0], "1.0.1")  # a change the refresh must bring in
    yanked = f"SELECT YANKED FROM {VERSION} WHERE VERSION = '1.0.1' AND NAME = '{NAMES[0]}'"
    assert rows(db, yanked) == [(0,)]
    etags = rows(db, f"SELECT PRODUCT_KEY, ETAG FROM {PRODUCT} ORDER BY PRODUCT_KEY")

    rate_limit(origin)
    paused = stagecrawl(
        "pypi", "refresh", "--db", f"sqlite:///{db}", *urls(origin), "--format", "json"
    )
    assert paused.returncode == 1, paused.stderr
    waiting_line(paused.stderr, origin)
    document = json.loads(paused.stdout)
    assert document["waiting"]["items"] == len(NAMES)  # none asked, none failed
    assert document["refresh"]["failed"] == {}
    assert sorted(document["refresh"]["waiting"]) == NAMES
    assert rows(db, yanked) == [(0,)]  # nothing applied: the next refresh asks again
    assert rows(db, f"SELECT PRODUCT_KEY, ETAG FROM {PRODUCT} ORDER BY PRODUCT_KEY") == etags

    recover(origin, db)
    after = stagecrawl("pypi", "refresh", "--db", f"sqlite:///{db}", *urls(origin))
    assert after.returncode == 0, after.stderr
    assert "rerun after that" not in after.stderr
    assert rows(db, yanked) == [(1,)]


def test_with_a_shared_limiter_a_rerun_within_the_pause_sends_nothing(
    origin: PyPIOrigin, tmp_path: Path
) -> None:
    db = tmp_path / "shared.db"
    shared = ["--db", f"sqlite:///{db}", *urls(origin), "--redis-url", REDIS_URL]
    host_key = f"stagecrawl:pace:host:{origin.url}"  # the host's pause, kept by Redis
    try:
        rate_limit(origin)
        first = stagecrawl("pypi", "crawl", *NAMES, *shared)
        assert first.returncode == 1, first.stderr
        waiting_line(first.stderr, origin)
        for attempt in range(2):  # reruns within the pause, as a user would try
            sent = len(origin.log)
            again = stagecrawl("pypi", "crawl", *NAMES, *shared)
            assert again.returncode == 1, again.stderr
            assert len(origin.log) == sent, attempt  # not one request
            assert "; nothing sent; " in waiting_line(again.stderr, origin)
            assert {s[0] for s in rows(db, f"SELECT STATE FROM {SEED}")} == {0}

        redis.Redis.from_url(REDIS_URL).delete(host_key)  # the pause is over
        recover(origin, db)
        after = stagecrawl("pypi", "crawl", *NAMES, *shared)
        assert after.returncode == 0, after.stderr
        assert rows(db, f"SELECT COUNT(*) FROM {VERSION}") == [(3 * len(NAMES),)]
    finally:
        redis.Redis.from_url(REDIS_URL).delete(host_key)


def test_a_crawl_of_names_rerun_within_the_pause_does_not_ask_the_host_again(
    origin: PyPIOrigin, tmp_path: Path
) -> None:
    """Without a shared limiter the pause lives in the database (each held item's NOT_BEFORE):
    `crawl NAMES` again within it names the same seeds, and they keep their hold — nothing
    is sent to the paused host, as `collect` sends nothing."""
    db = tmp_path / "local.db"
    flags = ["--db", f"sqlite:///{db}", *urls(origin)]
    rate_limit(origin)
    first = stagecrawl("pypi", "crawl", *NAMES, *flags)
    assert first.returncode == 1, first.stderr
    waiting_line(first.stderr, origin)
    sent = len(origin.log)
    again = stagecrawl("pypi", "crawl", *NAMES, *flags)
    assert again.returncode == 1, again.stderr
    assert len(origin.log) == sent  # not one request to the paused host
    assert "; nothing sent; " in waiting_line(again.stderr, origin)

    recover(origin, db)
    after = stagecrawl("pypi", "crawl", *NAMES, *flags)
    assert after.returncode == 0, after.stderr
    assert rows(db, f"SELECT COUNT(*) FROM {VERSION}") == [(3 * len(NAMES),)]
