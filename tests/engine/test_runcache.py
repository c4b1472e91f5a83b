"""The run cache between a crawl's seeder and its collector: one request for askers at once,
answers kept within a bound in bytes, failures never kept."""

from __future__ import annotations

import asyncio

from stagecrawl.engine.runcache import RunCache


class Origin:
    """Counts what is asked of it; answers `size` bytes, or fails while `failing`."""

    def __init__(self, size: int = 10) -> None:
        self.asked: list[str] = []
        self.size = size
        self.failing = False
        self.gate = asyncio.Event()
        self.gate.set()

    def make(self, key: str):  # type: ignore[no-untyped-def]
        async def answer() -> bytes:
            self.asked.append(key)
            await self.gate.wait()
            if self.failing:
                raise ConnectionError(f"{key}: 503")
            return b"x" * self.size

        return answer


async def test_askers_at_once_share_one_request() -> None:
    origin, cache = Origin(), RunCache[bytes](weigh=len)
    origin.gate.clear()
    both = asyncio.gather(cache.get("a", origin.make("a")), cache.get("a", origin.make("a")))
    await asyncio.sleep(0)
    origin.gate.set()
    assert await both == [b"x" * 10, b"x" * 10]
    assert await cache.get("a", origin.make("a")) == b"x" * 10  # kept
    assert origin.asked == ["a"]


async def test_a_failure_is_not_kept_the_next_asker_asks_again() -> None:
    """A seeder's 503 must not become the collector's answer (nor a later retry's) without a
    request: the askers of that moment share it, the next one asks."""
    origin, cache = Origin(), RunCache[bytes](weigh=len)
    origin.failing = True
    origin.gate.clear()
    both = asyncio.gather(
        cache.get("a", origin.make("a")), cache.get("a", origin.make("a")), return_exceptions=True
    )
    await asyncio.sleep(0)
    origin.gate.set()
    assert [type(e) for e in await both] == [ConnectionError, ConnectionError]
    assert origin.asked == ["a"] and len(cache) == 0
    origin.failing = False
    assert await cache.get("a", origin.make("a")) == b"x" * 10
    assert origin.asked == ["a", "a"]


async def test_memory_is_bounded_by_bytes_and_entries_oldest_first() -> None:
    origin, cache = Origin(size=100), RunCache[bytes](size=50, max_bytes=350, weigh=len)
    for key in "abcde":
        await cache.get(key, origin.make(key))
        await asyncio.sleep(0)  # the weighing callback
    assert cache.bytes <= 350 and len(cache) == 3  # a and b dropped
    await cache.get("e", origin.make("e"))
    await cache.get("a", origin.make("a"))
    assert origin.asked == [*"abcde", "a"]
    small = RunCache[bytes](size=2, weigh=len)
    for key in "xyz":
        await small.get(key, origin.make(key))
    assert len(small) == 2


async def test_put_and_forget() -> None:
    """A refresh's changed answer is kept for the collect that follows; forgotten once the
    rows are built."""
    origin, cache = Origin(), RunCache[bytes](weigh=len)
    cache.put("a", b"changed")
    await asyncio.sleep(0)
    assert cache.bytes == len(b"changed")
    assert await cache.get("a", origin.make("a")) == b"changed" and origin.asked == []
    cache.forget("a")
    assert len(cache) == 0 and cache.bytes == 0
    assert await cache.get("a", origin.make("a")) == b"x" * 10 and origin.asked == ["a"]


async def test_an_answer_in_flight_is_never_dropped() -> None:
    origin, cache = Origin(), RunCache[bytes](size=1, weigh=len)
    origin.gate.clear()
    first = asyncio.ensure_future(cache.get("a", origin.make("a")))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(cache.get("b", origin.make("b")))
    await asyncio.sleep(0)
    assert len(cache) == 2  # over the bound, but "a" is still being asked
    cache.forget("a")  # not finished: kept for its askers
    origin.gate.set()
    await asyncio.gather(first, second)
    assert origin.asked == ["a", "b"]
    await cache.get("c", origin.make("c"))  # finished ones now go, oldest first
    assert len(cache) == 1
