"""A unit's requests in flight together: the versions of one package are asked at once, at most
`UNIT_REQUESTS_IN_FLIGHT` at a time (the lanes pace them), so a lane is not idle while work it
could do is known; and a unit that fails sends nothing more."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

T = TypeVar("T")

UNIT_REQUESTS_IN_FLIGHT = 16  # one unit's: many units are in flight beside it


async def all_or_none(
    calls: Iterable[Callable[[], Awaitable[T]]], limit: int = UNIT_REQUESTS_IN_FLIGHT
) -> list[T]:
    """The results of all the calls, in order, at most `limit` running at once; or the first
    failure, with every other one cancelled and waited for (a stop, too, means nothing new
    goes out). Calls, not coroutines: one cancelled before its turn is never made."""
    gate = asyncio.Semaphore(limit)
    failed = asyncio.Event()

    async def gated(call: Callable[[], Awaitable[T]]) -> T:
        async with gate:
            if failed.is_set():  # given the gate by the one that failed, before the cancel
                raise asyncio.CancelledError
            try:
                return await call()
            except BaseException:
                failed.set()
                raise

    tasks = [asyncio.ensure_future(gated(call)) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
