"""The fetcher against the loopback origin: retries, Retry-After, cooldowns, typed errors."""

from __future__ import annotations

import asyncio
import email.utils
import gzip
import random
import time
from pathlib import Path

import pytest
from aiohttp import web

from stagecrawl import __version__
from stagecrawl.engine.clock import ScaledClock
from stagecrawl.engine.fetcher import Fetcher, FetchSettings, Validators, require_contact
from stagecrawl.engine.ratelimit import Budget, Lane, Lanes, LocalLimiter, Rate, WaitReason
from stagecrawl.engine.shutdown import GracefulStop, Unsent
from stagecrawl.errors import (
    BodyTooLarge,
    ConfigError,
    EmptyBody,
    HttpError,
    NotFound,
    RateLimited,
    TransientError,
)
from stagecrawl.testing.origin import TestOrigin


def make(settings: FetchSettings | None = None, speedup: float = 1000.0) -> Fetcher:
    return Fetcher(settings or FetchSettings(), clock=ScaledClock(speedup), rng=random.Random(7))


async def test_a_json_body_nested_too_deep_is_a_value_error_saying_what_came(
    origin: TestOrigin,
) -> None:
    """Callers turn a ValueError from `json()` into a failure of one unit; a RecursionError
    (JSON nested deeper than the decoder recurses) got past them and ended the run."""
    origin.add("deep.json", "[" * 100_000 + "]" * 100_000)
    async with make() as fetcher:
        result = await fetcher.get(origin.url + "/deep.json")
    with pytest.raises(ValueError, match=r"expected JSON from .*deep\.json"):
        result.json()


async def test_user_agent_carries_version_and_contact(origin: TestOrigin) -> None:
    origin.add("x.json", {"a": 1})
    async with make(FetchSettings(contact="ops@example.org")) as fetcher:
        result = await fetcher.get(origin.url + "/x.json")
    assert result.json() == {"a": 1}
    agent = origin.requests_to("/x.json")[0].headers["User-Agent"]
    assert agent == f"stagecrawl/{__version__} (+ops@example.org)"


def test_contact_required_refuses_with_reason() -> None:
    with pytest.raises(ConfigError, match=r"contact is required: crates\.io asks"):
        require_contact(None, "crates.io asks crawlers for one")
    with pytest.raises(ConfigError, match="a contact is required"):
        require_contact("  ", "crates.io asks crawlers for one")
    require_contact("me@example.org", "x")


async def test_retry_after_seconds_is_waited_in_full(origin: TestOrigin) -> None:
    origin.add("x.json", {"ok": True})
    origin.rule("/x.json", too_many=1, retry_after="45")
    fetcher = make(FetchSettings(max_retry_after=600))
    clock = fetcher.clock
    before = clock.monotonic()
    result = await fetcher.get(origin.url + "/x.json")
    waited = clock.monotonic() - before
    await fetcher.aclose()
    assert result.status == 200 and result.attempts == 2
    assert waited >= 45
    first, second = origin.requests_to("/x.json")
    assert (first.status, second.status) == (429, 200)
    assert second.time - first.time >= 45 / 1000  # the origin saw the wait too (scaled)


async def test_retry_after_http_date(origin: TestOrigin) -> None:
    origin.add("x.json", {"ok": True})
    fetcher = make()
    when = email.utils.formatdate(fetcher.clock.wall() + 30, usegmt=True)
    origin.rule("/x.json", too_many=1, retry_after=when)
    before = fetcher.clock.monotonic()
    await fetcher.get(origin.url + "/x.json")
    await fetcher.aclose()
    assert fetcher.clock.monotonic() - before >= 28  # HTTP-date has 1 s resolution


async def test_retry_after_above_maximum_raises_at_once(origin: TestOrigin) -> None:
    origin.add("x.json", {"ok": True})
    origin.rule("/x.json", too_many=5, retry_after="3600")
    fetcher = make(FetchSettings(max_retry_after=600), speedup=1.0)  # real time
    started = time.monotonic()
    with pytest.raises(RateLimited) as caught:
        await fetcher.get(origin.url + "/x.json")
    await fetcher.aclose()
    assert time.monotonic() - started < 60  # at once: not the hour it was asked to wait
    assert caught.value.retry_after == 3600 and caught.value.attempts == 1
    assert len(origin.requests_to("/x.json")) == 1  # no hammering


