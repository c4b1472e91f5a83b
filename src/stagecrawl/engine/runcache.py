"""A run's answers, kept between the two parts of a crawl that ask for them: its seeder reads a
unit's listing (and what existence needs) and its collector, a moment later, the same answers.

Written here, not taken from a caching library, because it holds futures, not values: two
askers of one key at once (the seeder and the collector beside it) share one request. Its bound
is in bytes as well as entries, each answer weighed by its caller: a unit of 3,000 versions
weighs a hundred small ones, and a count alone let a registry's memory grow with its units'
sizes. Failures are not kept: whoever asks after one (a retry later in the run) asks again.
"""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")

RUN_CACHE_BYTES = 32 * 1024 * 1024
RUN_CACHE_ENTRIES = 4096
# Parsed answers weigh about 8 × their raw bytes (an index file of 30 versions, 8 KB raw, is
# ~64 KB as Python objects): what a caller weighing by the raw size multiplies it by.
PARSED_WEIGHT = 8


class RunCache(Generic[T]):
    """Futures by key, so concurrent askers share one request. Finished entries are dropped
    oldest first past `max_bytes` (each weighed by `weigh` when it finishes) or `size`
    entries, and on `forget` once the caller is done with one, so memory is bounded by these
    settings, not by the size of the crawl."""

    def __init__(
        self,
        size: int = RUN_CACHE_ENTRIES,
        max_bytes: int = RUN_CACHE_BYTES,
        weigh: Callable[[T], int] = lambda _value: 0,
    ) -> None:
        self.size = size
        self.max_bytes = max_bytes
        self.weigh = weigh
        self.bytes = 0
        self._entries: OrderedDict[str, asyncio.Future[T]] = OrderedDict()
        self._weights: dict[asyncio.Future[T], int] = {}

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: str, make: Callable[[], Awaitable[T]]) -> T:
        future = self._entries.get(key)
        if future is None:
            future = asyncio.ensure_future(make())
            future.add_done_callback(functools.partial(self._settled, key))
            self._entries[key] = future
            self._evict()
        return await asyncio.shield(future)

    def put(self, key: str, value: T) -> None:
        """An answer got otherwise (a conditional request that found a change), kept for the
        run as if it had been asked here."""
        self.forget(key)
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        future.add_done_callback(functools.partial(self._settled, key))
        self._entries[key] = future
        future.set_result(value)  # weighed when its callback runs, as any answer

    def forget(self, key: str) -> None:
        """The caller is done with `key` (its rows are built): drop it if it is finished."""
        future = self._entries.get(key)
        if future is not None and future.done():
            del self._entries[key]
            self.bytes -= self._weights.pop(future, 0)

    def _settled(self, key: str, future: asyncio.Future[T]) -> None:
        mine = self._entries.get(key) is future  # (not evicted or forgotten meanwhile)
        # The cache owns its futures: one whose askers were all cancelled (a stop past the
        # grace period) must not end in "exception was never retrieved" on stderr.
        if future.cancelled() or future.exception() is not None:
            if mine:  # a failure is the askers' of that moment, not the run's answer
                del self._entries[key]
            return
        weight = self.weigh(future.result())
        if weight and mine:
            self._weights[future] = weight
            self.bytes += weight
            self._evict()

    def _evict(self) -> None:
        while len(self._entries) > self.size or self.bytes > self.max_bytes:
            oldest_key, oldest = next(iter(self._entries.items()))
            if not oldest.done():
                break
            del self._entries[oldest_key]
            self.bytes -= self._weights.pop(oldest, 0)
