"""The per-origin limiter shared by every process through Redis.

Same algorithm as `LocalLimiter` (GCRA plus a cooldown), run as atomic Lua scripts so that
any number of workers on any number of machines share one bucket per origin: the origin sees at
most the configured rate across all of them together. Time comes from the Redis server (`TIME`)
so the machines' clocks need not agree. Written here rather than taken from pyrate-limiter
because the 429 cooldown must live in the same key and extend for every waiter at once.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from stagecrawl.engine.clock import Clock, RealClock
from stagecrawl.engine.ratelimit import Rate, origin_of
from stagecrawl.errors import ConfigError

# Returns how many milliseconds to wait (0 = a token was taken).
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local cool = tonumber(redis.call('HGET', KEYS[1], 'cool') or '0')
if cool > now then return tostring(cool - now) end
local interval = tonumber(ARGV[1])
if interval <= 0 then return '0' end
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call('HGET', KEYS[1], 'tat') or '0')
if tat < now then tat = now end
local allowed = tat - (burst - 1) * interval
if now >= allowed then
  redis.call('HSET', KEYS[1], 'tat', tostring(tat + interval))
  redis.call('PEXPIRE', KEYS[1], math.ceil(tat + interval - now + 3600000))
  return '0'
end
return tostring(allowed - now)
"""

_PAUSE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local cool = tonumber(redis.call('HGET', KEYS[1], 'cool') or '0')
local until_ = now + tonumber(ARGV[1])
if until_ > cool then
  redis.call('HSET', KEYS[1], 'cool', tostring(until_))
  redis.call('PEXPIRE', KEYS[1], math.ceil(until_ - now + 3600000))
end
return '0'
"""

_REMAINING = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local cool = tonumber(redis.call('HGET', KEYS[1], 'cool') or '0')
if cool > now then return tostring(cool - now) end
return '0'
"""


class RedisLimiter:
    def __init__(
        self,
        url: str,
        rates: dict[str, Rate] | None = None,
        default: Rate | None = None,
        clock: Clock | None = None,
        margin: float = 0.02,
        prefix: str = "stagecrawl:limit:",
    ) -> None:
        self.url = url
        self._rates = {origin_of(k) if "://" in k else k: v for k, v in (rates or {}).items()}
        self._default = default
        self._clock = clock or RealClock()
        self.margin = margin
        self.prefix = prefix
        try:
            self._redis: Any = aioredis.from_url(url)
        except ValueError as exc:
            raise ConfigError(f"bad Redis URL {url!r}: {exc}") from None
        self._acquire = self._redis.register_script(_ACQUIRE)
        self._pause = self._redis.register_script(_PAUSE)
        self._remaining = self._redis.register_script(_REMAINING)

    async def check(self) -> None:
        """Fail early, with one clear line, when Redis cannot be reached."""
        try:
            await self._redis.ping()
        except (OSError, aioredis.RedisError) as exc:
            raise ConfigError(f"cannot reach Redis at {self.url}: {exc}") from None

    def _key(self, origin: str) -> str:
        return self.prefix + origin

    async def acquire(self, origin: str) -> None:
        rate = self._rates.get(origin, self._default)
        interval_ms = 0.0 if rate is None else 1000.0 * rate.interval * (1 + self.margin)
        burst = 1 if rate is None else rate.burst
        while True:
            wait_ms = float(
                await self._acquire(keys=[self._key(origin)], args=[repr(interval_ms), burst])
            )
            if wait_ms <= 0:
                return
            await self._clock.sleep(wait_ms / 1000.0)

    async def pause(self, origin: str, seconds: float) -> None:
        await self._pause(keys=[self._key(origin)], args=[repr(seconds * 1000.0)])

    async def cooldown_remaining(self, origin: str) -> float:
        return float(await self._remaining(keys=[self._key(origin)])) / 1000.0

    async def aclose(self) -> None:
        await self._redis.aclose()
