"""Workers that heal (issue 21): a long server pause costs a wait, never the retry ladder."""

from __future__ import annotations

import random
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import select, update

from stagecrawl.engine.clock import ScaledClock
from stagecrawl.engine.fetcher import Fetcher, FetchSettings
from stagecrawl.engine.ratelimit import Lane, Lanes, LocalLimiter, Rate
from stagecrawl.errors import RateLimited
from stagecrawl.queue import utcnow
from stagecrawl.storage.db import Database
from stagecrawl.testing.origin import TestOrigin
from stagecrawl.testing.registry import index_line, write_crate
from tests.acceptance.conftest import NAMES, Mirror, dump, spawn, stagecrawl
from tests.crates.kernel import rust
from tests.crates.test_workers import wait_for
from tests.services import MARIADB_URL, POSTGRES_URL, REDIS_URL
from tests.services import drop_stagecrawl_tables as _drop_tables


def ladder(url: str) -> dict[str, int]:
    """Every event's PROCESSED, by name@version."""
    db = Database(url)
    with db.reading() as conn:
        rows = conn.execute(
            select(rust(db).list.c.NAME, rust(db).list.c.VERSION, rust(db).list.c.PROCESSED)
        ).all()
    db.dispose()
    return {f"{n}@{v}": int(p) for n, v, p in rows}


def expire_pauses(url: str, host_key: str) -> None:
    """What the clock does after the pause: Redis drops the host's pause (its key expires)
    and the stored times lie in the past."""
    redis.Redis.from_url(REDIS_URL).delete(host_key)
    db = Database(url)
    past = utcnow() - timedelta(seconds=1)
    for table in (rust(db).list, rust(db).seed):
        db.transaction(
            lambda conn, t=table: conn.execute(
                update(t).where(t.c.NOT_BEFORE.is_not(None)).values(NOT_BEFORE=past)
            )
        )
    db.dispose()


def test_a_long_retry_after_leaves_the_ladder_alone_and_reruns_send_nothing(
    mirror: Mirror, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'pause.db'}"
    shared = ["--db", url, *mirror.urls(), "--redis-url", REDIS_URL, "--api-rate", "50"]
    host = mirror.index.url.split("//", 1)[1]
    host_key = f"stagecrawl:pace:host:{mirror.index.url}"
    reference = f"sqlite:///{tmp_path / 'clean.db'}"
    clean = stagecrawl("crates", "crawl", *NAMES, "--db", reference, *mirror.urls(),
                       "--api-rate", "50")  # fmt: skip
    assert clean.returncode == 0, clean.stderr
    try:
        seeded = stagecrawl("crates", "seed", *NAMES, *shared[:-2])
        assert seeded.returncode == 0, seeded.stderr
        before = ladder(url)
        assert set(before.values()) == {0}
        mirror.index.log.clear()
        mirror.api.log.clear()
        # The index answers one 429 asking for 15 minutes (over the 600 s we may wait), then
        # is healthy again.
        mirror.index.rule("/*", too_many=1, retry_after="900")
        first = stagecrawl("crates", "collect", *shared)
        assert first.returncode == 1, first.stderr
        assert len(mirror.index.log) >= 1 and mirror.index.log[0].status == 429
        assert ladder(url) == before  # the 429 is the host's pause, no event's failure
        assert "Traceback" not in first.stderr and "failed:" not in first.stderr

        for attempt in range(3):  # reruns within the pause, as the issue ran them
            sent = len(mirror.index.log) + len(mirror.api.log)
            again = stagecrawl("crates", "crawl", *NAMES, *shared)
            assert again.returncode == 1, again.stderr
            assert len(mirror.index.log) + len(mirror.api.log) == sent, attempt  # 0 requests
            assert ladder(url) == before, attempt
            lines = [line for line in again.stderr.splitlines() if "Retry-After" in line]
            assert len(lines) == 1, again.stderr
            assert re.fullmatch(
                rf"{re.escape(host)} asked for a pause until"
                r" (\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d UTC"
                r" \(server Retry-After\); nothing sent; rerun after that",
                lines[0],
            ), lines[0]
            assert "Traceback" not in again.stderr and "failed:" not in again.stderr

        status = stagecrawl("status", "--db", url, "--format", "json")
        assert status.returncode == 0, status.stderr
        assert '"ladder": []' in status.stdout  # nothing on the retry ladder

        expire_pauses(url, host_key)
        after = stagecrawl("crates", "crawl", *NAMES, *shared)
        assert after.returncode == 0, after.stderr
        assert set(ladder(url).values()) == {1}
        mine, theirs = dump(url), dump(reference)
        for table in ("TB_COMP_LIB_VERSION_RUST", "TB_COMP_LIB_PRODUCT_RUST"):
            assert mine[table] == theirs[table]
    finally:
        redis.Redis.from_url(REDIS_URL).delete(host_key)


