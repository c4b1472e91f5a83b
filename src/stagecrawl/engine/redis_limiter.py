"""The lane limiter shared by every process through Redis.

The same decisions as `LocalLimiter` (GCRA per lane, sliding-window budgets, AIMD, one cooldown
per host that empties the buckets when it ends), run as atomic Lua scripts so that any number
of workers on any number of machines share one bucket per lane: the origin sees at most the
configured rate across all of them together. Time comes from the Redis server (`TIME`), so the
machines' clocks need not agree; `time_scale` runs that time faster for tests (every process of
a test must use the same scale). See ratelimit.py for why this is not pyrate-limiter.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from stagecrawl.engine.clock import Clock, RealClock
from stagecrawl.engine.ratelimit import (
    DEFAULT_MARGIN,
    Adaptive,
    Grants,
    Lane,
    WaitLog,
    WaitReason,
    WaitTooLong,
    describe_change,
    wait_or_stop,
)
from stagecrawl.engine.shutdown import GracefulStop, Unsent
from stagecrawl.errors import ConfigError, LimiterUnavailable
from stagecrawl.settings import DEFAULTS

log = logging.getLogger("stagecrawl.pacing")

_NOW = """
local t = redis.call('TIME')
local scale = tonumber(ARGV[1])
local now = (tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000) * scale
"""

# KEYS: lane hash, host hash, one list per budget (newest grant first).
# ARGV: scale, nominal rate/s (0 = unpaced), burst, margin, quiet ms, recover step, n budgets,
#       then limit and window ms per budget.
# Returns {wait ms, why, new rate if it changed here else '', the script's now in ms[, who
# asked for a cooldown]}.
_ACQUIRE = (
    _NOW
    + """
local nominal = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local margin = tonumber(ARGV[4])
local keep = 3600000
local cool = tonumber(redis.call('HGET', KEYS[2], 'cool') or '-1e300')
if cool > now then
  local src = redis.call('HGET', KEYS[2], 'src') or ''
  return {tostring(cool - now), 'cooldown', '', tostring(now), src}
end
local wait, why, changed = 0, 'rate', ''
local tat, interval = 0, 0
if nominal > 0 then
  local rate = tonumber(redis.call('HGET', KEYS[1], 'rate') or ARGV[2])
  if rate > nominal then rate = nominal end
  if rate < nominal then
    local quiet = tonumber(redis.call('HGET', KEYS[1], 'quiet') or '0')
    local period = tonumber(ARGV[5])
    local steps = math.floor((now - quiet) / period)
    if steps > 0 then
      rate = math.min(nominal, rate + steps * tonumber(ARGV[6]) * nominal)
      redis.call('HSET', KEYS[1], 'rate', tostring(rate), 'quiet', tostring(quiet + steps * period))
      changed = tostring(rate)
    end
  end
  interval = 1000 / rate * (1 + margin)
  tat = tonumber(redis.call('HGET', KEYS[1], 'tat') or '0')
  if tat < now then tat = now end
  local after_cool = cool + (burst - 1) * interval
  if tat < after_cool then tat = after_cool end
  wait = tat - (burst - 1) * interval - now
end
local n = tonumber(ARGV[7])
for i = 1, n do
  local limit = tonumber(ARGV[6 + 2 * i])
  local window = tonumber(ARGV[7 + 2 * i]) * (1 + margin)
  if redis.call('LLEN', KEYS[2 + i]) >= limit then
    local oldest = tonumber(redis.call('LINDEX', KEYS[2 + i], limit - 1))
    if oldest + window - now > wait then
      wait = oldest + window - now
      why = 'budget'
    end
  end
end
if wait > 0 then return {tostring(wait), why, changed, tostring(now)} end
if nominal > 0 then
  redis.call('HSET', KEYS[1], 'tat', tostring(tat + interval))
  redis.call('PEXPIRE', KEYS[1], math.ceil((tat + interval - now) / tonumber(ARGV[1])) + keep)
end
for i = 1, n do
  local limit = tonumber(ARGV[6 + 2 * i])
  redis.call('LPUSH', KEYS[2 + i], tostring(now))
  redis.call('LTRIM', KEYS[2 + i], 0, limit - 1)
  redis.call('PEXPIRE', KEYS[2 + i],
    math.ceil(tonumber(ARGV[7 + 2 * i]) * 2 / tonumber(ARGV[1])) + keep)
end
return {'0', 'granted', changed, tostring(now)}
"""
)

# KEYS: lane hash. ARGV: scale, nominal rate/s, floor rate/s. Returns the new rate or ''.
_SLOW_DOWN = (
    _NOW
    + """
