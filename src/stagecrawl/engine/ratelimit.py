"""Per-origin rate limits and the shared 429 cooldown.

Hand-written on purpose: aiolimiter and pyrate-limiter give a token bucket but no origin-wide
cooldown that a 429 can extend for every waiter at once, and neither takes an injectable clock.
The algorithm is GCRA (the "virtual scheduling" form of a token bucket): each grant pushes a
theoretical arrival time forward by one interval, so grants are spaced evenly and the origin never
sees more than `burst + rate * t` requests in any window of t seconds. The same two numbers per
origin (next arrival time, cooldown end) fit in a Redis hash, which is what a shared limiter for
several processes stores (see `OriginLimiter`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from stagecrawl.engine.clock import Clock, RealClock


@dataclass(frozen=True)
class Rate:
    """`per_second` requests per second on average, at most `burst` back to back."""

    per_second: float
    burst: int = 1

    def __post_init__(self) -> None:
        if self.per_second <= 0:
            raise ValueError("rate must be positive")
        if self.burst < 1:
            raise ValueError("burst must be at least 1")

    @property
    def interval(self) -> float:
        return 1.0 / self.per_second


def origin_of(url: str) -> str:
    """`scheme://host[:port]`, lowercased, default ports dropped: the unit of politeness."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    port = parts.port
    if port is None or (scheme, port) in {("http", 80), ("https", 443)}:
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


class OriginLimiter(Protocol):
    """What the fetcher needs from a limiter; a Redis-backed one implements the same calls."""

    async def acquire(self, origin: str) -> None:
        """Wait until the origin is out of cooldown and a token is free, then take it."""

    async def pause(self, origin: str, seconds: float) -> None:
        """Put the whole origin in cooldown for at least `seconds` from now."""

    async def cooldown_remaining(self, origin: str) -> float: ...


class LocalLimiter:
    """In-process limiter: one GCRA bucket and one cooldown per origin."""

    def __init__(
        self,
        rates: dict[str, Rate] | None = None,
        default: Rate | None = None,
        clock: Clock | None = None,
        margin: float = 0.02,
    ) -> None:
        # Grants are spaced 2% wider than the nominal interval so that network jitter between
        # us and the origin cannot squeeze rate+1 arrivals into one of the origin's windows.
        self.margin = margin
        self._rates = {origin_of(k) if "://" in k else k: v for k, v in (rates or {}).items()}
        self._default = default
        self._clock = clock or RealClock()
        self._next_arrival: dict[str, float] = defaultdict(lambda: float("-inf"))
        self._cooldown_until: dict[str, float] = defaultdict(lambda: float("-inf"))

    def rate_for(self, origin: str) -> Rate | None:
        return self._rates.get(origin, self._default)

    async def acquire(self, origin: str) -> None:
        clock = self._clock
        while True:
            now = clock.monotonic()
            cooldown = self._cooldown_until[origin] - now
            if cooldown > 0:
                await clock.sleep(cooldown)
                continue
            rate = self.rate_for(origin)
            if rate is None:
                break
            interval = rate.interval * (1 + self.margin)
            tat = max(self._next_arrival[origin], now)
            allowed_at = tat - (rate.burst - 1) * interval
            if now >= allowed_at:
                # No await between the check and the update: the event loop cannot interleave
                # another acquire here, so two tasks never take the same slot.
                self._next_arrival[origin] = tat + interval
                break
            await clock.sleep(allowed_at - now)

    async def pause(self, origin: str, seconds: float) -> None:
        until = self._clock.monotonic() + seconds
        if until > self._cooldown_until[origin]:
            self._cooldown_until[origin] = until

    async def cooldown_remaining(self, origin: str) -> float:
        return max(0.0, self._cooldown_until[origin] - self._clock.monotonic())
