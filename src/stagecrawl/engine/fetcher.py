"""The one place that talks HTTP: retries, Retry-After, cooldowns, size limits, validators.

Transport: one shared aiohttp `ClientSession` per run. httpx was the first choice, but its
connection pool slows down under many concurrent requests to one host (httpx#3215):
bench/engine.py measured a bare aiohttp loop 8-10x faster than a bare httpx loop at concurrency
16-64 against the same loopback origin, so aiohttp won. aiohttp speaks HTTP/1.1 only; with
keep-alive connections that costs nothing measurable against the index or the API at the rates
stagecrawl is allowed to use.

The retry ladder is hand-written rather than delegated to tenacity or stamina: a 429 must pause
the whole origin (every waiter, not only the request that saw it) through the shared limiter,
a Retry-After larger than the allowed maximum must fail at once instead of being shortened, and
both libraries cap total retry time by default in ways that cut a long Retry-After short.
"""

from __future__ import annotations

import email.utils
import json
import random
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy

from stagecrawl import __version__
from stagecrawl.engine.clock import Clock, RealClock
from stagecrawl.engine.ratelimit import LocalLimiter, OriginLimiter, origin_of
from stagecrawl.errors import (
    BodyTooLarge,
    ConfigError,
    EmptyBody,
    HttpError,
    NotFound,
    RateLimited,
    TransientError,
)

MiB = 1024 * 1024
NOT_FOUND_STATUSES = frozenset({404, 410, 451})
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


@dataclass
class FetchSettings:
    """Fetcher settings with their documented defaults (see docs/operations.md)."""

    timeout: float = 15.0
    retries: int = 3
    backoff_base: float = 1.0
    backoff_cap: float = 60.0
    max_retry_after: float = 600.0
    max_body_bytes: int = 64 * MiB
    max_redirects: int = 5
    max_connections: int = 64
    contact: str | None = None
    # origin ("https://host") -> bearer token; sent to that origin only, never after a redirect
    # to another host. Filled from environment variables by the pipelines, never from files.
    tokens: dict[str, str] = field(default_factory=dict)

    def user_agent(self) -> str:
        if self.contact:
            return f"stagecrawl/{__version__} (+{self.contact})"
        return f"stagecrawl/{__version__}"


def require_contact(settings: FetchSettings, why: str) -> None:
    """Refuse to start against an origin whose policy asks for a contact in the User-Agent."""
    if not settings.contact or not settings.contact.strip():
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
        return Validators(self.headers.get("etag"), self.headers.get("last-modified"))

    @property
    def text(self) -> str:
        return self.content.decode("utf-8")

    def json(self) -> Any:
        return json.loads(self.content)


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
    requests: Counter[str] = field(default_factory=Counter)
    statuses: dict[str, Counter[int]] = field(default_factory=lambda: defaultdict(Counter))
    rate_limited: Counter[str] = field(default_factory=Counter)
    retries: Counter[str] = field(default_factory=Counter)
    bytes: Counter[str] = field(default_factory=Counter)


