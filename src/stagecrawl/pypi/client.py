"""PyPI's three endpoints as the pipeline sees them, each a lane of its own: the Simple API
(`index`, authoritative), the JSON API (`api`, enrichment; its 301s to the display name are
followed, relative Location included) and the files host (`files`, PEP 658 core metadata)."""

from __future__ import annotations

import hashlib
from dataclasses import replace

from stagecrawl.engine.fetcher import Fetcher, FetchResult, Validators
from stagecrawl.engine.runcache import PARSED_WEIGHT, RunCache
from stagecrawl.errors import NotFound
from stagecrawl.pypi.jsonapi import ApiRelease, parse_json_api
from stagecrawl.pypi.metadata import Declared, parse_core_metadata
from stagecrawl.pypi.names import normalize
from stagecrawl.pypi.simple import SIMPLE_JSON, DistFile, SimplePage, parse_simple_page

FILES_HOST = "https://files.pythonhosted.org/"  # the files lane's home; chosen by name anyway
INDEX, API, FILES = "index", "api", "files"


class MetadataMismatch(ValueError):
    """A core metadata file whose sha256 is not the one the Simple page announced."""


class PyPIClient:
    def __init__(self, fetcher: Fetcher, index_url: str, api_url: str) -> None:
        self.fetcher = fetcher
        self.index_url = index_url.rstrip("/") + "/"
        self.api_url = api_url.rstrip("/") + "/"
        # A page a seed or a refresh fetched, kept for the collector of the same run: a
        # crawled or changed project costs one index request, not two.
        self._pages: RunCache[SimplePage | None] = RunCache(weigh=_weight)

    async def simple(self, name: str, validators: Validators | None = None) -> SimplePage | None:
        """The project's Simple page in JSON; None when `validators` still match (304).
        Raises NotFound for an unknown project, SimpleFormatError for a reply that is not a
        PEP 691 page (HTML where JSON was asked, not JSON)."""
        key = normalize(name)
        if validators is None:
            return await self._pages.get(key, lambda: self._simple(name, None))
        page = await self._simple(name, validators)
        if page is not None:
            self._pages.put(key, page)
        return page

    def forget(self, name: str) -> None:
        """The project's rows are built: its page need not stay in memory."""
        self._pages.forget(normalize(name))

    async def _simple(self, name: str, validators: Validators | None) -> SimplePage | None:
        url = f"{self.index_url}{normalize(name)}/"
        result = await self.fetcher.get(
            url, lane=INDEX, validators=validators, headers={"Accept": SIMPLE_JSON}
        )
        if result.not_modified:
            return None
        page = parse_simple_page(result.content, result.url, name)
        serial = _serial(result) or page.last_serial
        return replace(page, validators=result.validators, last_serial=serial,
                       raw_bytes=len(result.content))  # fmt: skip

    async def serials(self) -> dict[str, int]:
        """The root Simple listing's `_last-serial` of every project, by PEP 503 name (PEP 691
        JSON, `{"projects": [{"name", "_last-serial"}]}`): what changed since a stored serial,
        in one request. A project the listing gives no serial is left out. ValueError when the
        answer is not such a listing."""
        result = await self.fetcher.get(self.index_url, lane=INDEX, headers={"Accept": SIMPLE_JSON})
        document = result.json()
        projects = document.get("projects") if isinstance(document, dict) else None
        if not isinstance(projects, list):
            raise ValueError("the root Simple listing has no `projects` list")
        serials: dict[str, int] = {}
        for entry in projects:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                serial = entry.get("_last-serial")
                if isinstance(serial, int) and not isinstance(serial, bool):
                    serials[normalize(entry["name"])] = serial
        return serials

    async def project(self, name: str) -> ApiRelease | None:
        """The JSON API's project form (display name, latest release's info), None on 404."""
        return await self._api(f"{self.api_url}pypi/{name}/json")

    async def release(self, name: str, version: str) -> ApiRelease | None:
        return await self._api(f"{self.api_url}pypi/{name}/{version}/json")

    async def _api(self, url: str) -> ApiRelease | None:
        try:
            result = await self.fetcher.get(url, lane=API, headers={"Accept": "application/json"})
        except NotFound:
            return None
        return parse_json_api(result.content)

    async def metadata(self, file: DistFile) -> Declared | None:
        """A file's PEP 658 core metadata, None when the files host does not have it. Raises
        MetadataMismatch when its hash is not the one the Simple page gave."""
        try:
            result = await self.fetcher.get(file.metadata_url, lane=FILES)
        except NotFound:
            return None
        if file.core_metadata_sha256:
            digest = hashlib.sha256(result.content).hexdigest()
            if digest != file.core_metadata_sha256:
                raise MetadataMismatch(
                    f"{file.filename}.metadata: sha256 {digest[:12]}… is not the announced"
                    f" {file.core_metadata_sha256[:12]}…"
                )
        return parse_core_metadata(result.content)


def _weight(page: SimplePage | None) -> int:
    return 0 if page is None else PARSED_WEIGHT * page.raw_bytes


def _serial(result: FetchResult) -> int | None:
    value = result.headers.get("x-pypi-last-serial")
    return int(value) if value and value.isdigit() else None