local nominal = tonumber(ARGV[2])
local floor = tonumber(ARGV[3])
local rate = tonumber(redis.call('HGET', KEYS[1], 'rate') or ARGV[2])
if rate > nominal then rate = nominal end
redis.call('HSET', KEYS[1], 'quiet', tostring(now))
redis.call('PEXPIRE', KEYS[1], 3600000)
local last = tonumber(redis.call('HGET', KEYS[1], 'lastdec') or '-1e300')
if now - last < 2000 / rate or rate <= floor then return '' end
rate = math.max(floor, rate / 2)
redis.call('HSET', KEYS[1], 'rate', tostring(rate), 'lastdec', tostring(now))
return tostring(rate)
"""
)

# KEYS: host hash. ARGV: scale, seconds, who asked (a WaitReason: retry_after or backoff).
_PAUSE = (
    _NOW
    + """
local cool = tonumber(redis.call('HGET', KEYS[1], 'cool') or '-1e300')
local until_ = now + tonumber(ARGV[2]) * 1000
if until_ > cool then
  redis.call('HSET', KEYS[1], 'cool', tostring(until_), 'src', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2]) * 1000 / tonumber(ARGV[1])) + 3600000)
end
return '0'
"""
)

_TIME = _NOW + "return tostring(now)"

_REMAINING = (
    _NOW
    + """
