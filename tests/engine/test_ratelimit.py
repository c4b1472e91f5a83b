"""Per-origin token buckets: what the origin sees, whatever the concurrency."""

from __future__ import annotations

import asyncio
import time

import pytest

from stagecrawl.engine.clock import ScaledClock
from stagecrawl.engine.fetcher import Fetcher, FetchSettings
from stagecrawl.engine.ratelimit import LocalLimiter, Rate, origin_of
from stagecrawl.testing.origin import TestOrigin


def test_origin_of_normalises_scheme_host_and_default_ports() -> None:
    assert origin_of("HTTPS://Index.Crates.io:443/se/rd/serde") == "https://index.crates.io"
    assert origin_of("http://127.0.0.1:8080/x?y=1") == "http://127.0.0.1:8080"


def test_rate_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        Rate(0)
    with pytest.raises(ValueError):
        Rate(1, burst=0)


async def test_origin_never_sees_more_than_the_rate_at_concurrency_32(
    origin: TestOrigin,
) -> None:
    origin.add("x.json", {"ok": True})
    # The origin itself enforces the same limit: any excess would show up as a 429.
    origin.rule("/x.json", rate_limit=20, rate_window=1.0)
    limiter = LocalLimiter({origin.url: Rate(20)})
    fetcher = Fetcher(FetchSettings(retries=0), limiter=limiter)
    sem = asyncio.Semaphore(32)

    async def one() -> None:
        async with sem:
            await fetcher.get(origin.url + "/x.json")

    started = time.monotonic()
    await asyncio.gather(*(one() for _ in range(50)))
    elapsed = time.monotonic() - started
    await fetcher.aclose()
    log = origin.requests_to("/x.json")
    assert len(log) == 50 and all(r.status == 200 for r in log)
    assert origin.max_in_window("/x.json", 1.0) <= 20
    assert elapsed >= 49 / 20


async def test_burst_allows_back_to_back_then_spaces() -> None:
    clock = ScaledClock(100.0)
    limiter = LocalLimiter({"http://h": Rate(1, burst=5)}, clock=clock, margin=0.0)
    start = clock.monotonic()
    stamps = []
    for _ in range(8):
        await limiter.acquire("http://h")
        stamps.append(clock.monotonic() - start)
    assert all(s < 0.5 for s in stamps[:5])  # the burst goes through at once
    assert stamps[5] >= 0.9 and stamps[7] >= 2.9  # then one a second


async def test_cooldown_holds_every_waiter_and_unlimited_origins_pass() -> None:
    clock = ScaledClock(100.0)
    limiter = LocalLimiter(clock=clock)
    await limiter.pause("http://h", 10)
    assert 9 <= await limiter.cooldown_remaining("http://h") <= 10
    start = clock.monotonic()
    await asyncio.gather(*(limiter.acquire("http://h") for _ in range(5)))
    assert clock.monotonic() - start >= 9.9
    other = clock.monotonic()
    await limiter.acquire("http://elsewhere")
    assert clock.monotonic() - other < 1
