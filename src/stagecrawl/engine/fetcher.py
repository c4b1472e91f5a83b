"""The one place that talks HTTP: retries, Retry-After, cooldowns, size limits, validators.

Transport: one shared aiohttp `ClientSession` per run. httpx was the first choice, but its
connection pool slows down under many concurrent requests to one host (httpx#3215):
bench/engine.py measured a bare aiohttp loop 8-10x faster than a bare httpx loop at concurrency
16-64 against the same loopback origin, so aiohttp won. aiohttp speaks HTTP/1.1 only; with
keep-alive connections that costs nothing measurable against the index or the API at the rates
stagecrawl is allowed to use.

Send path, outermost first: `get`/`post_json` (retries, 429 handling) → `_follow` (redirects,
each hop paced) → `_exchange` (one HTTP exchange under the total deadline, size limits).

A stop request (the command's, see shutdown.py) ends every wait on this path at once with
`Unsent` (a lane token, a budget, a host cooldown, a retry backoff) and no exchange starts
after it; an exchange already on the wire is left to the work loop's grace period.

The retry ladder is hand-written rather than delegated to tenacity or stamina: a 429 must pause
the whole host (every waiter, not only the request that saw it) through the shared limiter and
slow the lane down, a rate-limited request waits its turn for as long as `max_retry_after`
allows instead of counting attempts, a Retry-After larger than that fails at once instead of
being shortened, and both libraries cap total retry time by default in ways that cut a long
Retry-After short.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy

from stagecrawl import __version__
from stagecrawl.engine.clock import Clock, RealClock
from stagecrawl.engine.ratelimit import (
    Lane,
    Lanes,
    Limiter,
    LocalLimiter,
    WaitReason,
    WaitTooLong,
    origin_of,
    wait_or_stop,
)
from stagecrawl.engine.shutdown import GracefulStop, Unsent, current_stop
from stagecrawl.errors import (
    BodyTooLarge,
    ConfigError,
    EmptyBody,
    FetchError,
    HttpError,
    NotFound,
    RateLimited,
    TransientError,
)
from stagecrawl.jsoncodec import loads
from stagecrawl.settings import DEFAULTS
from stagecrawl.storage.names import VALIDATOR_MAX

MiB = 1024 * 1024
NOT_FOUND_STATUSES = frozenset({404, 410, 451})
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


@dataclass
class FetchSettings:
    """Fetcher settings; the defaults of those in the settings table come from it."""

    timeout: float = DEFAULTS.timeout  # connect, and each read: a stalled socket
    deadline: float = DEFAULTS.deadline  # one whole exchange: connect + headers + body
    download_deadline: float = DEFAULTS.download_deadline  # one streamed download (a dump)
    retries: int = DEFAULTS.retries  # transient failures retried after the first attempt
    backoff_base: float = 1.0
    backoff_cap: float = 60.0
    max_retry_after: float = DEFAULTS.max_retry_after  # most one request waits on 429s
    max_body_bytes: int = int(DEFAULTS.max_body_mb * MiB)
    max_redirects: int = 5
    max_connections: int = 64
    contact: str | None = None

    def user_agent(self) -> str:
        if self.contact:
            return f"stagecrawl/{__version__} (+{self.contact})"
        return f"stagecrawl/{__version__}"


def require_contact(contact: str | None, why: str) -> None:
    """Refuse to start against an origin whose policy asks for a contact in the User-Agent
    (`why`: that policy, in words)."""
    if not contact or not contact.strip():
        raise ConfigError(
            f"a contact is required: {why}. Pass --contact EMAIL-OR-URL or set STAGECRAWL_CONTACT."
        )


@dataclass(frozen=True)
class Validators:
    """What a previous response said about its version, for a conditional GET."""

    etag: str | None = None
    last_modified: str | None = None


@dataclass
class FetchResult:
    url: str
    status: int
    headers: CIMultiDictProxy[str] | CIMultiDict[str]
    content: bytes
    attempts: int = 1

    @property
    def not_modified(self) -> bool:
        return self.status == 304

    @property
    def validators(self) -> Validators:
        """The answer's validators, each only if a column can keep it: an over-long one is
        dropped here, where it enters (the next request is then unconditional — a full
        answer, never a wrong 304 — instead of a row no server-side table would take)."""
        etag, modified = self.headers.get("etag"), self.headers.get("last-modified")
        return Validators(
            etag if etag is None or len(etag) <= VALIDATOR_MAX else None,
            modified if modified is None or len(modified) <= VALIDATOR_MAX else None,
        )

    @property
    def text(self) -> str:
        return self.content.decode("utf-8")

    def json(self) -> Any:
        """The body as JSON; otherwise a ValueError saying what came instead (its content
        type and first bytes: an HTML error page, a captive portal), not a parser's column."""
        try:
            return loads(self.content)
        # JSONDecodeError, bytes that are not UTF-8 at all, or JSON nested deeper than the
        # decoder recurses (a RecursionError: it is junk from the server all the same)
        except (ValueError, RecursionError) as exc:
            kind = self.headers.get("Content-Type", "no content type")
            start = self.content[:60].decode("utf-8", errors="replace")
            shown = " ".join(start.split()) + ("…" if len(self.content) > 60 else "")
            # where the parser stopped helps only when the body started as JSON
            where = f" ({exc})" if getattr(exc, "pos", 0) else ""
            raise ValueError(
                f"expected JSON from {self.url}, got {kind} ({len(self.content)} bytes)"
                f" starting {shown!r}{where}"
            ) from None


