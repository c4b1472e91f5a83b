"""Every exception stagecrawl raises on purpose lives here, so callers import one module."""

from __future__ import annotations

from datetime import datetime
from urllib.parse import urlsplit

from stagecrawl.pauses import utc_moment


class StagecrawlError(Exception):
    """Base class of all stagecrawl errors."""


class ConfigError(StagecrawlError):
    """A setting, flag or environment variable is missing or malformed."""


class InputError(StagecrawlError):
    """User input (a crate name, a seeds file, a lock file, a URL) is malformed."""


class StorageError(StagecrawlError):
    """The database or an output store cannot be opened or written."""


class UnreadableAnswer(ValueError):
    """An origin's answer that cannot be read as what was asked for (an index file without
    one readable line, HTML where JSON was asked): a failure of that unit, on its ladder.
    `prefix` opens the stored reason (a registry says what kind of answer it was)."""

    prefix = ""


class DatabaseUnavailable(StagecrawlError):
    """The database stayed unreachable past the outage bound (`outage_seconds`) mid-run: the
    worker stops (exit 1); what it holds is given back, or its leases run out."""


class LimiterUnavailable(StagecrawlError):
    """The shared rate limit (Redis) went away mid-run: stop rather than pace blind."""


class FetchError(StagecrawlError):
    """Base of the typed fetch errors: the request was not turned into usable content."""

    kind = "fetch"

    def __init__(self, message: str, *, url: str, attempts: int = 1) -> None:
        super().__init__(message)
        self.url = url
        self.attempts = attempts


class NotFound(FetchError):
    """404 or 410 (or 451): the resource does not exist. Never retried."""

    kind = "not_found"

    def __init__(self, *, url: str, status: int, attempts: int = 1) -> None:
        super().__init__(f"{status} not found: {url}", url=url, attempts=attempts)
        self.status = status


# What holds a rate-limited request back, in words, by source (engine.ratelimit.WaitReason's
# values: errors.py imports nothing of the engine).
WAIT_SOURCES = {
    "retry_after": "the server asked to wait {s:.0f}s (Retry-After)",
    "backoff": "our backoff after 429s without Retry-After needs {s:.0f}s more",
    "budget": "our request budget for this lane is spent for {s:.0f}s more",
    "lane_rate": "our lane's rate holds it {s:.0f}s",
}


WAIT_PHRASES = {
    "retry_after": "{host} asked for a pause until {until} (server Retry-After)",
    "backoff": "{host} answered 429 without Retry-After; our backoff holds it until {until}",
    "budget": "our request budget for {host} is spent until {until}",
    "lane_rate": "our lane's rate for {host} holds it until {until}",
}


class RateLimited(FetchError):
    """The origin keeps refusing us (429), or the request would wait longer than it is allowed
    to. Not a failure of the work that asked: it was not attempted (or refused as a whole),
    so it waits for `until` and climbs no retry ladder.

    `source` says who holds it back (a WaitReason value: retry_after, backoff, budget,
    lane_rate); `retry_after` the seconds; `until` when it may go again (UTC, naive)."""

    kind = "rate_limited"

    def __init__(
        self,
        *,
        url: str,
        attempts: int,
        retry_after: float | None,
        source: str = "retry_after",
        until: datetime | None = None,
    ) -> None:
        asked = ""
        if retry_after is not None:
            asked = ", " + WAIT_SOURCES.get(source, WAIT_SOURCES["retry_after"]).format(
                s=retry_after
            )
            if until is not None:
                asked += f" (until {utc_moment(until)})"
        super().__init__(
            f"rate limited after {attempts} attempt(s){asked}: {url}", url=url, attempts=attempts
        )
        self.retry_after = retry_after
        self.source = source
        self.until = until

    @property
    def pause_text(self) -> str:
        """Why the work waits and until when, naming the source, in one phrase:
        `index.crates.io asked for a pause until 14:05:07 UTC (server Retry-After)`."""
        parts = urlsplit(self.url)
        host = parts.netloc.rsplit("@", 1)[-1] or self.url
        when = utc_moment(self.until) if self.until is not None else "later"
        return WAIT_PHRASES.get(self.source, WAIT_PHRASES["retry_after"]).format(
            host=host, until=when
        )


class TransientError(FetchError):
    """Connection errors, timeouts, 5xx, truncated bodies: retried, and this is what is left."""

    kind = "transient"

    def __init__(
        self, *, url: str, attempts: int, last_status: int | None, reason: str = ""
    ) -> None:
        status = f"status {last_status}" if last_status is not None else reason or "no response"
        super().__init__(
            f"transient failure after {attempts} attempt(s) ({status}): {url}",
            url=url,
            attempts=attempts,
        )
        self.last_status = last_status
        self.reason = reason


class EmptyBody(FetchError):
    """A 200 with no content where content is expected: absence must never be stored as data."""

    kind = "empty_body"

    def __init__(self, *, url: str) -> None:
        super().__init__(f"empty body: {url}", url=url)


class BodyTooLarge(FetchError):
    """The (decompressed) body exceeds the configured limit."""

    kind = "too_large"

    def __init__(self, *, url: str, limit: int) -> None:
        super().__init__(f"body larger than {limit} bytes: {url}", url=url)
        self.limit = limit


class HttpError(FetchError):
    """Any other 4xx, or a redirect we will not follow: not retried."""

    kind = "http_error"

    def __init__(self, *, url: str, status: int, detail: str = "") -> None:
        extra = f" ({detail})" if detail else ""
        super().__init__(f"HTTP {status}{extra}: {url}", url=url)
        self.status = status
