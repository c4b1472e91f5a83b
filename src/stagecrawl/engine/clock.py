"""Time as the engine sees it, injectable so that tests of long waits run in milliseconds."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a monotonic scale; only differences are meaningful."""

    def wall(self) -> float:
        """Seconds since the epoch (for HTTP-date Retry-After)."""

    async def sleep(self, seconds: float) -> None: ...


class RealClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class ScaledClock:
    """Virtual time that runs `speedup` times faster than real time.

    Every waiter shares the same timeline (unlike a clock that jumps forward on each sleep), so
    concurrent tasks, cooldowns and token buckets keep their real relations: a 45 s Retry-After
    takes 45 ms of real time with speedup=1000, and the others wait for the same 45 virtual s.
    """

    def __init__(self, speedup: float, start_wall: float | None = None) -> None:
        self.speedup = speedup
        self._real_start = time.monotonic()
        self._wall_start = time.time() if start_wall is None else start_wall
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return (time.monotonic() - self._real_start) * self.speedup

    def wall(self) -> float:
        return self._wall_start + self.monotonic()

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        await asyncio.sleep(max(0.0, seconds) / self.speedup)
