"""Pacing by lane: what the origin sees, whatever the concurrency, for the local and the Redis
limiter alike. Long waits run on a scaled clock (a shared virtual timeline)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable

import pytest

from stagecrawl.engine.clock import ScaledClock
from stagecrawl.engine.fetcher import Fetcher, FetchSettings
from stagecrawl.engine.ratelimit import (
    Adaptive,
    Budget,
    Lane,
    Lanes,
    Limiter,
    LocalLimiter,
    Rate,
    WaitTooLong,
    origin_of,
)
from stagecrawl.engine.redis_limiter import RedisLimiter
from stagecrawl.testing.origin import TestOrigin
from tests.services import REDIS_URL

HOST = "http://h"


def test_origin_of_normalises_scheme_host_and_default_ports() -> None:
    assert origin_of("HTTPS://Index.Crates.io:443/se/rd/serde") == "https://index.crates.io"
    assert origin_of("http://127.0.0.1:8080/x?y=1") == "http://127.0.0.1:8080"


def test_rate_and_budget_reject_nonsense() -> None:
    with pytest.raises(ValueError):
        Rate(0)
    with pytest.raises(ValueError):
        Rate(float("nan"))
    with pytest.raises(ValueError):
        Rate(1, burst=0)
    assert Budget.parse("600/600s") == Budget(600, 600.0)
    assert Budget.parse("600/10m") == Budget(600, 600.0)
    assert Budget.parse(" 5000 / 1h ") == Budget(5000, 3600.0)
    for bad in ("600", "0/10s", "a/b", "600/0s", "-1/10s"):
        with pytest.raises(ValueError):
            Budget.parse(bad)


def test_a_url_belongs_to_the_longest_matching_lane_even_on_one_host() -> None:
    lanes = Lanes(
        [Lane("api", "http://reg:8080/"), Lane("index", "http://reg:8080/index/")],
        default=Rate(3),
    )
    assert lanes.for_url("http://reg:8080/index/se/rd/serde").name == "index"
    assert lanes.for_url("http://REG:8080/api/v1/crates/serde").name == "api"
    other = lanes.for_url("http://elsewhere/x")
    assert other.name == "elsewhere" and other.rate == Rate(3)
    assert lanes.for_url("http://elsewhere/y") is other


def test_the_lane_of_a_url_does_not_depend_on_what_was_looked_up_before() -> None:
    """Lookups are cached by the URL's directory as written: a query or fragment holding a
    slash, another spelling of the host or port, or a URL without a path must still land on
    the lane a fresh lookup gives."""

    def fresh() -> Lanes:
        return Lanes(
            [
                Lane("api", "http://reg:8080/api/"),
                Lane("index", "http://reg:8080/index/"),
                Lane("web", "https://www.example.org/"),
            ],
            default=Rate(3),
        )

    urls = [
        "http://reg:8080/api/v1/crates?next=/index/x",
        "http://reg:8080/index/se/rd/serde",
        "http://reg:8080/index?q=/api/x",
        "http://reg:8080/apiary/x",
        "http://REG:8080/Api/x",
        "HTTP://reg:8080/api/x#/index/",
        "http://reg:8080",
        "http://reg:8080?x=/api/",
        "http://reg:8080/",
        "https://www.example.org:443/a/b/c?d=/e",
        "https://WWW.example.org/a/",
        "https://www.example.org:8443/a/",
        "http://www.example.org/a/",
        "http://user:pw@reg:8080/api/x",
        "http://elsewhere/x/y?z=/",
        "http://elsewhere",
    ]
    expected = {url: fresh().for_url(url).name for url in urls}
    assert expected["http://reg:8080/api/v1/crates?next=/index/x"] == "api"
    assert expected["http://reg:8080/index?q=/api/x"] != "api"
    assert expected["https://www.example.org:8443/a/"] != "web"
    shared = fresh()
    for url in [*urls, *reversed(urls), *urls]:
        assert shared.for_url(url).name == expected[url], url


# -- one set of behaviours, two limiters ----------------------------------------------------
LimiterFactory = Callable[[ScaledClock], Limiter]


@pytest.fixture(params=["local", "redis"])
async def make_limiter(request: pytest.FixtureRequest) -> AsyncIterator[LimiterFactory]:
    made: list[Limiter] = []

    def factory(clock: ScaledClock) -> Limiter:
        if request.param == "local":
            limiter: Limiter = LocalLimiter(clock, margin=0.0, adaptive=Adaptive(6.0, 0.25))
        else:
            limiter = RedisLimiter(
                REDIS_URL,
                clock,
                margin=0.0,
                adaptive=Adaptive(6.0, 0.25),
                prefix=f"stagecrawl-test:{uuid.uuid4().hex}:",
                time_scale=clock.speedup,
            )
        made.append(limiter)
        return limiter

    yield factory
    for limiter in made:
        await limiter.aclose()


# Scales are chosen so that 10% of an interval is tens of real milliseconds: the timing
# assertions hold on a loaded 2-core machine (Redis round trips included).


async def _stamps(limiter: Limiter, lane: Lane, clock: ScaledClock, n: int) -> list[float]:
    start = clock.monotonic()
    stamps: list[float] = []

    async def one() -> None:
        await limiter.acquire(lane, lane.origin)
        stamps.append(clock.monotonic() - start)

    await asyncio.gather(*(one() for _ in range(n)))
    return sorted(stamps)


async def test_burst_allows_back_to_back_then_spaces(make_limiter: LimiterFactory) -> None:
    clock = ScaledClock(2.0)
    limiter = make_limiter(clock)
    lane = Lane("x", HOST + "/", Rate(1, burst=5))
    stamps = await _stamps(limiter, lane, clock, 8)
    assert all(s < 0.5 for s in stamps[:5])  # the burst goes through at once
    assert stamps[5] >= 0.9 and stamps[7] >= 2.9  # then one a second


async def test_burst_1_is_the_default_and_never_sends_two_at_once(
    make_limiter: LimiterFactory,
) -> None:
    clock = ScaledClock(4.0)
    limiter = make_limiter(clock)
    stamps = await _stamps(limiter, Lane("x", HOST + "/", Rate(2)), clock, 6)
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert all(gap >= 0.4 for gap in gaps), gaps


async def test_after_a_cooldown_waiters_resume_one_interval_apart(
    make_limiter: LimiterFactory,
) -> None:
    clock = ScaledClock(4.0)
    limiter = make_limiter(clock)
    lane = Lane("x", HOST + "/", Rate(1, burst=5))  # even with a burst allowed
    await limiter.pause(HOST, 10)
    assert 9 <= await limiter.cooldown_remaining(HOST) <= 10
    stamps = await _stamps(limiter, lane, clock, 6)
    assert stamps[0] >= 9.9  # nobody went during the cooldown
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert all(gap >= 0.85 for gap in gaps), gaps  # no herd: the bucket was empty at its end


async def test_a_cooldown_covers_every_lane_of_the_host_only(
    make_limiter: LimiterFactory,
) -> None:
    clock = ScaledClock(10.0)
    limiter = make_limiter(clock)
    index, api = Lane("index", HOST + "/index/", Rate(10)), Lane("api", HOST + "/", Rate(10))
    elsewhere = Lane("other", "http://other/", Rate(10))
    await limiter.pause(HOST, 5)
    start = clock.monotonic()
    await limiter.acquire(elsewhere, elsewhere.origin)
    assert clock.monotonic() - start < 1
    await limiter.acquire(index, HOST)
    assert clock.monotonic() - start >= 4.9
    with pytest.raises(WaitTooLong):  # a wait past what the caller may spend fails at once
        await limiter.pause(HOST, 700)
        await limiter.acquire(api, HOST, max_wait=600)


async def test_a_429_halves_the_lane_once_per_burst_then_it_recovers(
    make_limiter: LimiterFactory, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ScaledClock(5.0)
    limiter = make_limiter(clock)
    lane = Lane("api", HOST + "/", Rate(4.0), min_rate=0.5)
    caplog.set_level(logging.WARNING, "stagecrawl.pacing")
    assert await limiter.slow_down(lane) == 2.0
    assert await limiter.slow_down(lane) is None  # same burst of 429s: not halved again
    assert limiter.current_rate(lane) == 2.0
    assert [r.getMessage() for r in caplog.records] == ["api lane slowed to 2/s after 429"]
    stamps = await _stamps(limiter, lane, clock, 4)
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert all(gap >= 0.4 for gap in gaps), gaps  # paced at the new 2/s
    for _ in range(5):  # a storm drives it to the floor, never below
        await clock.sleep(1.1)
        await limiter.slow_down(lane)
    assert limiter.current_rate(lane) == 0.5
    # a quiet period (6 virtual s here) later it climbs by a quarter of the nominal rate
    await clock.sleep(6.2)
    await limiter.acquire(lane, HOST)
    assert limiter.current_rate(lane) == pytest.approx(1.5)
    await clock.sleep(18.5)
    await limiter.acquire(lane, HOST)
    assert limiter.current_rate(lane) == pytest.approx(4.0)  # back to nominal, not beyond
    assert "api lane back to 4/s" in caplog.records[-1].getMessage()


async def test_a_budget_window_is_exact(make_limiter: LimiterFactory) -> None:
    # crates.io's API: 1/s and about 600 per 10 minutes. At a higher rate, the window binds.
    clock = ScaledClock(10.0)
    limiter = make_limiter(clock)
    lane = Lane("api", HOST + "/", Rate(10.0), budgets=(Budget(20, 10.0),))
    stamps = await _stamps(limiter, lane, clock, 30)
    assert stamps[19] < 5.0  # 20 go at 10/s
    assert stamps[20] >= 9.8  # the 21st waits until the first leaves the window
    # and no window of 10 s holds more than 20 grants (client-side stamps: 0.2 s of jitter)
    for i in range(len(stamps) - 20):
        assert stamps[i + 20] - stamps[i] >= 9.8


# -- end to end: the fetcher against a strict origin --------------------------------------
async def test_the_origin_never_sees_more_than_the_rate_at_concurrency_32(
    origin: TestOrigin,
) -> None:
    origin.add("x.json", {"ok": True})
    # The origin itself enforces the same limit: any excess would show up as a 429.
    origin.rule("/x.json", bucket_rate=20, bucket_burst=2)
    lanes = Lanes([Lane("x", origin.url + "/", Rate(20))])
    fetcher = Fetcher(FetchSettings(retries=0), lanes)
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
    assert elapsed >= 49 / 20


async def test_after_retry_after_the_origin_sees_waiters_one_interval_apart(
    origin: TestOrigin,
) -> None:
    origin.add("x.json", {"ok": True})
    origin.rule("/x.json", too_many=1, retry_after="2")
    # 2 s of cooldown = 1 s; 1 request/s = one per 0.5 s: wide enough that a loaded
    # machine's scheduling jitter (30 ms seen with two busy loops on 2 cores) stays inside
    # the 10% the assertion allows
    scale = 2.0
    interval = 1.0 / scale
    clock = ScaledClock(scale)
    lanes = Lanes([Lane("x", origin.url + "/", Rate(1.0, burst=4))])
    limiter = LocalLimiter(clock)
    async with Fetcher(FetchSettings(), lanes, limiter, clock) as fetcher:
        first = asyncio.create_task(fetcher.get(origin.url + "/x.json"))
        while not await limiter.cooldown_remaining(origin.url):  # the 429 came back
            await asyncio.sleep(0.001)
        await asyncio.gather(first, *(fetcher.get(origin.url + "/x.json") for _ in range(6)))
    log = origin.requests_to("/x.json")
    assert log[0].status == 429 and all(r.status == 200 for r in log[1:])
    times = sorted(r.time for r in log[1:])
    assert times[0] - log[0].time >= 0.96 * 2 * interval  # nobody during the cooldown
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # one interval apart, on the origin's clock
    assert all(gap >= 0.9 * interval for gap in gaps), gaps
