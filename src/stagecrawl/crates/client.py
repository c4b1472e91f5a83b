"""crates.io origins as the pipeline sees them: the sparse index (authoritative) and the
JSON API (enrichment), each answer cached for the run so a crate costs one request of each."""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from stagecrawl.crates.api import ApiCrate, parse_api_crate
from stagecrawl.crates.index import IndexVersion, parse_index_file
from stagecrawl.crates.names import identity_key, index_path, spelling_variants
from stagecrawl.engine.fetcher import Fetcher, Validators
from stagecrawl.errors import NotFound

T = TypeVar("T")


class RunCache(Generic[T]):
    """Futures by key, so concurrent askers share one request; the oldest finished entries are
    dropped past `size` so a registry-sized run keeps bounded memory."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._entries: OrderedDict[str, asyncio.Future[T]] = OrderedDict()

    async def get(self, key: str, make: Callable[[], Awaitable[T]]) -> T:
        future = self._entries.get(key)
        if future is None:
            future = asyncio.ensure_future(make())
            self._entries[key] = future
            self._evict()
        return await asyncio.shield(future)

    def _evict(self) -> None:
        while len(self._entries) > self.size:
            oldest_key, oldest = next(iter(self._entries.items()))
            if not oldest.done():
                break
            del self._entries[oldest_key]


@dataclass(frozen=True)
class IndexEntry:
    real_name: str
    versions: list[IndexVersion]
    validators: Validators
    sha256: str


class CratesClient:
    def __init__(self, fetcher: Fetcher, index_url: str, api_url: str) -> None:
        self.fetcher = fetcher
        self.index_url = index_url.rstrip("/") + "/"
        self.api_url = api_url.rstrip("/") + "/"
        self._index: RunCache[IndexEntry] = RunCache()
        self._api: RunCache[ApiCrate | None] = RunCache()
        self.index_requests = 0
        self.api_requests = 0

    async def index(self, name: str) -> IndexEntry:
        """The crate's index file under its real spelling; tries separator variants of a name
        not found as given. Raises NotFound when no variant exists, IndexFormatError on a
        malformed file."""
        return await self._index.get(identity_key(name), lambda: self._fetch_index(name))

    async def _fetch_index(self, name: str) -> IndexEntry:
        last: NotFound | None = None
        for variant in spelling_variants(name):
            self.index_requests += 1
            try:
                result = await self.fetcher.get(self.index_url + index_path(variant))
            except NotFound as exc:
                last = exc
                continue
            versions = parse_index_file(result.content)
            digest = hashlib.sha256(result.content).hexdigest()
            return IndexEntry(versions[-1].name, versions, result.validators, digest)
        assert last is not None
        raise last

    async def api(self, real_name: str) -> ApiCrate | None:
        """The API's view of a crate, or None when the API does not know it (404)."""
        return await self._api.get(identity_key(real_name), lambda: self._fetch_api(real_name))

    async def _fetch_api(self, real_name: str) -> ApiCrate | None:
        self.api_requests += 1
        try:
            result = await self.fetcher.get(f"{self.api_url}api/v1/crates/{real_name}")
        except NotFound:
            return None
        return parse_api_crate(result.json())