async def test_a_429_pauses_every_request_to_the_origin(origin: TestOrigin) -> None:
    origin.add("a.json", {"a": 1})
    origin.add("b.json", {"b": 1})
    origin.rule("/a.json", too_many=1, retry_after="30")
    fetcher = make(speedup=100.0)  # 30 s of cooldown = 0.3 s real
    task_a = asyncio.create_task(fetcher.get(origin.url + "/a.json"))
    while not await fetcher.limiter.cooldown_remaining(origin.url):  # the client read the 429
        await asyncio.sleep(0.002)
    rejected_at = origin.requests_to("/a.json")[0].time
    await fetcher.get(origin.url + "/b.json")
    await task_a
    await fetcher.aclose()
    b_arrival = origin.requests_to("/b.json")[0].time
    assert b_arrival - rejected_at >= 0.3 * 0.95  # /b never hit the origin during the cooldown


async def test_429_without_retry_after_backs_off_with_full_jitter(origin: TestOrigin) -> None:
    origin.add("x.json", {"ok": True})
    origin.rule("/x.json", too_many=2)
    fetcher = make(FetchSettings(backoff_base=1.0, backoff_cap=60.0))
    result = await fetcher.get(origin.url + "/x.json")
    await fetcher.aclose()
    assert result.attempts == 3
    assert fetcher.stats.rate_limited[fetcher.lane(origin.url).name] == 2


def test_full_jitter_spreads_over_the_whole_interval() -> None:
    fetcher = make(FetchSettings(backoff_base=1.0, backoff_cap=60.0))
    for n, bound in [(0, 1.0), (3, 8.0), (10, 60.0)]:
        samples = [fetcher.backoff(n) for _ in range(2000)]
        assert all(0 <= s <= bound for s in samples)
        # Decorrelated: the samples cover the interval, not two values.
        assert len({round(s, 3) for s in samples}) > 500
        assert min(samples) < bound * 0.1 and max(samples) > bound * 0.9
    asyncio.run(fetcher.aclose())


async def test_a_429_storm_waits_its_turn_then_gives_up_at_max_retry_after(
    origin: TestOrigin,
) -> None:
    origin.add("x.json", {"ok": True})
    origin.rule("/x.json", too_many=1000)
    lanes = Lanes([Lane("x", origin.url + "/", Rate(4.0))])
    clock = ScaledClock(1000.0)
    settings = FetchSettings(retries=3, backoff_base=1.0, max_retry_after=120)
    fetcher = Fetcher(settings, lanes, LocalLimiter(clock), clock, random.Random(3))
    started = clock.monotonic()
    with pytest.raises(RateLimited) as caught:
        await fetcher.get(origin.url + "/x.json")
    waited = clock.monotonic() - started
    await fetcher.aclose()
    # Not cut short by the retry count (3): a rate-limited request keeps its turn while the
    # lane slows down, for as long as max_retry_after allows, and no longer.
    assert caught.value.attempts > 4
    assert 60 <= waited <= 180
    assert fetcher.limiter.current_rate(lanes.named("x")) == pytest.approx(0.25)  # the floor


async def test_a_429_then_success_slows_the_lane_instead_of_failing(origin: TestOrigin) -> None:
    origin.add("x.json", {"ok": True})
    origin.rule("/x.json", too_many=6)
    lanes = Lanes([Lane("x", origin.url + "/", Rate(8.0))])
    clock = ScaledClock(500.0)
    fetcher = Fetcher(FetchSettings(retries=1), lanes, LocalLimiter(clock), clock)
    result = await fetcher.get(origin.url + "/x.json")
    await fetcher.aclose()
    assert result.status == 200 and result.attempts == 7  # 6 × 429 did not exhaust retries=1
    assert fetcher.limiter.current_rate(lanes.named("x")) < 8.0


async def test_a_trickling_body_is_cut_at_the_deadline(origin: TestOrigin) -> None:
    origin.rule("/slow", trickle=0.2, body=b"x" * 1000)  # 1 byte per 0.2 s: never a read timeout
    settings = FetchSettings(timeout=5.0, deadline=1.0, retries=0)
    started = time.monotonic()
    async with Fetcher(settings) as fetcher:
        with pytest.raises(TransientError) as caught:
            await fetcher.get(origin.url + "/slow")
    # cut at the deadline, not after the whole body (200 s at a byte per 0.2 s)
    assert time.monotonic() - started < 60
    assert "deadline of 1s passed" in caught.value.reason