local cool = tonumber(redis.call('HGET', KEYS[1], 'cool') or '-1e300')
if cool > now then return tostring(cool - now) end
return '0'
"""
)


class RedisLimiter:
    def __init__(
        self,
        url: str,
        clock: Clock | None = None,
        margin: float = DEFAULT_MARGIN,
        adaptive: Adaptive | None = None,
        prefix: str = "stagecrawl:pace:",
        time_scale: float = 1.0,
        safe_url: str | None = None,
        outage_seconds: float = DEFAULTS.outage_seconds,
    ) -> None:
        self.url = url
        self.outage_seconds = outage_seconds  # how long a lost Redis is waited for
        self._outage_since: float | None = None
        self.safe_url = safe_url or url
        self._clock = clock or RealClock()
        self.margin = margin
        self.adaptive = adaptive or Adaptive()
        self.prefix = prefix
        self.time_scale = time_scale
        self._rates: dict[str, float | None] = {}
        self._waits = WaitLog()
        self._grants = Grants()
        try:
            self._redis: Any = aioredis.from_url(url, socket_timeout=10, socket_connect_timeout=5)
        except ValueError as exc:
            raise ConfigError(f"bad Redis URL {self.safe_url}: {exc}") from None
        self._acquire = self._redis.register_script(_ACQUIRE)
        self._slow_down = self._redis.register_script(_SLOW_DOWN)
        self._pause = self._redis.register_script(_PAUSE)
        self._remaining = self._redis.register_script(_REMAINING)
        self._time = self._redis.register_script(_TIME)

    async def check(self) -> None:
        """Fail early, with one clear line, when Redis cannot be reached."""
        try:
            await self._redis.ping()
        except (OSError, aioredis.RedisError) as exc:
            raise ConfigError(f"cannot reach Redis at {self.safe_url}: {_reason(exc)}") from None

    async def _call(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        """Run a script; a lost connection is tried again with backoff (nothing is sent
        meanwhile: every request waits on its grant) until Redis has been gone for
        `outage_seconds`, then LimiterUnavailable. Other Redis errors raise it at once."""
        attempt = 0
        while True:
            try:
                result = await script(keys=keys, args=[repr(self.time_scale), *args])
            except (OSError, aioredis.RedisError) as exc:
                lost = isinstance(exc, OSError | RedisConnectionError | RedisTimeoutError)
                if not lost or isinstance(exc, AuthenticationError):
                    raise LimiterUnavailable(
                        f"lost the shared rate limit at {self.safe_url}: {_reason(exc)}"
                    ) from None
                await self._wait_out(exc, attempt)
                attempt += 1
                continue
            if self._outage_since is not None:
                log.warning(
                    "Redis at %s reachable again after %.1fs",
                    self.safe_url,
                    time.monotonic() - self._outage_since,
                )
                self._outage_since = None
            return result

    async def _wait_out(self, exc: BaseException, attempt: int) -> None:
        now = time.monotonic()
        if self._outage_since is None:
            self._outage_since = now
            log.warning(
                "lost Redis at %s (%s): trying again for up to %gs; nothing is sent meanwhile",
                self.safe_url,
                _reason(exc),
                self.outage_seconds,
            )
        elapsed = now - self._outage_since
        if elapsed >= self.outage_seconds:
            raise LimiterUnavailable(
                f"lost the shared rate limit at {self.safe_url}: {_reason(exc)}"
                f" (unreachable for {elapsed:.0f}s, outage_seconds {self.outage_seconds:g})"
            ) from None
        step = min(5.0, 0.25 * 2**attempt)  # full jitter, capped: workers do not retry in step
        await asyncio.sleep(min(random.uniform(step / 2, step), self.outage_seconds - elapsed))

    def _lane_key(self, lane: Lane) -> str:
        return f"{self.prefix}lane:{lane.name}@{lane.prefix}"

    def _host_key(self, origin: str) -> str:
        return f"{self.prefix}host:{origin}"

    def current_rate(self, lane: Lane) -> float | None:
        if lane.name in self._rates:
            return self._rates[lane.name]
        return lane.rate.per_second if lane.rate else None

    async def acquire(
        self,
        lane: Lane,
        origin: str,
        max_wait: float | None = None,
        stop: GracefulStop | None = None,
    ) -> float:
        rate = lane.rate
        lane_key = self._lane_key(lane)
        keys = [lane_key, self._host_key(origin)]
        args: list[Any] = [
            repr(rate.per_second if rate else 0.0),
            rate.burst if rate else 1,
            repr(self.margin),
            repr(self.adaptive.quiet_period * 1000.0),
            repr(self.adaptive.recover_step),
            len(lane.budgets),
        ]
        for budget in lane.budgets:
            keys.append(f"{lane_key}:budget:{budget.text()}")
            args += [budget.limit, repr(budget.window * 1000.0)]
        started = self._clock.monotonic()
        while True:
            if stop is not None and stop.requested:
                raise Unsent(WaitReason.STOP)
            wait_ms, why, changed, now_ms, *src = await self._call(self._acquire, keys, args)
            if changed:
                self._note_change(lane, float(changed), slowed=False)
            wait = float(wait_ms) / 1000.0
            if wait <= 0:
                self._grants.add(lane, float(now_ms) / 1000.0)
                return self._clock.monotonic() - started
            why = why.decode() if isinstance(why, bytes) else str(why)
            waited = self._clock.monotonic() - started
            if why == "cooldown" and max_wait is not None and waited + wait > max_wait:
                source = await self._cooldown_source(origin)
                why_text = f"{origin} paused by {source.text}"
                raise WaitTooLong(wait, why_text, WaitReason.COOLDOWN, source)
            reason, detail = _REASONS.get(why, (WaitReason.LANE_RATE, "lane rate"))
            self._waits.note(lane, reason, f"{lane.name} {detail} (shared)", wait, started + waited)
            asked = _source(src[0]) if src and reason is WaitReason.COOLDOWN else None
            await wait_or_stop(self._clock, wait, reason, stop, lane.name, asked)

    def _note_change(self, lane: Lane, rate: float, slowed: bool) -> None:
        self._rates[lane.name] = rate
        describe_change(lane, rate, slowed, "after 429" if slowed else "after a quiet period")

    async def slow_down(self, lane: Lane) -> float | None:
        if lane.rate is None:
            return None
        floor = lane.floor or lane.rate.per_second
        changed = await self._call(
            self._slow_down, [self._lane_key(lane)], [repr(lane.rate.per_second), repr(floor)]
        )
        if not changed:
            return None
        self._note_change(lane, float(changed), slowed=True)
        return float(changed)

    async def pause(
        self, origin: str, seconds: float, source: WaitReason = WaitReason.RETRY_AFTER
    ) -> None:
        await self._call(self._pause, [self._host_key(origin)], [repr(seconds), str(source)])

    async def _cooldown_source(self, origin: str) -> WaitReason:
        """Who asked for the host's pause (read only when a wait is too long to take)."""
        try:
            value = await self._redis.hget(self._host_key(origin), "src")
        except (OSError, aioredis.RedisError) as exc:
            raise LimiterUnavailable(
                f"lost the shared rate limit at {self.safe_url}: {_reason(exc)}"
            ) from None
        return _source(value)

    async def cooldown_remaining(self, origin: str) -> float:
        return float(await self._call(self._remaining, [self._host_key(origin)], [])) / 1000.0

    def grants(self, lane: Lane) -> list[float]:
        """This process's grants only (the other workers' are in their own records)."""
        return self._grants.of(lane)

    async def now(self) -> float:
        return float(await self._call(self._time, [], [])) / 1000.0

    async def aclose(self) -> None:
        await self._redis.aclose()


# The Lua script's word for what holds a grant back, as a typed reason and in words.
_REASONS = {
    "cooldown": (WaitReason.COOLDOWN, "host cooling down after a 429"),
    "rate": (WaitReason.LANE_RATE, "lane rate"),
    "budget": (WaitReason.BUDGET, "lane budget spent"),
}


def _source(value: object) -> WaitReason:
    """Who asked for a host's pause, as Redis keeps it."""
    text = value.decode() if isinstance(value, bytes) else str(value or "")
    try:
        return WaitReason(text)
    except ValueError:  # a pause stored by an older stagecrawl: it was a Retry-After
        return WaitReason.RETRY_AFTER


def _reason(exc: BaseException) -> str:
    """The first line of a Redis error, which may quote the URL: never its password."""
    return (str(exc) or type(exc).__name__).splitlines()[0]