class Fetcher:
    """One shared aiohttp session per run, with politeness and typed errors around it."""

    def __init__(
        self,
        settings: FetchSettings | None = None,
        limiter: OriginLimiter | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings or FetchSettings()
        self.clock = clock or RealClock()
        self.limiter: OriginLimiter = limiter or LocalLimiter(clock=self.clock)
        self.rng = rng or random.Random()
        self.stats = FetchStats()
        self._tokens = {origin_of(k): v for k, v in self.settings.tokens.items()}
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        """Created on first use, inside the running event loop, as aiohttp requires."""
        if self._session is None:
            s = self.settings
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=s.max_connections),
                timeout=aiohttp.ClientTimeout(
                    total=None, connect=s.timeout, sock_connect=s.timeout, sock_read=s.timeout
                ),
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
        closer = getattr(self.limiter, "aclose", None)
        if closer is not None:
            await closer()

    def backoff(self, retry_number: int) -> float:
        """Full jitter: uniform(0, min(cap, base * 2**n)), so concurrent retries decorrelate."""
        s = self.settings
        return self.rng.uniform(0.0, min(s.backoff_cap, s.backoff_base * 2**retry_number))

    async def get(
        self,
        url: str,
        *,
        validators: Validators | None = None,
        headers: dict[str, str] | None = None,
        allow_empty: bool = False,
        rate_limited: Callable[[FetchResult], bool] | None = None,
    ) -> FetchResult:
        """GET with retries. Returns a 2xx result or a 304 (`not_modified`); raises FetchError.

        `rate_limited` lets an origin that signals overload inside a 200 (Wikimedia's maxlag
        error) be treated exactly like a 429: cooldown, Retry-After, the same ladder."""
        settings = self.settings
        attempts = 0
        while True:
            attempts += 1
            status: int | None = None
            retry_after: float | None = None
            reason = ""
            final_url = url
            try:
                final_url, response_status, response_headers, body = await self._follow(
                    url, validators, headers
                )
                status = response_status
            except (aiohttp.ClientError, TimeoutError) as exc:
                # connection errors, timeouts, truncated bodies, dropped connections
                reason = type(exc).__name__
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
                        response_headers.get("retry-after"), self.clock.wall()
                    )
                    if retry_after is not None and retry_after > settings.max_retry_after:
                        # Do not sleep a shortened time and do not hammer: give up now.
                        await self.limiter.pause(origin_of(final_url), retry_after)
                        raise RateLimited(url=final_url, attempts=attempts, retry_after=retry_after)
            origin = origin_of(final_url)
            if status == 429:
                self.stats.rate_limited[origin] += 1
            if attempts > settings.retries:
                if status == 429:
                    raise RateLimited(url=final_url, attempts=attempts, retry_after=retry_after)
                raise TransientError(
                    url=final_url, attempts=attempts, last_status=status, reason=reason
                )
            self.stats.retries[origin] += 1
            delay = retry_after if retry_after is not None else self.backoff(attempts - 1)
            if status == 429 or retry_after is not None:
                # The origin told us to slow down: every request to it waits, not only this one.
                await self.limiter.pause(origin, delay)
            else:
                await self.clock.sleep(delay)

    async def download(self, url: str, destination: Path, max_bytes: int) -> int:
        """Stream a large body (a database dump) to a file: polite like `get`, never held in
        memory. One attempt; errors are typed like `get`'s."""
        origin = origin_of(url)
        await self.limiter.acquire(origin)
        self.stats.requests[origin] += 1
        size = 0
        try:
            async with self.session.get(url) as response:
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
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise TransientError(url=url, attempts=1, last_status=None, reason=str(exc)) from None
        if size == 0:
            raise EmptyBody(url=url)
        return size

    async def _follow(
        self, url: str, validators: Validators | None, extra: dict[str, str] | None
    ) -> tuple[str, int, CIMultiDictProxy[str], bytes]:
        current = url
        for _hop in range(self.settings.max_redirects + 1):
            status, headers, body = await self._send(current, validators, extra)
            if status not in REDIRECT_STATUSES:
                return current, status, headers, body
            location = headers.get("location")
            if not location:
                raise HttpError(url=current, status=status, detail="redirect without Location")
            current = urljoin(current, location)
        raise HttpError(url=url, status=310, detail="too many redirects")

    async def _send(
        self, url: str, validators: Validators | None, extra: dict[str, str] | None
    ) -> tuple[int, CIMultiDictProxy[str], bytes]:
        origin = origin_of(url)
        await self.limiter.acquire(origin)
        headers: dict[str, str] = dict(extra or {})
        token = self._tokens.get(origin)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if validators is not None:
            if validators.etag:
                headers["If-None-Match"] = validators.etag
            if validators.last_modified:
                headers["If-Modified-Since"] = validators.last_modified
        self.stats.requests[origin] += 1
        limit = self.settings.max_body_bytes
        async with self.session.get(url, headers=headers, allow_redirects=False) as response:
            self.stats.statuses[origin][response.status] += 1
            declared = response.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > limit:
                raise BodyTooLarge(url=url, limit=limit)
            chunks: list[bytes] = []
            size = 0
            # decoded chunks: the limit holds after decompression too
            async for chunk in response.content.iter_chunked(65536):
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge(url=url, limit=limit)
                chunks.append(chunk)
            self.stats.bytes[origin] += size
            return response.status, response.headers, b"".join(chunks)