async def test_a_download_is_bounded_by_its_own_deadline_not_the_exchange_deadline(
    origin: TestOrigin, tmp_path: Path
) -> None:
    """The exchange deadline is the session's: a dump that streams for longer than it (but
    within the download deadline) is downloaded whole, not cut like a trickling page."""
    origin.rule("/dump", trickle=0.1, body=b"x" * 12)  # ~1.2 s, past a 0.5 s deadline
    settings = FetchSettings(timeout=5.0, deadline=0.5, download_deadline=30.0, retries=0)
    async with Fetcher(settings) as fetcher:
        size = await fetcher.download(origin.url + "/dump", tmp_path / "dump", 1000)
        with pytest.raises(TransientError) as caught:
            await fetcher.get(origin.url + "/dump")
    assert size == 12 and (tmp_path / "dump").read_bytes() == b"x" * 12
    assert "deadline of 0.5s passed" in caught.value.reason


async def test_5xx_is_retried_then_succeeds(origin: TestOrigin) -> None:
    origin.add("x.json", {"ok": True})
    origin.rule("/x.json", fail_times=2, fail_status=502)
    async with make(FetchSettings(backoff_base=0.01)) as fetcher:
        result = await fetcher.get(origin.url + "/x.json")
    assert result.attempts == 3 and result.json() == {"ok": True}


async def test_exhausted_5xx_raises_transient_with_last_status(origin: TestOrigin) -> None:
    origin.add("x.json", {"ok": True})
    origin.rule("/x.json", fail_times=100, fail_status=500)
    async with make(FetchSettings(retries=3, backoff_base=0.01)) as fetcher:
        with pytest.raises(TransientError) as caught:
            await fetcher.get(origin.url + "/x.json")
    assert caught.value.attempts == 4 and caught.value.last_status == 500


async def test_stall_past_the_timeout_is_transient(origin: TestOrigin) -> None:
    origin.add("x.json", {"ok": True})
    origin.rule("/x.json", stall=2.0)
    async with make(FetchSettings(timeout=0.2, retries=1, backoff_base=0.01)) as fetcher:
        with pytest.raises(TransientError) as caught:
            await fetcher.get(origin.url + "/x.json")
    assert caught.value.attempts == 2 and "Timeout" in caught.value.reason


@pytest.mark.parametrize("status", [404, 410])
async def test_not_found_is_not_retried(origin: TestOrigin, status: int) -> None:
    origin.rule("/gone", status=status)
    async with make() as fetcher:
        with pytest.raises(NotFound):
            await fetcher.get(origin.url + "/gone")
    assert len(origin.requests_to("/gone")) == 1


async def test_other_4xx_is_an_http_error(origin: TestOrigin) -> None:
    origin.rule("/forbidden", status=403)
    async with make() as fetcher:
        with pytest.raises(HttpError) as caught:
            await fetcher.get(origin.url + "/forbidden")
    assert caught.value.status == 403
    assert len(origin.requests_to("/forbidden")) == 1


async def test_empty_body_is_an_error_not_data(origin: TestOrigin) -> None:
    origin.add("x.json", {"ok": True})
    origin.rule("/x.json", empty=True)
    async with make() as fetcher:
        with pytest.raises(EmptyBody):
            await fetcher.get(origin.url + "/x.json")
    assert len(origin.requests_to("/x.json")) == 1


async def test_truncated_body_is_transient(origin: TestOrigin) -> None:
    origin.rule("/x.json", truncate=True, body=b'{"k": "' + b"v" * 5000 + b'"}')
    async with make(FetchSettings(retries=2, backoff_base=0.01)) as fetcher:
        with pytest.raises(TransientError):
            await fetcher.get(origin.url + "/x.json")
    assert len(origin.requests_to("/x.json")) == 3


async def test_oversize_streamed_body_is_cut_off(origin: TestOrigin) -> None:
    origin.rule("/big", oversize=8 * 1024 * 1024, body=b"x")
    async with make(FetchSettings(max_body_bytes=1024 * 1024)) as fetcher:
        with pytest.raises(BodyTooLarge):
            await fetcher.get(origin.url + "/big")


async def test_body_limit_holds_after_decompression(origin: TestOrigin) -> None:
    bomb = gzip.compress(b"\0" * (4 * 1024 * 1024))  # ~4 KiB on the wire

    async def gzipped(request: web.Request) -> web.StreamResponse:
        return web.Response(body=bomb, headers={"Content-Encoding": "gzip"})

    origin.handle("/bomb", gzipped)
    async with make(FetchSettings(max_body_bytes=1024 * 1024)) as fetcher:
        with pytest.raises(BodyTooLarge):
            await fetcher.get(origin.url + "/bomb")


