"""crates.io origins as the pipeline sees them: the sparse index (authoritative) and the
JSON API (enrichment), each answer cached for the run so a crate costs one request of each."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

from stagecrawl.crates.api import ApiCrate, parse_api_crate
from stagecrawl.crates.index import IndexProblem, IndexVersion, parse_index_file
from stagecrawl.crates.names import identity_key, index_path, spelling_variants
from stagecrawl.engine.fetcher import Fetcher, FetchResult, Validators
from stagecrawl.engine.ratelimit import origin_of
from stagecrawl.engine.runcache import PARSED_WEIGHT, RunCache
from stagecrawl.errors import NotFound, TransientError

log = logging.getLogger("stagecrawl.crates")


@dataclass(frozen=True)
class IndexEntry:
    real_name: str
    versions: list[IndexVersion]  # the readable lines
    validators: Validators
    sha256: str
    problems: tuple[IndexProblem, ...] = ()  # lines skipped as unreadable
    raw_bytes: int = 0  # the size of the file as served (the run cache weighs entries by it)

    def problem_lines(self) -> list[str]:
        return [str(p) for p in self.problems]

    def unreadable_reason(self, version: str) -> str | None:
        """Why a version absent from the readable lines may still be in the index: its own
        line is unreadable, or some line is whose version cannot be made out (then "not
        found" would be a guess). None when every bad line is known to be another version."""
        for problem in self.problems:
            if problem.version == version:
                return f"index line {problem.line} unreadable: {problem.reason}"
        unknown = [str(p.line) for p in self.problems if p.version is None]
        if unknown:
            lines = ", ".join(unknown[:5]) + (" …" if len(unknown) > 5 else "")
            return f"not in the readable index; index line(s) {lines} unreadable"
        return None


def index_entry(content: bytes, validators: Validators, name: str | None = None) -> IndexEntry:
    """An index file as the pipeline keeps it (the file of crate `name`: lines naming another
    crate are unreadable); its unreadable lines are logged (one warning per crate) and carried
    in `problems` (said once, in the command's report; here only at debug level). Raises
    IndexFormatError when no line is readable."""
    parsed = parse_index_file(content, identity_key(name) if name is not None else None)
    real = parsed.versions[-1].name
    if parsed.problems:
        shown = "; ".join(str(p) for p in parsed.problems[:5])
        more = f" (+{len(parsed.problems) - 5} more)" if len(parsed.problems) > 5 else ""
        log.debug(
            "index of %s: %d unreadable line(s) skipped, the other %d versions used: %s%s",
            real,
            len(parsed.problems),
            len(parsed.versions),
            shown,
            more,
        )
    digest = hashlib.sha256(content).hexdigest()
    return IndexEntry(
        real, parsed.versions, validators, digest, tuple(parsed.problems), len(content)
    )


def explain(exc: Exception) -> str:
    """A failure as the user should read it: an origin that cannot be reached at all says so
    first (`cannot reach index.crates.io: ClientConnectorDNSError: …`), with the whole reason."""
    unreachable = isinstance(exc, TransientError) and (
        exc.last_status is None
        and exc.reason.startswith(("ClientConnector", "ClientProxyConnection"))
    )
    if not isinstance(exc, TransientError) or not unreachable:
        return str(exc)
    host = origin_of(exc.url).split("://", 1)[-1]
    return f"cannot reach {host}: {exc.reason} (after {exc.attempts} attempt(s)): {exc.url}"


class CratesClient:
    def __init__(self, fetcher: Fetcher, index_url: str, api_url: str) -> None:
        self.fetcher = fetcher
        self.index_url = index_url.rstrip("/") + "/"
        self.api_url = api_url.rstrip("/") + "/"
        self._index: RunCache[IndexEntry] = RunCache(
            weigh=lambda entry: PARSED_WEIGHT * entry.raw_bytes
        )
        self._api: RunCache[ApiCrate | None] = RunCache(weigh=_api_weight)
        self.index_requests = 0
        self.api_requests = 0

    async def index(self, name: str) -> IndexEntry:
        """The crate's index file under its real spelling; tries separator variants of a name
        not found as given. Raises NotFound when no variant exists, IndexFormatError on a
        malformed file."""
        return await self._index.get(identity_key(name), lambda: self._fetch_index(name))

    def keep(self, name: str, entry: IndexEntry) -> None:
        """An index file got otherwise (a refresh found it changed), kept for the run."""
        self._index.put(identity_key(name), entry)

    async def _fetch_index(self, name: str) -> IndexEntry:
        last: NotFound | None = None
        for variant in spelling_variants(name):
            self.index_requests += 1
            try:
                result = await self._get(self.index_url + index_path(variant))
            except NotFound as exc:
                last = exc
                continue
            return index_entry(result.content, result.validators, variant)
        assert last is not None
        raise last

    async def api(self, real_name: str) -> ApiCrate | None:
        """The API's view of a crate, or None when the API does not know it (404)."""
        return await self._api.get(identity_key(real_name), lambda: self._fetch_api(real_name))

    async def _fetch_api(self, real_name: str) -> ApiCrate | None:
        self.api_requests += 1
        try:
            result = await self._get(f"{self.api_url}api/v1/crates/{real_name}")
        except NotFound:
            return None
        return parse_api_crate(result.json())

    async def _get(self, url: str) -> FetchResult:
        return await self.fetcher.get(url)

    def forget(self, name: str) -> None:
        """The crate's rows are built: its index and API answers need not stay in memory."""
        key = identity_key(name)
        self._index.forget(key)
        self._api.forget(key)


def _api_weight(crate: ApiCrate | None) -> int:
    """About what a parsed API answer holds (measured: ~250 bytes a version, 1 KB a crate)."""
    return 0 if crate is None else 1024 + 256 * len(crate.versions)
