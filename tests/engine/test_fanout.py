"""A unit's requests in flight together: bounded, in order, and nothing more sent once one
fails."""

from __future__ import annotations

import asyncio
import warnings
from functools import partial

import pytest

from stagecrawl.engine.fanout import all_or_none


async def test_results_in_order_at_most_limit_at_once() -> None:
    running, most = [0], [0]

    async def call(n: int) -> int:
        running[0] += 1
        most[0] = max(most[0], running[0])
        await asyncio.sleep(0.01 * (n % 3))
        running[0] -= 1
        return n

    assert await all_or_none([partial(call, n) for n in range(20)], limit=4) == list(range(20))
    assert most[0] == 4


async def test_a_failure_cancels_the_rest_and_calls_not_begun_are_never_made() -> None:
    made: list[int] = []
    finished: list[int] = []

    async def call(n: int) -> int:
        made.append(n)
        if n == 1:
            raise ConnectionError("503")
        await asyncio.sleep(1)
        finished.append(n)
        return n

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a coroutine made and never awaited would warn
        with pytest.raises(ConnectionError):
            await all_or_none([partial(call, n) for n in range(10)], limit=3)
    assert made == [0, 1] and finished == []  # nothing after the failure was sent
