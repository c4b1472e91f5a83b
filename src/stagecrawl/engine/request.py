"""The units that flow through the crawler: requests in, items out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from stagecrawl.engine.fetcher import Validators


def canonical_url(url: str) -> str:
    """The dedup form of a URL: lowercase scheme and host, no default port, sorted query, no
    fragment. Path case is kept (paths are case-sensitive on most origins)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    port = parts.port
    netloc = (
        host
        if port is None or (scheme, port) in {("http", 80), ("https", 443)}
        else (f"{host}:{port}")
    )
    query = urlencode(sorted(parse_qsl(parts.query, keep_blank_values=True)))
    return urlunsplit((scheme, netloc, parts.path or "/", query, ""))


@dataclass(frozen=True)
class Request:
    """A URL to fetch and the stage callback that parses it. `meta` must be JSON-serialisable
    (it is stored in the persistent frontier so that a killed crawl can resume)."""

    url: str
    callback: str = "parse"
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    key: str = ""
    etag: str | None = None
    last_modified: str | None = None

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", canonical_url(self.url))

    @property
    def validators(self) -> Validators | None:
        if self.etag is None and self.last_modified is None:
            return None
        return Validators(self.etag, self.last_modified)


@dataclass(frozen=True)
class Item:
    """A record for a sink. Sinks upsert by (`store`, `key`), so writing an item twice after a
    crash-and-resume leaves the same result as writing it once."""

    key: str
    value: Any
    store: str = "default"
