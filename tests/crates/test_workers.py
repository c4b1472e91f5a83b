"""Several workers on one SQL queue and one Redis rate limit, as an operator runs them."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from stagecrawl.engine.fetcher import Fetcher, FetchSettings
from stagecrawl.engine.ratelimit import Lane, Lanes, Rate
from stagecrawl.engine.redis_limiter import RedisLimiter
from stagecrawl.queue.events import COLLECTED
from stagecrawl.storage.db import Database
from stagecrawl.testing.origin import TestOrigin
from stagecrawl.testing.registry import index_line, write_crate
from tests.cli import spawn, stagecrawl
from tests.crates.kernel import rust
from tests.services import MARIADB_URL, POSTGRES_URL, REDIS_URL, drop_stagecrawl_tables

CRATES = [f"fleet-{i:02d}" for i in range(24)]


def wait_for(condition: Any, seconds: float = 60.0) -> None:
    """Poll instead of sleeping a fixed time: start-up takes longer on a loaded machine."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def build(root: Path) -> None:
    for name in CRATES:
        lines = [index_line(name, f"1.{v}.0", yanked=v == 2) for v in range(3)]
        write_crate(
            root,
            name,
            lines,
            {
                "crate": {"name": name, "description": f"{name} crate", "downloads": 7},
                "versions": [
                    {
                        "num": f"1.{v}.0",
                        "license": "MIT",
                        "created_at": "2024-05-06T07:08:09Z",
                        "downloads": v,
                    }
                    for v in range(3)
                ],
                "keywords": [],
                "categories": [],
            },
        )
    (root / "index" / "config.json").write_text('{"dl": "http://127.0.0.1/dl", "api": null}')


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[tuple[TestOrigin, TestOrigin]]:
    build(tmp_path / "reg")
    index = TestOrigin(tmp_path / "reg" / "index").start()
    api = TestOrigin(tmp_path / "reg" / "api").start()
    # The origin itself answers 429 past 5 requests in any second.
    api.rule("/api/*", rate_limit=5, rate_window=1.0, stall=0.05)
    yield index, api
    index.stop()
    api.stop()


def versions(url: str) -> list[tuple[Any, ...]]:
    db = Database(url)
    t = rust(db).version
    with db.engine.connect() as conn:
        rows = conn.execute(select(t).order_by(t.c.PRODUCT_KEY, t.c.VERSION)).all()
    db.dispose()
    return [
        (
            r.PRODUCT_KEY,
            r.VERSION,
            r.NAME,
            r.DESCRIPTION,
            r.LICENSE,
            r.LICENSE_IDS,
            r.CHECKSUM,
            bool(r.YANKED),
            r.DEPENDENCIES,
            r.FEATURES,
            r.RELEASE_DATE,
            r.DOWNLOADS,
        )
        for r in rows
    ]


async def test_two_redis_limiters_share_one_bucket_and_one_cooldown(origin: TestOrigin) -> None:
    origin.add("x", "ok")
    origin.rule("/x", rate_limit=10, rate_window=1.0)
    prefix = f"stagecrawl-test:{uuid.uuid4().hex}:"
    # 8/s each against the origin's 10 in any second: eleven arrivals within a second would
    # need the loaded machine to squeeze ten intervals (1.3 s) by 0.3 s. Two limiters that
    # did not share the bucket would send 16/s.
    lane = Lane("x", origin.url + "/", Rate(8))
    limiters = [RedisLimiter(REDIS_URL, prefix=prefix) for _ in range(2)]
    fetchers = [Fetcher(FetchSettings(retries=0), Lanes([lane]), lim) for lim in limiters]

    async def hammer(fetcher: Fetcher) -> None:
        await asyncio.gather(*(fetcher.get(origin.url + "/x") for _ in range(15)))

    await asyncio.gather(*(hammer(f) for f in fetchers))  # 30 requests, two "processes"
    assert origin.max_in_window("/x", 1.0) <= 10
    assert all(r.status == 200 for r in origin.log)

    before = await limiters[0].now()  # Redis's time, which both limiters read
    await limiters[0].pause(origin.url, 1.0)  # a 429 seen by one pauses the other
    assert 0.5 < await limiters[1].cooldown_remaining(origin.url) <= 1.0
    await limiters[1].acquire(lane, origin.url)
    assert limiters[1].grants(lane)[-1] - before >= 1.0 - 0.001  # granted after the pause
    for fetcher in fetchers:
        await fetcher.aclose()