def parse_retry_after(value: str | None, now_wall: float) -> float | None:
    """Retry-After as seconds from now: delta-seconds or an HTTP-date (RFC 9110 §10.2.3)."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now_wall)


@dataclass
class FetchStats:
    """Counters by lane name (requests, 429s, retries, bytes) and statuses by host."""

    requests: Counter[str] = field(default_factory=Counter)
    statuses: dict[str, Counter[int]] = field(default_factory=lambda: defaultdict(Counter))
    rate_limited: Counter[str] = field(default_factory=Counter)
    retries: Counter[str] = field(default_factory=Counter)
    bytes: Counter[str] = field(default_factory=Counter)


@dataclass
class _Request:
    method: str
    url: str
    lane: Lane
    validators: Validators | None = None
    headers: dict[str, str] | None = None
    json_body: Any = None


class Fetcher:
    """One shared aiohttp session per run, with politeness and typed errors around it."""

    def __init__(
        self,
        settings: FetchSettings | None = None,
        lanes: Lanes | None = None,
        limiter: Limiter | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        stop: GracefulStop | None = None,
    ) -> None:
        self.settings = settings or FetchSettings()
        self._own_stop = stop
        self.clock = clock or RealClock()
        self.lanes = lanes or Lanes(default=None)
        self.limiter: Limiter = limiter or LocalLimiter(clock=self.clock)
        self.rng = rng or random.Random()
        self.stats = FetchStats()
        self._session: aiohttp.ClientSession | None = None

    def _timeouts(self, total: float | None) -> aiohttp.ClientTimeout:
        """Connect and per-read timeouts as the settings say, and `total`: the exchange
        deadline for every request, none for a download (its own deadline is longer)."""
        s = self.settings
        return aiohttp.ClientTimeout(
            total=total, connect=s.timeout, sock_connect=s.timeout, sock_read=s.timeout
        )

    @property
    def session(self) -> aiohttp.ClientSession:
        """Created on first use, inside the running event loop, as aiohttp requires."""
        if self._session is None:
            s = self.settings
            # The exchange deadline is aiohttp's own `total`: it runs from the request's start
            # to the connection's release, so it bounds connect, headers and a trickling body
            # alike, and it is the one timer a bare aiohttp request pays anyway (an
            # `asyncio.timeout` around the exchange was a second one on every request).
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=s.max_connections),
                timeout=self._timeouts(total=s.deadline),
                headers={"User-Agent": s.user_agent(), "Accept-Encoding": "gzip, deflate"},
                auto_decompress=True,
            )
        return self._session

    async def __aenter__(self) -> Fetcher:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        await self.limiter.aclose()

    def backoff(self, retry_number: int) -> float:
        """Full jitter: uniform(0, min(cap, base * 2**n)), so concurrent retries decorrelate."""
        s = self.settings
        return self.rng.uniform(0.0, min(s.backoff_cap, s.backoff_base * 2**retry_number))

    @property
    def stop(self) -> GracefulStop | None:
        """The stop this fetcher's waits listen to: its own, else the running command's."""
        return self._own_stop or current_stop()

    def lane(self, url: str, name: str | None = None) -> Lane:
        return self.lanes.named(name) if name else self.lanes.for_url(url)

    async def get(
        self,
        url: str,
        *,
        lane: str | None = None,
        validators: Validators | None = None,
        headers: dict[str, str] | None = None,
        allow_empty: bool = False,
        rate_limited: Callable[[FetchResult], bool] | None = None,
    ) -> FetchResult:
        """GET with retries. Returns a 2xx result or a 304 (`not_modified`); raises FetchError.

        `rate_limited` lets an origin that signals overload inside a 200 (Wikimedia's maxlag
        error) be treated exactly like a 429: cooldown, Retry-After, the same ladder."""
        request = _Request("GET", url, self.lane(url, lane), validators, headers)
        return await self._retrying(request, allow_empty, rate_limited)

    async def post_json(self, url: str, payload: Any, *, lane: str | None = None) -> FetchResult:
        """POST a JSON body (a classifier call): the same lane, pacing and retries as `get`."""
        request = _Request("POST", url, self.lane(url, lane), json_body=payload)
        return await self._retrying(request, False, None)

    async def _retrying(
        self,
        request: _Request,
        allow_empty: bool,
        rate_limited: Callable[[FetchResult], bool] | None,
    ) -> FetchResult:
        settings, clock, lane = self.settings, self.clock, request.lane
        attempts = failures = limited = 0
        first_limited: float | None = None  # when this request first met a 429
        while True:
            attempts += 1
            status: int | None = None
            retry_after: float | None = None
            reason = ""
            final_url = request.url
            # A host cooldown longer than what this request may still wait fails it at once
            # (another request's Retry-After of 700 s must not put this one to sleep).
            spent = 0.0 if first_limited is None else clock.monotonic() - first_limited
            max_wait = max(0.0, settings.max_retry_after - spent)
            try:
                final_url, status, response_headers, body = await self._follow(request, max_wait)
            except WaitTooLong as exc:
                raise self._rate_limited(request.url, attempts, exc.seconds, exc.source) from None
            except ValueError as exc:
                # aiohttp refusing the request itself (e.g. credentials in the URL and a token):
                # no retry will change that, and it must not escape as a bare ValueError.
                raise FetchError(f"request refused: {exc}", url=request.url) from None
            except (aiohttp.ClientError, TimeoutError) as exc:
                # connection errors, timeouts, the deadline, truncated bodies, dropped connections
                reason = type(exc).__name__ if str(exc) == "" else f"{type(exc).__name__}: {exc}"
            else:
                if 200 <= status < 300:
                    if not body and not allow_empty:
                        raise EmptyBody(url=final_url)
                    result = FetchResult(final_url, status, response_headers, body, attempts)
                    if rate_limited is None or not rate_limited(result):
                        return result
                    status = 429  # overload reported in the body: handled as a 429 below
                if status == 304:
                    return FetchResult(final_url, status, response_headers, b"", attempts)
                if status in NOT_FOUND_STATUSES:
                    raise NotFound(url=final_url, status=status, attempts=attempts)
                if status != 429 and status < 500:
                    raise HttpError(url=final_url, status=status)
                if status in (429, 503):
                    retry_after = parse_retry_after(
                        response_headers.get("retry-after"), clock.wall()
                    )
            host = origin_of(final_url)
            if status == 429:
                # Rate limited: wait our turn for as long as max_retry_after allows.
                self.stats.rate_limited[lane.name] += 1
                limited += 1
                now = clock.monotonic()
                first_limited = now if first_limited is None else first_limited
                spent = now - first_limited
                if retry_after is not None:
                    if spent + retry_after > settings.max_retry_after:
                        # Never sleep a shortened time, never hammer: give up now, and keep
                        # the host paused so the other requests fail fast too.
                        await self.limiter.pause(host, retry_after, WaitReason.RETRY_AFTER)
                        raise self._rate_limited(
                            final_url, attempts, retry_after, WaitReason.RETRY_AFTER
                        )
                    await self.limiter.pause(host, retry_after, WaitReason.RETRY_AFTER)
                else:
                    await self.limiter.slow_down(lane)
                    await self.limiter.pause(host, self.backoff(limited - 1), WaitReason.BACKOFF)
                self.stats.retries[lane.name] += 1
                continue
            failures += 1
            if failures > settings.retries:
                raise TransientError(
                    url=final_url, attempts=attempts, last_status=status, reason=reason
                )
            self.stats.retries[lane.name] += 1
            if retry_after is not None and retry_after <= settings.max_retry_after:
                # a 503 that says when
                await self.limiter.pause(host, retry_after, WaitReason.RETRY_AFTER)
            else:
                backoff = self.backoff(failures - 1)
                await wait_or_stop(clock, backoff, WaitReason.BACKOFF, self.stop, lane.name)

    async def download(
        self, url: str, destination: Path, max_bytes: int, *, lane: str | None = None
    ) -> int:
        """Stream a large body (a database dump) to a file: paced like `get`, never held in
        memory, bounded by `download_deadline`. One attempt; errors are typed like `get`'s."""
        chosen = self.lane(url, lane)
        stop = self.stop
        await self.limiter.acquire(chosen, origin_of(url), self.settings.max_retry_after, stop)
        if stop is not None and stop.requested:
            raise Unsent(WaitReason.STOP)
        self.stats.requests[chosen.name] += 1
        size = 0
        headers = self._auth(chosen, url)
        try:
            async with asyncio.timeout(self.settings.download_deadline):
                # not the exchange deadline (a dump takes longer): the download's own, above
                async with self.session.get(
                    url, headers=headers, timeout=self._timeouts(total=None)
                ) as response:
                    if response.status in NOT_FOUND_STATUSES:
                        raise NotFound(url=url, status=response.status)
                    if response.status >= 400:
                        raise HttpError(url=url, status=response.status)
                    with open(destination, "wb") as handle:
                        async for chunk in response.content.iter_chunked(1 << 20):
                            size += len(chunk)
                            if size > max_bytes:
                                raise BodyTooLarge(url=url, limit=max_bytes)
                            handle.write(chunk)
        except TimeoutError:
            raise TransientError(
                url=url, attempts=1, last_status=None, reason="download deadline passed"
            ) from None
        except aiohttp.ClientError as exc:
            raise TransientError(url=url, attempts=1, last_status=None, reason=str(exc)) from None
        except WaitTooLong as exc:
            raise self._rate_limited(url, 1, exc.seconds, exc.source) from None
        if size == 0:
            raise EmptyBody(url=url)
        return size

    def _rate_limited(
        self, url: str, attempts: int, seconds: float, source: WaitReason
    ) -> RateLimited:
        """A request that may not wait that long: when it may go again (wall clock, UTC) and
        who holds it back, so its work waits instead of failing."""
        until = datetime.fromtimestamp(self.clock.wall(), UTC) + timedelta(seconds=seconds)
        return RateLimited(
            url=url,
            attempts=attempts,
            retry_after=seconds,
            source=str(source),
            until=until.replace(tzinfo=None, microsecond=0) + timedelta(seconds=1),
        )

    def _auth(self, lane: Lane, url: str) -> dict[str, str]:
        """The lane's token, only for URLs inside the lane (never another lane on the same
        host, never a redirect target elsewhere)."""
        if lane.token is not None and lane.covers(url):
            return {"Authorization": f"Bearer {lane.token}"}
        return {}

    async def _follow(
        self, request: _Request, max_wait: float | None
    ) -> tuple[str, int, CIMultiDictProxy[str], bytes]:
        current = request.url
        stop = self.stop
        for _hop in range(self.settings.max_redirects + 1):
            host = origin_of(current)
            await self.limiter.acquire(request.lane, host, max_wait, stop)
            if stop is not None and stop.requested:  # (a shared limiter answers over the network)
                raise Unsent(WaitReason.STOP)
            status, headers, body = await self._exchange(request, current, host)
            if status not in REDIRECT_STATUSES:
                return current, status, headers, body
            location = headers.get("location")
            if not location:
                raise HttpError(url=current, status=status, detail="redirect without Location")
            current = urljoin(current, location)
        raise HttpError(url=request.url, status=310, detail="too many redirects")

    async def _exchange(
        self, request: _Request, url: str, host: str
    ) -> tuple[int, CIMultiDictProxy[str], bytes]:
        """One HTTP exchange to `url` on `host` (its origin), bounded as a whole by the
        deadline (a trickling body included)."""
        lane = request.lane
        validators = request.validators
        headers: dict[str, str] | None = None  # the session's own headers only: most requests
        if request.headers or lane.token is not None or validators is not None:
            headers = {**(request.headers or {}), **self._auth(lane, url)}
            if validators is not None:
                if validators.etag:
                    headers["If-None-Match"] = validators.etag
                if validators.last_modified:
                    headers["If-Modified-Since"] = validators.last_modified
        self.stats.requests[lane.name] += 1
        limit = self.settings.max_body_bytes
        try:
            async with self.session.request(
                request.method,
                url,
                headers=headers,
                json=request.json_body,
                allow_redirects=False,
            ) as response:
                self.stats.statuses[host][response.status] += 1
                declared = response.headers.get("content-length")
                if declared is not None and declared.isdigit() and int(declared) > limit:
                    raise BodyTooLarge(url=url, limit=limit)
                if declared is not None and "content-encoding" not in response.headers:
                    # Not compressed and declared within the limit: what arrives is what was
                    # declared (aiohttp stops at Content-Length), so one read is safe and
                    # saves the chunk loop on every small page.
                    body = await response.read()
                    self.stats.bytes[lane.name] += len(body)
                    return response.status, response.headers, body
                chunks: list[bytes] = []
                size = 0
                # decoded chunks: the limit holds after decompression too
                async for chunk in response.content.iter_chunked(65536):
                    size += len(chunk)
                    if size > limit:
                        raise BodyTooLarge(url=url, limit=limit)
                    chunks.append(chunk)
                self.stats.bytes[lane.name] += size
                return response.status, response.headers, b"".join(chunks)
        except TimeoutError as exc:
            # aiohttp's connect and per-read timeouts are ServerTimeoutErrors and say which;
            # its `total` (our deadline) is a plain TimeoutError that says nothing
            if isinstance(exc, aiohttp.ServerTimeoutError):
                raise
            raise TimeoutError(f"deadline of {self.settings.deadline:g}s passed") from None
