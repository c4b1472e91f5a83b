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


# The checks read the limiter's own grant record (`Limiter.grants`: when it granted each token,
# on its own timeline), never a timestamp the test takes after `acquire` returns: on a loaded
# 2-core machine the event loop resumes a waiter tens of milliseconds late, which would squeeze
# a gap between two such stamps below the interval the limiter kept. The bounds are the
# limiter's exact arithmetic (margin 0) less 1 virtual millisecond for float rounding (Redis
# keeps its time in scaled milliseconds). Where a check needs an upper bound it is one pacing
# interval or more, not a share of one.
EPS = 0.001


def _violations(grants: list[float], interval: float, burst: int) -> list[tuple[int, int]]:
    """The pairs of grants that break the token bucket's promise (GCRA's conformance): any
    `n` consecutive grants span at least `(n - burst) × interval`. Two back-to-back grants
    need not be a whole interval apart once a burst is allowed: a waiter the event loop woke
    late does not push the bucket's schedule back, so the next one may follow it closer."""
    return [
        (i, j)
        for i, j in itertools.combinations(range(len(grants)), 2)
        if grants[j] - grants[i] < (j - i + 1 - burst) * interval - EPS
    ]


async def _grants(limiter: Limiter, lane: Lane, n: int) -> list[float]:
    """`n` concurrent acquires on `lane`; the times the limiter granted them, in order."""
    await asyncio.gather(*(limiter.acquire(lane, lane.origin) for _ in range(n)))
    grants = limiter.grants(lane)
    assert len(grants) == n
    return sorted(grants)


def _gaps(grants: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(grants)]


async def test_burst_allows_back_to_back_then_spaces(make_limiter: LimiterFactory) -> None:
    clock = ScaledClock(2.0)
    limiter = make_limiter(clock)
    lane = Lane("x", HOST + "/", Rate(1, burst=5))
    grants = await _grants(limiter, lane, 8)
    # The burst goes through at once: five grants within one interval (spaced, they would
    # span four)...
    assert grants[4] - grants[0] < 1.0
    # ...then one a second: the bucket refills one token per interval.
    assert grants[5] - grants[0] >= 1.0 - EPS
    assert not _violations(grants, 1.0, burst=5), _gaps(grants)


async def test_burst_1_is_the_default_and_never_sends_two_at_once(
    make_limiter: LimiterFactory,
) -> None:
    clock = ScaledClock(4.0)
    limiter = make_limiter(clock)
    grants = await _grants(limiter, Lane("x", HOST + "/", Rate(2)), 6)
    assert all(gap >= 0.5 - EPS for gap in _gaps(grants)), _gaps(grants)


async def test_after_a_cooldown_waiters_resume_one_interval_apart(
    make_limiter: LimiterFactory,
) -> None:
    clock = ScaledClock(4.0)
    limiter = make_limiter(clock)
    lane = Lane("x", HOST + "/", Rate(1, burst=5))  # even with a burst allowed
    before = await limiter.now()
    await limiter.pause(HOST, 10)
    assert 9 <= await limiter.cooldown_remaining(HOST) <= 10
    grants = await _grants(limiter, lane, 6)
    # Nobody went during the cooldown, and no herd after it: the bucket was empty at its end,
    # so the k-th waiter goes k intervals after it ends (the burst does not apply).
    for k, granted in enumerate(grants):
        assert granted - before >= 10 + k * 1.0 - EPS, (k, grants)


async def test_a_cooldown_covers_every_lane_of_the_host_only(
    make_limiter: LimiterFactory,
) -> None:
    clock = ScaledClock(10.0)
    limiter = make_limiter(clock)
    index, api = Lane("index", HOST + "/index/", Rate(10)), Lane("api", HOST + "/", Rate(10))
    elsewhere = Lane("other", "http://other/", Rate(10))
    before = await limiter.now()
    await limiter.pause(HOST, 5)
    await limiter.acquire(elsewhere, elsewhere.origin)
    await limiter.acquire(index, HOST)
    # The other host went before the cooldown ended; the host's other lane waited it out.
    assert limiter.grants(elsewhere)[0] < limiter.grants(index)[0]
    assert limiter.grants(index)[0] - before >= 5 - EPS
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
    grants = await _grants(limiter, lane, 4)
    assert all(gap >= 0.5 - EPS for gap in _gaps(grants)), _gaps(grants)  # paced at 2/s
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
    clock = ScaledClock(5.0)
    limiter = make_limiter(clock)
    lane = Lane("api", HOST + "/", Rate(10.0), budgets=(Budget(20, 10.0),))
    grants = await _grants(limiter, lane, 30)
    # 20 go at the lane's 10/s (1.9 s), not held by the budget: within one window...
    assert grants[19] - grants[0] < 10.0
    # ...the 21st waits until the first leaves the window, and no window of 10 s holds more
    # than 20 grants.
    for i in range(len(grants) - 20):
        assert grants[i + 20] - grants[i] >= 10.0 - EPS, (i, grants)
    assert all(gap >= 0.1 - EPS for gap in _gaps(grants)), _gaps(grants)


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
    # 2 s of cooldown = 1 s real; 1 request/s = one per 0.5 s real
    scale = 2.0
    interval = 1.0 / scale
    clock = ScaledClock(scale)
    lane = Lane("x", origin.url + "/", Rate(1.0, burst=4))
    limiter = LocalLimiter(clock)
    async with Fetcher(FetchSettings(), Lanes([lane]), limiter, clock) as fetcher:
        first = asyncio.create_task(fetcher.get(origin.url + "/x.json"))
        while True:  # until the 429 came back
            seen = await limiter.now()
            remaining = await limiter.cooldown_remaining(origin.url)
            if remaining:
                break
            await asyncio.sleep(0.001)
        await asyncio.gather(first, *(fetcher.get(origin.url + "/x.json") for _ in range(6)))
    log = origin.requests_to("/x.json")
    assert log[0].status == 429 and all(r.status == 200 for r in log[1:])
    # On the origin's clock: the cooldown began after the 429 was sent, and the k-th request
    # after it left no sooner than k intervals after its end (the bucket was empty then).
    # Lower bounds only: an arrival the loaded machine delayed is later still.
    times = sorted(r.time for r in log[1:])
    for k, arrived in enumerate(times):
        assert arrived - log[0].time >= (2 + k) * interval * 0.999, (k, times, log[0].time)
    # And as the limiter granted them, on its own timeline: the same, from the cooldown's end
    # (no sooner than `seen + remaining`).
    grants = sorted(limiter.grants(lane))[1:]  # the first went before the 429
    assert len(grants) == 7
    for k, granted in enumerate(grants):
        assert granted - (seen + remaining) >= k * 1.0 - EPS, (k, grants, seen + remaining)
