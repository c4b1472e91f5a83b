"""The GOPROXY protocol (go.dev/ref/mod) under any base path, case-encoded, with
`Disable-Module-Fetch: true` (the proxy never fetches an uncached module for us), and the index
feed (`since` inclusive: rows deduplicated on path and version), a lane each."""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Iterable
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote

from stagecrawl.engine.fetcher import Fetcher, FetchResult, Validators
from stagecrawl.engine.runcache import RunCache
from stagecrawl.go.versions import escape
from stagecrawl.jsoncodec import loads

PROXY, INDEX, ZIP = "proxy", "index", "zip"
NO_FETCH = {"Disable-Module-Fetch": "true"}
FEED_PAGE = 2000  # the feed's largest page


class FeedRow(NamedTuple):
    path: str
    version: str
    timestamp: str


def match_private(patterns: list[str], path: str) -> bool:
    """x/mod module.MatchPrefixPatterns: a glob (path.Match, `*` within one element) matches
    the path's prefix of as many elements as it has."""
    elements = path.split("/")
    for pattern in patterns:
        parts = pattern.strip().strip("/").split("/")
        fits = parts != [""] and len(parts) <= len(elements)
        if fits and all(fnmatchcase(e, p) for e, p in zip(elements, parts, strict=False)):
            return True
    return False


def private_patterns(configured: str) -> list[str]:
    """--private (or STAGECRAWL_GO_PRIVATE), GOPRIVATE and GONOPROXY, one list."""
    texts = (configured, os.environ.get("GOPRIVATE", ""), os.environ.get("GONOPROXY", ""))
    return [p for text in texts for p in text.split(",") if p.strip()]


class GoClient:
    """One run's requests to the proxy, the feed and the zips; what a seeder (or a refresh)
    fetched is kept in the run cache for the collector beside it, and dropped once a module
    is collected."""

    def __init__(self, fetcher: Fetcher, proxy_url: str, index_url: str) -> None:
        self.fetcher = fetcher
        self.proxy = proxy_url.rstrip("/") + "/"
        self.index = index_url
        # weighed by their bytes (a parsed listing a little more: its versions are split)
        self._lists: RunCache[FetchResult] = RunCache(weigh=lambda r: 2 * len(r.content))
        self._mods: RunCache[str] = RunCache(weigh=lambda text: 64 + len(text))
        self.page = FEED_PAGE

    def _url(self, path: str, tail: str) -> str:
        return self.proxy + quote(escape(path), safe="/!~") + tail

    def forget(self, path: str, versions: Iterable[str]) -> None:
        """The module's rows are built: its answers need not stay in memory."""
        self._lists.forget(path)
        for version in versions:
            self._mods.forget(f"{path}@{version}")

    async def listing(self, path: str, validators: Validators | None = None) -> FetchResult:
        """The @v/list answer (a 304 when `validators` still hold)."""
        if validators is None:
            return await self._lists.get(path, lambda: self._listing(path, None))
        result = await self._listing(path, validators)
        if not result.not_modified:
            self._lists.put(path, result)  # changed: the collect that follows reads it
        return result

    async def _listing(self, path: str, validators: Validators | None) -> FetchResult:
        return await self.fetcher.get(
            self._url(path, "/@v/list"), lane=PROXY, validators=validators, headers=NO_FETCH,
            allow_empty=True,
        )  # fmt: skip

    async def info(self, path: str, version: str) -> dict[str, Any]:
        url = self._url(path, f"/@v/{quote(escape(version), safe='!+~')}.info")
        found = (await self.fetcher.get(url, lane=PROXY, headers=NO_FETCH)).json()
        if not isinstance(found, dict) or not isinstance(found.get("Version"), str):
            raise ValueError(f"{path}@{version}: .info is not a JSON object with a Version")
        return found

    async def mod(self, path: str, version: str) -> str:
        """The go.mod text (immutable: kept for the run's collector)."""
        return await self._mods.get(f"{path}@{version}", lambda: self._mod(path, version))

    async def _mod(self, path: str, version: str) -> str:
        url = self._url(path, f"/@v/{quote(escape(version), safe='!+~')}.mod")
        result = await self.fetcher.get(url, lane=PROXY, headers=NO_FETCH)
        try:
            return result.content.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{path}@{version}: .mod is not UTF-8") from None

    async def zip(self, path: str, version: str, max_bytes: int) -> Path:
        """The module zip in a temporary file (the caller removes it), at most `max_bytes`."""
        url = self._url(path, f"/@v/{quote(escape(version), safe='!+~')}.zip")
        handle, name = tempfile.mkstemp(suffix=".zip")
        os.close(handle)
        try:
            await self.fetcher.download(url, Path(name), max_bytes, lane=ZIP)
        except BaseException:
            Path(name).unlink(missing_ok=True)
            raise
        return Path(name)

    async def feed(self, since: str) -> AsyncIterator[list[FeedRow]]:
        """The feed from `since` (inclusive), a page at a time, until a short page; a row
        seen on the page before (the boundary repeats) is left out."""
        seen: set[tuple[str, str]] = set()
        last = since
        while True:
            url = f"{self.index}?since={quote(since, safe=':')}&limit={self.page}"
            result = await self.fetcher.get(url, lane=INDEX, allow_empty=True)
            rows: list[FeedRow] = []
            for number, line in enumerate(result.text.splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    item = loads(line)
                    rows.append(FeedRow(*(str(item[k]) for k in ("Path", "Version", "Timestamp"))))
                except (ValueError, KeyError, TypeError):
                    raise ValueError(f"index feed line {number} is not a JSON row") from None
            fresh = {(row.path, row.version) for row in rows}
            last = rows[-1].timestamp if rows else last
            yield [row for row in rows if (row.path, row.version) not in seen]
            if len(fresh) < self.page or last == since:  # a page of one instant: no progress
                return
            seen, since = fresh, last