def _progress(
    db: Database, workers: list[subprocess.Popen[str]]
) -> tuple[int, list[subprocess.Popen[str]]]:
    """Events collected so far (PROCESSED = 1), and the running workers that hold leases
    (CLAIMED_BY is host:pid:tag), in one read."""
    with db.reading() as conn:
        collected = conn.execute(
            select(func.count()).where(rust(db).list.c.PROCESSED == COLLECTED)
        ).scalar_one()
        owners = conn.execute(
            select(rust(db).list.c.CLAIMED_BY)
            .where(rust(db).list.c.CLAIMED_BY.is_not(None))
            .distinct()
        ).scalars()
        pids = {int(owner.split(":")[1]) for owner in owners}
    return int(collected), [w for w in workers if w.pid in pids and w.poll() is None]


@pytest.mark.parametrize("db_url", [MARIADB_URL, POSTGRES_URL], ids=["mariadb", "postgresql"])
def test_four_workers_one_killed_share_the_queue_and_the_limit(
    db_url: str, fleet: tuple[TestOrigin, TestOrigin], tmp_path: Path
) -> None:
    index, api = fleet
    urls = ["--index-url", index.url + "/", "--api-url", api.url + "/"]
    reference = f"sqlite:///{tmp_path / 'one.db'}"
    single = stagecrawl("crates", "crawl", *CRATES, "--db", reference, *urls, "--api-rate", "4")
    assert single.returncode == 0, single.stderr
    api.log.clear()

    drop_stagecrawl_tables(db_url)
    seeded = stagecrawl("crates", "seed", *CRATES, "--db", db_url, *urls)
    assert seeded.returncode == 0, seeded.stderr
    # 4/s together against the origin's 5 in any second: six arrivals within a second would
    # need the loaded machine to squeeze five intervals (1.3 s) by 0.3 s; at 5/s a 20 ms
    # squeeze did it (a 429, seen under load). Four workers that did not share the limit
    # would send 16/s.
    common = [
        "--db",
        db_url,
        *urls,
        "--api-rate",
        "4",
        "--redis-url",
        REDIS_URL,
        "--lease-seconds",
        "4",
        "--concurrency",
        "2",
    ]
    workers = [spawn("crates", "collect", *common) for _ in range(4)]
    wait_for(lambda: len(api.requests_to("/api/*")) >= 4)  # the workers are claiming
    # The victim is a live worker that holds leases now (which one claimed first varies).
    holding: list[subprocess.Popen[str]] = []

    probe = Database(db_url, create=False)  # opened once: polls stay quick under load

    def written_and_held() -> bool:
        collected, holding[:] = _progress(probe, workers)
        return collected > 0 and bool(holding)

    wait_for(written_and_held)  # rows are written, and a live worker holds some of the rest
    victim = holding[0]
    victim.send_signal(signal.SIGKILL)  # dies holding leases
    victim.wait(30)
    assert 0 < _progress(probe, workers)[0] < len(CRATES) * 3  # the kill landed mid-run
    probe.dispose()
    codes = {w.pid: w.wait(180) for w in workers}
    assert codes.pop(victim.pid) == -signal.SIGKILL
    assert list(codes.values()) == [0, 0, 0], [w.stderr.read() for w in workers if w != victim]

    db = Database(db_url)
    with db.engine.connect() as conn:
        states = conn.execute(select(rust(db).list.c.PROCESSED, rust(db).list.c.CLAIMED_BY)).all()
    db.dispose()
    assert len(states) == len(CRATES) * 3
    assert {s.PROCESSED for s in states} == {1} and {s.CLAIMED_BY for s in states} == {None}
    assert versions(db_url) == versions(reference)  # as if one worker had done it all
    assert not [r for r in api.log if r.status == 429]  # four workers, one shared limit
    assert api.max_in_window("/api/*", 1.0) <= 5
    drop_stagecrawl_tables(db_url)


def test_sqlite_refuses_a_second_worker_and_status_lists_the_first(
    fleet: tuple[TestOrigin, TestOrigin], tmp_path: Path
) -> None:
    index, api = fleet
    urls = ["--index-url", index.url + "/", "--api-url", api.url + "/"]
    db = f"sqlite:///{tmp_path / 'one.db'}"
    assert stagecrawl("crates", "seed", *CRATES, "--db", db, *urls).returncode == 0
    first = spawn("crates", "collect", "--db", db, *urls, "--api-rate", "2")
    wait_for(lambda: bool(api.requests_to("/api/*")))  # it is collecting, holding the file
    second = stagecrawl("crates", "collect", "--db", db, *urls)
    status = stagecrawl("status", "--db", db)
    first.send_signal(signal.SIGINT)
    assert first.wait(60) == 130
    assert second.returncode == 2
    lines = [line for line in second.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "SQLite takes one writer" in lines[0]
    assert "live workers" in status.stdout and "own bucket" in status.stdout