async def test_every_wait_reason_names_its_source(origin: TestOrigin) -> None:
    """A pause we chose (backoff after 429s without Retry-After) is not the server's
    Retry-After, and says so; the server's says so too."""
    origin.add("b/x.json", {"ok": True})
    origin.add("r/y.json", {"ok": True})
    origin.rule("/b/*", too_many=1000)  # 429s that name no time: our backoff decides
    origin.rule("/r/*", too_many=1, retry_after="900")
    lanes = Lanes([Lane("b", origin.url + "/b/", Rate(100.0)), Lane("r", origin.url + "/r/")])
    clock = ScaledClock(1000.0)
    settings = FetchSettings(max_retry_after=20, backoff_base=30, backoff_cap=30)
    fetcher = Fetcher(settings, lanes, LocalLimiter(clock), clock, random.Random(7))
    with pytest.raises(RateLimited) as caught:
        await fetcher.get(origin.url + "/b/x.json")
    assert caught.value.source == "backoff"
    assert "server" not in str(caught.value) and "our backoff" in str(caught.value)
    assert "without Retry-After; our backoff holds it until" in caught.value.pause_text

    with pytest.raises(RateLimited) as caught:
        await fetcher.get(origin.url + "/r/y.json")
    assert caught.value.source == "retry_after"
    assert "the server asked to wait 900s (Retry-After)" in str(caught.value)
    assert "(server Retry-After)" in caught.value.pause_text
    await fetcher.aclose()


KILL_CRATES = [f"herd-{i:02d}" for i in range(48)]
HEARTBEAT = 1.0  # seconds: a worker silent for 3 of them (+1 s of stored resolution) is dead
LEASE = 300.0  # far longer than the test may take: the leases must follow the heartbeats


@pytest.fixture
def herd(tmp_path: Path) -> Iterator[tuple[TestOrigin, TestOrigin]]:
    root = tmp_path / "reg"
    for name in KILL_CRATES:
        numbers = [f"2.{v}.0" for v in range(3)]
        write_crate(
            root,
            name,
            [index_line(name, v) for v in numbers],
            {
                "crate": {"name": name, "description": f"{name} crate", "downloads": 3},
                "versions": [{"num": v, "license": "MIT"} for v in numbers],
                "keywords": [],
                "categories": [],
            },
        )
    with TestOrigin(root / "index") as index, TestOrigin(root / "api") as api:
        api.rule("/api/*", stall=0.05)
        yield index, api


def _versions(url: str) -> list[tuple[Any, ...]]:
    db = Database(url)
    t = rust(db).version
    with db.reading() as conn:
        rows = conn.execute(select(t).order_by(t.c.PRODUCT_KEY, t.c.VERSION)).all()
    db.dispose()
    return [tuple(v for k, v in r._mapping.items() if k != "LAST_UPDATED") for r in rows]


def _events(url: str) -> list[tuple[int, str | None]]:
    db = Database(url)
    with db.reading() as conn:
        rows = conn.execute(select(rust(db).list.c.PROCESSED, rust(db).list.c.CLAIMED_BY)).all()
    db.dispose()
    return [(int(p), c) for p, c in rows]


def _holding(url: str, workers: list[subprocess.Popen[str]]) -> list[subprocess.Popen[str]]:
    """The running workers that hold leases now (CLAIMED_BY is host:pid:tag)."""
    pids = {int(c.split(":")[1]) for _p, c in _events(url) if c}
    return [w for w in workers if w.pid in pids and w.poll() is None]


