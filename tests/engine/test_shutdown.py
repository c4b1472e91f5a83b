"""A phase that sends one exchange at a time outside a work loop (lock registration) gives an
exchange on the wire the grace period after a stop, then cancels it: never an unbounded wait."""

from __future__ import annotations

import asyncio

import pytest

from stagecrawl.engine.fetcher import Fetcher, FetchSettings
from stagecrawl.engine.ratelimit import Lane, Lanes
from stagecrawl.engine.shutdown import GracefulStop, Interrupted
from stagecrawl.testing.origin import TestOrigin


def unpaced(origin: TestOrigin) -> Fetcher:
    return Fetcher(FetchSettings(retries=0), Lanes([Lane("x", origin.url + "/", None)]))


async def _on_the_wire(origin: TestOrigin, seen: int) -> None:
    while len(origin.log) <= seen:  # the request reached the origin, which stalls it
        await asyncio.sleep(0.01)


async def test_an_exchange_on_the_wire_finishes_within_the_grace_period(
    origin: TestOrigin,
) -> None:
    origin.add("x.json", {"ok": True})
    origin.rule("/x.json", stall=0.5)
    stop = GracefulStop(grace_period=60)
    async with unpaced(origin) as fetcher:
        asked = asyncio.ensure_future(stop.within_grace(fetcher.get(origin.url + "/x.json")))
        await _on_the_wire(origin, 0)
        stop.request()
        result = await asked  # not cancelled by the stop: it had the grace period to finish
    assert result.status == 200


async def test_an_exchange_past_the_grace_period_is_cancelled(origin: TestOrigin) -> None:
    origin.add("x.json", {"ok": True})
    origin.rule("/x.json", stall=3)  # answers, but long after the grace period
    stop = GracefulStop(grace_period=0.1)
    async with unpaced(origin) as fetcher:
        asked = asyncio.ensure_future(stop.within_grace(fetcher.get(origin.url + "/x.json")))
        await _on_the_wire(origin, 0)
        stop.request()
        with pytest.raises(Interrupted, match="past the grace period"):
            await asked  # without the cancel it would return the answer, 3 s on
    assert len(origin.log) == 1
