"""The units that flow through the crawler: requests in, items out."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

if TYPE_CHECKING:  # not at import: `stagecrawl status` reads frontiers without aiohttp
    from stagecrawl.engine.fetcher import Validators

# The common case, read with plain string operations (urlsplit + parse_qsl + urlencode cost
# more than a fetch's own bookkeeping): an http(s) URL whose host is plain (no userinfo, no
# IPv6 literal, no port or a numeric one), whose path has no characters urlsplit would treat
# specially, and whose query pairs are unreserved characters around one `=`, which
# parse_qsl + urlencode leave unchanged. Anything else takes the general path below; the two
# agree on every URL the fast path accepts (tests/engine/test_request.py).
_PLAIN_HOST = re.compile(r"[A-Za-z0-9.-]+(?::([0-9]{1,5}))?")
_PLAIN_PATH = re.compile(r"[^?#\s\x00-\x1f\x7f]*")
_PLAIN_PAIR = re.compile(r"[A-Za-z0-9._~-]+=[A-Za-z0-9._~-]*")
_DEFAULT_PORTS = {"http": 80, "https": 443}
# Faster still, the commonest case of all: a URL with a lowercase scheme and host, a path, no
# fragment, a port that is neither a default nor zero-padded and plain query pairs is its own
# key once its pairs are in order: one match, and at most a sort (none when in order already).
_PAIR = r"[A-Za-z0-9._~-]+=[A-Za-z0-9._~-]*"
_CANONICAL = re.compile(
    rf"(https?)://[a-z0-9.-]+(?::([1-9][0-9]{{0,4}}))?/[^?#\s\x00-\x1f\x7f]*(?:\?({_PAIR}(?:&{_PAIR})*))?"
)


def canonical_url(url: str) -> str:
    """The dedup form of a URL: lowercase scheme and host, no default port, sorted query, no
    fragment. Path case is kept (paths are case-sensitive on most origins)."""
    fast = _canonical_lower(url)
    if fast is None:
        fast = _canonical_plain(url)
    return fast if fast is not None else _canonical_general(url)


def _canonical_lower(url: str) -> str | None:
    match = _CANONICAL.fullmatch(url)
    if match is None:
        return None
    scheme, port, query = match.groups()
    if port is not None and (int(port) > 65535 or int(port) == _DEFAULT_PORTS[scheme]):
        return None
    if query is None or "&" not in query:
        return url
    pairs = [pair.split("=", 1) for pair in query.split("&")]
    ordered = sorted(pairs)  # by (key, value), as the general path sorts
    if pairs == ordered:
        return url
    return url[: match.start(3)] + "&".join("=".join(pair) for pair in ordered)


def _canonical_plain(url: str) -> str | None:
    scheme_end = url.find("://")
    if scheme_end <= 0:
        return None
    scheme = url[:scheme_end].lower()
    if scheme not in _DEFAULT_PORTS:
        return None
    rest = url[scheme_end + 3 :].split("#", 1)[0]
    head, question, query = rest.partition("?")
    slash = head.find("/")
    authority, path = (head, "/") if slash < 0 else (head[:slash], head[slash:])
    host = _PLAIN_HOST.fullmatch(authority)
    if host is None or not authority or not _PLAIN_PATH.fullmatch(path):
        return None
    port = host.group(1)
    netloc = authority.lower()
    if port is not None:
        number = int(port)
        name = netloc[: -len(port) - 1]
        if number > 65535 or not name:
            return None
        netloc = name if number == _DEFAULT_PORTS[scheme] else f"{name}:{number}"
    if not question or not query:
        return f"{scheme}://{netloc}{path}"
    pairs = query.split("&")
    if not all(_PLAIN_PAIR.fullmatch(pair) for pair in pairs):
        return None
    if len(pairs) > 1:
        pairs = ["=".join(kv) for kv in sorted(pair.split("=", 1) for pair in pairs)]
    return f"{scheme}://{netloc}{path}?{'&'.join(pairs)}"


def _canonical_general(url: str) -> str:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:  # an IPv6 literal: urlsplit drops its brackets, the URL needs them
        host = f"[{host}]"
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
        from stagecrawl.engine.fetcher import Validators

        return Validators(self.etag, self.last_modified)


@dataclass(frozen=True)
class Item:
    """A record for a sink. Sinks upsert by (`store`, `key`), so writing an item twice after a
    crash-and-resume leaves the same result as writing it once."""

    key: str
    value: Any
    store: str = "default"