@pytest.mark.parametrize("db_url", [MARIADB_URL, POSTGRES_URL], ids=["mariadb", "postgresql"])
def test_a_killed_workers_leases_follow_its_heartbeat_not_its_lease(
    db_url: str, herd: tuple[TestOrigin, TestOrigin], tmp_path: Path
) -> None:
    index, api = herd
    urls = ["--index-url", index.url + "/", "--api-url", api.url + "/"]
    reference = f"sqlite:///{tmp_path / 'clean.db'}"
    clean = stagecrawl("crates", "crawl", *KILL_CRATES, "--db", reference, *urls,
                       "--api-rate", "50")  # fmt: skip
    assert clean.returncode == 0, clean.stderr
    _drop_tables(db_url)
    try:
        seeded = stagecrawl("crates", "seed", *KILL_CRATES, "--db", db_url, *urls)
        assert seeded.returncode == 0, seeded.stderr
        env = {"STAGECRAWL_HEARTBEAT_SECONDS": str(HEARTBEAT)}
        common = ["--db", db_url, *urls, "--redis-url", REDIS_URL, "--api-rate", "6",
                  "--lease-seconds", str(LEASE), "--concurrency", "2"]  # fmt: skip
        workers = [spawn("crates", "collect", *common, env=env) for _ in range(3)]
        try:
            wait_for(lambda: any(p == 1 for p, _c in _events(db_url)))  # rows are written …
            holding: list[subprocess.Popen[str]] = []

            def someone_holds_leases() -> bool:
                holding[:] = _holding(db_url, workers)
                return bool(holding)

            wait_for(someone_holds_leases)  # … and a live worker holds some of the rest
            victim = holding[0]
            held = sum(1 for _p, c in _events(db_url) if c and f":{victim.pid}:" in c)
            victim.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            assert victim.wait(30) == -signal.SIGKILL
            left = sum(1 for p, _c in _events(db_url) if p != 1)
            survivors = [w for w in workers if w is not victim]
            outputs = [w.communicate(timeout=LEASE / 2) for w in survivors]
            finished = time.monotonic() - killed
        finally:
            for w in workers:
                if w.poll() is None:
                    w.kill()
                    w.communicate()
        assert [w.returncode for w in survivors] == [0, 0], [err for _o, err in outputs]
        assert all("Traceback" not in err for _o, err in outputs)
        events = _events(db_url)
        assert len(events) == len(KILL_CRATES) * 3
        assert {p for p, _c in events} == {1} and {c for _p, c in events} == {None}
        mine = _versions(db_url)
        keys = [(r[2], r[3]) for r in mine]  # PRODUCT_KEY, VERSION
        assert len(keys) == len(set(keys))  # no duplicate VERSION row
        assert mine == _versions(reference)  # as if one worker had done it all
        # Taken back on a heartbeat's word (3 s of silence), not when the 300 s lease ran out.
        lines = [line for _o, err in outputs for line in err.splitlines()]
        took_back = [line for line in lines if "took back" in line]
        assert any(str(victim.pid) in line for line in took_back), took_back
        assert finished < LEASE / 2
        print(f"\nkill -9 holding {held} leases, {left} events unfinished: survivors done in"
              f" {finished:.1f} s after the kill (heartbeat {HEARTBEAT:g} s)")  # fmt: skip
    finally:
        _drop_tables(db_url)


def test_a_worker_that_waits_for_a_dead_ones_leases_says_why_then_takes_them(
    herd: tuple[TestOrigin, TestOrigin],
) -> None:
    index, api = herd
    db_url = POSTGRES_URL
    names = KILL_CRATES[:4]
    urls = ["--index-url", index.url + "/", "--api-url", api.url + "/"]
    _drop_tables(db_url)
    try:
        seeded = stagecrawl("crates", "seed", *names, "--db", db_url, *urls)
        assert seeded.returncode == 0, seeded.stderr
        api.rule("/api/*", stall=60)  # the first worker holds every crate, waiting on the API
        env = {"STAGECRAWL_HEARTBEAT_SECONDS": str(HEARTBEAT)}
        common = ["--db", db_url, *urls, "--api-rate", "50", "--lease-seconds", str(LEASE),
                  "--concurrency", "4"]  # fmt: skip
        # The first beats every 6 s: it looks alive for 19 s after its last heartbeat, longer
        # than the second takes to start even on a loaded machine (with 3 s, a start slower
        # than 10 s found it dead already and took its leases without waiting).
        first = spawn("crates", "collect", *common, env={"STAGECRAWL_HEARTBEAT_SECONDS": "6"})
        try:
            wait_for(lambda: sum(1 for _p, c in _events(db_url) if c) == len(names) * 3)
            first.send_signal(signal.SIGKILL)
            assert first.wait(30) == -signal.SIGKILL
            api.clear_rules()
            started = time.monotonic()
            second = stagecrawl("crates", "collect", *common, env=env, timeout=LEASE / 2)
            took = time.monotonic() - started
        finally:
            if first.poll() is None:
                first.kill()
                first.communicate()
        assert second.returncode == 0, second.stderr
        waiting = [line for line in second.stderr.splitlines() if "waiting:" in line]
        assert len(waiting) == 1, second.stderr  # said once, not once a poll
        assert re.search(
            rf"waiting: 12 rows leased by worker [^ ]+:{first.pid}:\w+ \(heartbeat \d+ s ago\);"
            r" reclaiming at (\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d UTC",
            waiting[0],
        ), waiting[0]
        assert any("took back 12 rows" in line for line in second.stderr.splitlines())
        assert {p for p, _c in _events(db_url)} == {1}
        assert took < LEASE / 2  # the heartbeat's word, not the 300 s lease
        print(f"\nthe second worker finished {took:.1f} s after the first was killed")
    finally:
        _drop_tables(db_url)
