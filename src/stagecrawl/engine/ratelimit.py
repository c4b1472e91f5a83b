"""Pacing by lane: one token bucket per configured endpoint, one 429 cooldown per host.

A *lane* is an endpoint the pipeline configured (the sparse index, the API, a SPARQL endpoint, a
download URL): a base URL with its own rate, burst and budgets. Requests are paced per lane, not
per host, because a self-hosted or proxy registry serves the index and the API from one host
with a different limit on each path. A 429 from a host pauses every lane on that host (the host
told us to slow down, whichever path it was), and when the pause ends each lane's bucket is
empty: waiters resume one interval apart, never as a herd.

Three mechanisms act together in `acquire`:
- GCRA (the generic cell rate algorithm, a token bucket kept as one "theoretical arrival time")
  spaces grants `1/rate` apart with at most `burst` back to back; burst 1 is the default.
- Budgets: hard windows such as crates.io's "about 600 API requests per 10 minutes", kept as a
  sliding log of grant times, so the count in any window is exact.
- Adaptive pacing (AIMD): a 429 that names no Retry-After halves the lane's rate, down to a
  floor; after a quiet period without 429 the rate climbs back additively to its nominal value.

Why not pyrate-limiter: it has multi-rate buckets and a Redis backend, but no shared host
cooldown that extends for every waiter at once and empties the buckets when it ends, and no
adaptive rate; bolting those on beside its buckets would split one decision over two stores.
The GCRA here and its Lua twin in redis_limiter.py keep all of it in one atomic step.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Protocol
from urllib.parse import urlsplit

from stagecrawl.engine.clock import Clock, RealClock
from stagecrawl.engine.shutdown import GracefulStop, Unsent, sleep_unless_stopped
from stagecrawl.engine.waits import WaitReason as WaitReason  # re-exported: the pacing's word
from stagecrawl.settings import parse_budget

log = logging.getLogger("stagecrawl.pacing")

# Grants are spaced 2% wider than nominal so that network jitter between us and the origin
# cannot squeeze one request too many into one of the origin's windows.
DEFAULT_MARGIN = 0.02


@dataclass(frozen=True)
class Rate:
    """`per_second` requests per second on average, at most `burst` back to back."""

    per_second: float
    burst: int = 1

    def __post_init__(self) -> None:
        if not self.per_second > 0 or math.isinf(self.per_second):
            raise ValueError("rate must be a positive number")
        if self.burst < 1:
            raise ValueError("burst must be at least 1")

    @property
    def interval(self) -> float:
        return 1.0 / self.per_second


@dataclass(frozen=True)
class Budget:
    """At most `limit` requests in any window of `window` seconds."""

    limit: int
    window: float

    def __post_init__(self) -> None:
        if self.limit < 1 or not self.window > 0:
            raise ValueError("a budget needs a limit ≥ 1 and a window > 0")

    @classmethod
    def parse(cls, text: str) -> Budget:
        """`600/600s`, `600/10m`, `5000/1h` (a bare number of seconds works too)."""
        return cls(*parse_budget(text))

    def text(self) -> str:
        return f"{self.limit}/{self.window:g}s"


@lru_cache(maxsize=4096)
def _origin_of_prefix(prefix: str) -> str:
    parts = urlsplit(prefix)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    port = parts.port
    if port is None or (scheme, port) in {("http", 80), ("https", 443)}:
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


def origin_of(url: str) -> str:
    """`scheme://host[:port]`, lowercased, default ports dropped: the unit of a 429 cooldown.
    (Hot path: computed from the URL's scheme and authority only, cached by those.)"""
    scheme_end = url.find("://")
    if scheme_end > 0:
        authority_end = url.find("/", scheme_end + 3)
        head = url if authority_end < 0 else url[:authority_end]
        if "?" not in head and "#" not in head:
            return _origin_of_prefix(head)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    port = parts.port
    if port is None or (scheme, port) in {("http", 80), ("https", 443)}:
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


def _location(url: str) -> str:
    """`origin + path` of a URL (no query, no fragment): what a lane's prefix is matched on."""
    origin = origin_of(url)
    rest = url[url.find("/", url.find("://") + 3) :] if url.count("/") >= 3 else "/"
    return origin + (rest.split("?", 1)[0].split("#", 1)[0] or "/")


def _prefix(url: str) -> str:
    parts = urlsplit(url)
    path = parts.path if parts.path.endswith("/") else parts.path + "/"
    return origin_of(url) + path


@dataclass(frozen=True)
class Lane:
    """One configured endpoint: the requests under `url`, paced together.

    `rate=None` leaves the lane unpaced (benchmarks and loopback tests only). `token` is sent
    as a bearer token on this lane's requests only, never to another lane on the same host and
    never after a redirect out of the lane."""

    name: str
    url: str
    rate: Rate | None = Rate(1.0)
    budgets: tuple[Budget, ...] = ()
    min_rate: float | None = None  # AIMD floor; default: 1/16 of the nominal rate
    token: str | None = field(default=None, repr=False, compare=False)

    # Computed once per lane (the fetcher asks on every request).
    @cached_property
    def origin(self) -> str:
        return origin_of(self.url)

    @cached_property
    def prefix(self) -> str:
        return _prefix(self.url)

    def covers(self, url: str) -> bool:
        return _location(url).startswith(self.prefix)

    @property
    def floor(self) -> float | None:
        if self.rate is None:
            return None
        return self.min_rate if self.min_rate is not None else self.rate.per_second / 16


_DIRECTORIES_KEPT = 4096


class Lanes:
    """The lanes of a run, and which one a URL belongs to (the longest matching base URL).

    A URL under no configured lane (a redirect target, an ad-hoc download) gets a lane of its
    own per host, paced at `default`."""

    def __init__(self, lanes: Iterable[Lane] = (), default: Rate | None = Rate(1.0)) -> None:
        self._lanes: dict[str, Lane] = {}
        # The lane of a URL depends only on its directory (every prefix ends in "/"): cached
        # by it, so the fetcher's lookup per request is one dict hit, not a parse per lane.
        self._by_directory: dict[str, Lane] = {}
        for lane in lanes:
            self.add(lane)
        self.default = default
        self._adhoc: dict[str, Lane] = {}

    def add(self, lane: Lane) -> None:
        if lane.name in self._lanes:
            raise ValueError(f"two lanes named {lane.name!r}")
        self._lanes[lane.name] = lane
        self._by_directory.clear()

    def __iter__(self) -> Iterator[Lane]:
        return iter([*self._lanes.values(), *self._adhoc.values()])

    def named(self, name: str) -> Lane:
        return self._lanes[name]

    def for_url(self, url: str) -> Lane:
        # The URL's own directory, as written (no query, no fragment), is the cache key: the
        # lane is a function of it, and cutting it costs a few string searches where the
        # normalised form costs a parse. Only a URL with a path slash has one.
        end = len(url)
        for mark in "?#":
            at = url.find(mark, 0, end)
            if at >= 0:
                end = at
        cut = url.rfind("/", 0, end) + 1
        scheme_end = url.find("://")
        raw = url[:cut] if 0 < scheme_end and scheme_end + 3 < cut else None
        if raw is not None:
            found = self._by_directory.get(raw)
            if found is not None:
                return found
        location = _location(url)
        directory = location[: location.rfind("/") + 1]
        found = self._by_directory.get(directory)
        if found is not None:
            if raw is not None:
                self._remember(raw, found)
            return found
        best: Lane | None = None
        for lane in self._lanes.values():
            if directory.startswith(lane.prefix) and (
                best is None or len(lane.prefix) > len(best.prefix)
            ):
                best = lane
        if best is None:
            origin = origin_of(url)
            if origin not in self._adhoc:
                self._adhoc[origin] = Lane(origin.split("//", 1)[-1], origin + "/", self.default)
            best = self._adhoc[origin]
        self._remember(directory, best)
        if raw is not None:
            self._remember(raw, best)
        return best

    def _remember(self, directory: str, lane: Lane) -> None:
        if len(self._by_directory) >= _DIRECTORIES_KEPT:
            self._by_directory.clear()  # bounded: a crawl of many directories re-derives
        self._by_directory[directory] = lane


@dataclass(frozen=True)
class Adaptive:
    """AIMD settings: halve on a 429 without Retry-After, add back after quiet periods."""

    quiet_period: float = 60.0  # seconds without a 429 before the rate climbs one step
    recover_step: float = 0.1  # fraction of the nominal rate added per quiet period


# Grants remembered per lane (see `Grants`): enough for a test's or a benchmark's run, bounded
# so that a long crawl's memory stays flat.
GRANTS_KEPT = 1024


class Grants:
    """When this limiter granted each lane's tokens, on the limiter's own timeline (seconds).

    What the pacing really was: a timestamp taken by the caller after `acquire` returns also
    holds the event loop's delay in resuming it, which on a loaded machine is tens of
    milliseconds and squeezes or stretches the gaps a check reads. Only the last
    `GRANTS_KEPT` per lane are kept."""

    def __init__(self) -> None:
        self._by_lane: dict[str, deque[float]] = {}

    def add(self, lane: Lane, at: float) -> None:
        kept = self._by_lane.get(lane.name)
        if kept is None:
            kept = self._by_lane[lane.name] = deque(maxlen=GRANTS_KEPT)
        kept.append(at)

    def of(self, lane: Lane) -> list[float]:
        return list(self._by_lane.get(lane.name, ()))


# A wait at least this long is logged with its reason (once a minute per lane and reason).
LONG_WAIT = 5.0
_LOG_EVERY = 60.0


class WaitTooLong(Exception):
    """The host's cooldown asks for a longer wait than the caller may spend; `source` says
    who asked for the cooldown (RETRY_AFTER: the server, BACKOFF: our backoff)."""

    def __init__(
        self,
        seconds: float,
        why: str,
        reason: WaitReason = WaitReason.COOLDOWN,
        source: WaitReason = WaitReason.RETRY_AFTER,
    ) -> None:
        super().__init__(f"{why}: {seconds:.0f}s")
        self.seconds = seconds
        self.why = why
        self.reason = reason
        self.source = source


class WaitLog:
    """One log line per long wait, naming its real cause, at most once a minute per lane
    and reason (a thousand waiters behind one budget say it once)."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, WaitReason], float] = {}

    def note(self, lane: Lane, reason: WaitReason, why: str, seconds: float, now: float) -> None:
        if seconds < LONG_WAIT:
            return
        key = (lane.name, reason)
        if now - self._last.get(key, float("-inf")) < _LOG_EVERY:
            return
        self._last[key] = now
        log.info("%s lane waits %.0fs for %s: %s", lane.name, seconds, reason.text, why)


async def wait_or_stop(
    clock: Clock,
    seconds: float,
    reason: WaitReason,
    stop: GracefulStop | None,
    lane: str | None = None,
    source: WaitReason | None = None,
) -> None:
    """Sleep `seconds` on `clock`; a stop ends the wait at once with Unsent(reason), which
    keeps the lane and (for a cooldown) who asked for it, so a stop summary can say why."""
    if await sleep_unless_stopped(clock.sleep(seconds), stop):
        raise Unsent(reason, seconds, lane, source)


class Limiter(Protocol):
    """What the fetcher needs from a limiter; the Redis-backed one implements the same calls."""

    async def acquire(
        self,
        lane: Lane,
        origin: str,
        max_wait: float | None = None,
        stop: GracefulStop | None = None,
    ) -> float:
        """Wait until `origin` is out of cooldown and `lane` has a token and budget left, then
        take them; returns the seconds waited. Raises WaitTooLong, without waiting, when the
        host's cooldown would exceed `max_wait` (our own rate and budgets are waited out:
        they are bounded by their window). A stop request ends the wait with Unsent, and no
        token is taken after it."""

    async def pause(
        self, origin: str, seconds: float, source: WaitReason = WaitReason.RETRY_AFTER
    ) -> None:
        """Put the whole host in cooldown for at least `seconds` from now; `source` says who
        asked (the server's Retry-After, or our backoff)."""

    async def slow_down(self, lane: Lane) -> float | None:
        """A 429 without Retry-After: halve the lane's rate; returns the new rate if changed."""

    async def cooldown_remaining(self, origin: str) -> float: ...

    def current_rate(self, lane: Lane) -> float | None: ...

    def grants(self, lane: Lane) -> list[float]:
        """When this limiter granted `lane`'s recent tokens, on its own timeline (`now`)."""
        ...

    async def now(self) -> float:
        """The limiter's timeline, in seconds (its clock, or the shared Redis server's)."""
        ...

    async def aclose(self) -> None: ...


def describe_change(lane: Lane, rate: float, slowed: bool, why: str) -> None:
    """One log line per change of a lane's rate."""
    verb = "slowed" if slowed else "back"
    log.warning("%s lane %s to %s/s %s", lane.name, verb, f"{rate:.3g}", why)


@dataclass
class _LaneState:
    rate: float | None  # the current (possibly slowed) rate
    tat: float = float("-inf")  # GCRA theoretical arrival time
    last_decrease: float = float("-inf")
    quiet_since: float = float("-inf")  # last 429 or recovery step
    logs: list[deque[float]] = field(default_factory=list)  # one per budget


class LocalLimiter:
    """In-process limiter: a GCRA bucket, budgets and an adaptive rate per lane, and a cooldown
    per host. There is no await between a check and its update, so two tasks on one event
    loop never take the same slot."""

    def __init__(
        self,
        clock: Clock | None = None,
        margin: float = DEFAULT_MARGIN,
        adaptive: Adaptive | None = None,
    ) -> None:
        self.margin = margin
        self.adaptive = adaptive or Adaptive()
        self._clock = clock or RealClock()
        self._lanes: dict[str, _LaneState] = {}
        self._cooldown_until: dict[str, float] = {}
        self._waits = WaitLog()
        self._cooldown_source: dict[str, WaitReason] = {}
        self._grants = Grants()

    def _state(self, lane: Lane) -> _LaneState:
        state = self._lanes.get(lane.name)
        if state is None:
            state = _LaneState(lane.rate.per_second if lane.rate else None)
            state.logs = [deque(maxlen=b.limit) for b in lane.budgets]
            self._lanes[lane.name] = state
        return state

    def current_rate(self, lane: Lane) -> float | None:
        return self._state(lane).rate

    def _recover(self, lane: Lane, state: _LaneState, now: float) -> None:
        if lane.rate is None or state.rate is None or state.rate >= lane.rate.per_second:
            return
        steps = math.floor((now - state.quiet_since) / self.adaptive.quiet_period)
        if steps <= 0:
            return
        nominal = lane.rate.per_second
        state.rate = min(nominal, state.rate + steps * self.adaptive.recover_step * nominal)
        state.quiet_since += steps * self.adaptive.quiet_period
        describe_change(
            lane, state.rate, False, f"after {steps * self.adaptive.quiet_period:.0f}s without 429"
        )

    def _wait_for(self, lane: Lane, origin: str, now: float) -> tuple[float, WaitReason, str]:
        """Seconds until a grant is possible (0 = now), what holds it back, and in words."""
        state = self._state(lane)
        cooldown = self._cooldown_until.get(origin, float("-inf"))
        if cooldown > now:
            source = self._cooldown_source.get(origin, WaitReason.RETRY_AFTER)
            return cooldown - now, WaitReason.COOLDOWN, f"{origin} paused by {source.text}"
        self._recover(lane, state, now)
        wait, reason, spent = 0.0, WaitReason.LANE_RATE, None
        if state.rate is not None and lane.rate is not None:
            interval = (1.0 / state.rate) * (1 + self.margin)
            # The bucket is empty when a cooldown ends: waiters resume one interval apart.
            tat = max(state.tat, now, cooldown + (lane.rate.burst - 1) * interval)
            wait = tat - (lane.rate.burst - 1) * interval - now
        for budget, grants in zip(lane.budgets, state.logs, strict=True):
            if len(grants) >= budget.limit:
                until = grants[0] + budget.window * (1 + self.margin) - now
                if until > wait:
                    wait, reason, spent = until, WaitReason.BUDGET, budget
        if wait <= 0:
            return 0.0, reason, ""  # granted: the words are for waits only (hot path)
        if spent is not None:
            return wait, reason, f"{lane.name} lane budget {spent.text()} spent"
        return wait, reason, f"{lane.name} lane rate"

    def _grant(self, lane: Lane, origin: str, now: float) -> None:
        state = self._state(lane)
        if state.rate is not None and lane.rate is not None:
            interval = (1.0 / state.rate) * (1 + self.margin)
            cooldown = self._cooldown_until.get(origin, float("-inf"))
            tat = max(state.tat, now, cooldown + (lane.rate.burst - 1) * interval)
            state.tat = tat + interval
        for grants in state.logs:
            grants.append(now)
        self._grants.add(lane, now)

    async def acquire(
        self,
        lane: Lane,
        origin: str,
        max_wait: float | None = None,
        stop: GracefulStop | None = None,
    ) -> float:
        if lane.rate is None and not lane.budgets and origin not in self._cooldown_until:
            # Unpaced, unbudgeted, a host never paused: nothing to wait for or to record.
            if stop is not None and stop.requested:
                raise Unsent(WaitReason.STOP)
            return 0.0
        clock = self._clock
        started = clock.monotonic()
        while True:
            if stop is not None and stop.requested:
                raise Unsent(WaitReason.STOP)
            now = clock.monotonic()
            wait, reason, why = self._wait_for(lane, origin, now)
            if wait <= 0:
                self._grant(lane, origin, now)
                return now - started
            if (
                reason is WaitReason.COOLDOWN
                and max_wait is not None
                and (now - started) + wait > max_wait
            ):
                source = self._cooldown_source.get(origin, WaitReason.RETRY_AFTER)
                raise WaitTooLong(wait, why, reason, source)
            self._waits.note(lane, reason, why, wait, now)
            asked = None
            if reason is WaitReason.COOLDOWN:
                asked = self._cooldown_source.get(origin, WaitReason.RETRY_AFTER)
            await wait_or_stop(clock, wait, reason, stop, lane.name, asked)

    async def pause(
        self, origin: str, seconds: float, source: WaitReason = WaitReason.RETRY_AFTER
    ) -> None:
        until = self._clock.monotonic() + seconds
        if until > self._cooldown_until.get(origin, float("-inf")):
            self._cooldown_until[origin] = until
            self._cooldown_source[origin] = source

    async def slow_down(self, lane: Lane) -> float | None:
        state = self._state(lane)
        if state.rate is None or lane.rate is None:
            return None
        now = self._clock.monotonic()
        state.quiet_since = now
        floor = lane.floor or state.rate
        # One halving per burst of 429s: the requests already granted at the old rate answer
        # within about two of the new intervals, and they must not halve it again.
        if now - state.last_decrease < 2.0 / state.rate or state.rate <= floor:
            return None
        state.rate = max(floor, state.rate / 2)
        state.last_decrease = now
        describe_change(lane, state.rate, True, "after 429")
        return state.rate

    async def cooldown_remaining(self, origin: str) -> float:
        return max(0.0, self._cooldown_until.get(origin, float("-inf")) - self._clock.monotonic())

    def grants(self, lane: Lane) -> list[float]:
        return self._grants.of(lane)

    async def now(self) -> float:
        return self._clock.monotonic()

    async def aclose(self) -> None:
        return None