async def test_conditional_get_returns_not_modified(origin: TestOrigin) -> None:
    origin.add("x.json", {"v": 1})
    async with make() as fetcher:
        first = await fetcher.get(origin.url + "/x.json")
        again = await fetcher.get(origin.url + "/x.json", validators=first.validators)
        by_date = await fetcher.get(
            origin.url + "/x.json", validators=Validators(None, first.validators.last_modified)
        )
        origin.add("x.json", {"v": 2})
        changed = await fetcher.get(origin.url + "/x.json", validators=first.validators)
    assert first.validators.etag
    assert again.not_modified and again.content == b""
    assert by_date.not_modified
    assert not changed.not_modified and changed.json() == {"v": 2}
    sent = origin.requests_to("/x.json")[1].headers
    assert sent["If-None-Match"] == first.validators.etag


async def test_a_token_goes_only_to_its_lane_never_after_redirect(
    origin: TestOrigin, other_origin: TestOrigin
) -> None:
    other_origin.add("index/data.json", {"moved": True})
    origin.add("index/own.json", {"own": True})
    origin.add("api/x.json", {"api": True})
    origin.rule("/index/data.json", redirect_to=other_origin.url)
    # One host, two lanes: the index's token must never ride an API request.
    lanes = Lanes(
        [
            Lane("index", origin.url + "/index/", None, token="s3cret-token"),
            Lane("api", origin.url + "/", None),
        ]
    )
    async with Fetcher(FetchSettings(), lanes) as fetcher:
        own = await fetcher.get(origin.url + "/index/own.json", lane="index")
        api = await fetcher.get(origin.url + "/api/x.json", lane="api")
        moved = await fetcher.get(origin.url + "/index/data.json", lane="index")
    assert own.json() == {"own": True} and api.json() == {"api": True}
    assert moved.json() == {"moved": True} and moved.url.startswith(other_origin.url)
    sent = origin.requests_to("/index/own.json")[0].headers
    assert sent["Authorization"] == "Bearer s3cret-token"
    assert (
        origin.requests_to("/index/data.json")[0].headers["Authorization"] == "Bearer s3cret-token"
    )
    assert "Authorization" not in origin.requests_to("/api/x.json")[0].headers
    assert "Authorization" not in other_origin.requests_to("/index/data.json")[0].headers


@pytest.mark.parametrize(
    ("lane_rate", "budgets", "rule", "reason"),
    [
        (0.05, (), {}, WaitReason.LANE_RATE),  # our rate: one request per 20 s
        (50.0, (Budget(1, 600),), {}, WaitReason.BUDGET),  # our budget: one per 10 min
        (50.0, (), {"too_many": 1, "retry_after": "300"}, WaitReason.COOLDOWN),  # theirs
        (50.0, (), {"fail_times": 5, "fail_status": 500}, WaitReason.BACKOFF),
    ],
)
async def test_a_stop_ends_every_wait_at_once_and_nothing_more_is_sent(
    origin: TestOrigin,
    lane_rate: float,
    budgets: tuple[Budget, ...],
    rule: dict[str, object],
    reason: WaitReason,
) -> None:
    origin.add("a.json", {"a": 1})
    origin.add("b.json", {"b": 1})
    if rule:
        origin.rule("/b.json", **rule)  # type: ignore[arg-type]
    stop = GracefulStop()
    lanes = Lanes([Lane("api", origin.url + "/", Rate(lane_rate), budgets)])
    settings = FetchSettings(backoff_base=30.0, backoff_cap=30.0)
    async with Fetcher(settings, lanes, rng=random.Random(1), stop=stop) as fetcher:
        if reason is not WaitReason.COOLDOWN and reason is not WaitReason.BACKOFF:
            await fetcher.get(origin.url + "/a.json")  # takes the token / the budget
        waiting = asyncio.ensure_future(fetcher.get(origin.url + "/b.json"))
        await asyncio.sleep(0.3)
        assert not waiting.done()  # it waits (20 s, 10 min, 300 s, a backoff of up to 30 s)
        seen = len(origin.log)
        started = time.monotonic()
        stop.request()
        with pytest.raises(Unsent) as given_back:
            await waiting
        assert time.monotonic() - started < 5.0  # at once, not after the wait (≥ 20 s)
        assert given_back.value.reason is reason
        with pytest.raises(Unsent):  # and nothing new goes out after the stop
            await fetcher.get(origin.url + "/a.json")
    assert len(origin.log) == seen
