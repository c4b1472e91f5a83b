"""The rows the crates plug-in writes: VERSION, PRODUCT and the index state, from the index
entry (authoritative) and the API answer (enrichment only)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from stagecrawl.crates.api import ApiCrate
from stagecrawl.crates.client import IndexEntry
from stagecrawl.crates.index import IndexVersion
from stagecrawl.crates.names import product_key
from stagecrawl.crates.tables import LANGUAGE, REPOSITORY
from stagecrawl.queue.lists import COLLECTED
from stagecrawl.sca.ecosystem import parse_time
from stagecrawl.sca.matcher import LicenseMatcher
from stagecrawl.storage.db import dumps

CRATES_IO_PAGE = "https://crates.io/crates/"

# A crate's rows share its key and SCM: made once per crate, not once per version row.
_product_key = lru_cache(maxsize=1024)(product_key)


# VERSION's columns, in the table's order: a VERSION row is a tuple of these (`version_row`).
VERSION_COLUMNS = (
    "LANGUAGE", "REPOSITORY", "PRODUCT_KEY", "VERSION", "NAME", "DESCRIPTION", "LICENSE",
    "STANDARD_LICENSE", "LICENSE_IDS", "LICENSE_EXPRESSION", "LICENSE_AI", "DEPENDENCIES",
    "FEATURES", "CHECKSUM", "YANKED", "RUST_VERSION", "LINKS", "URL", "SCM", "DOWNLOADS",
    "RELEASE_DATE", "PROCESSED", "LAST_UPDATED",
)  # fmt: skip
YANKED_AT = VERSION_COLUMNS.index("YANKED")


def version_row(
    real: str,
    version: IndexVersion,
    api: ApiCrate | None,
    now: Any,
    licenses: LicenseMatcher | None = None,
    ai_ids: dict[str, str | None] | None = None,
) -> tuple[Any, ...]:
    """One VERSION row, in `VERSION_COLUMNS` order: built once, as the tuple the upsert
    sends (no dict a row and no reordering: a crawl builds one per event)."""
    api_version = api.versions.get(version.vers) if api else None
    released = api_version.created_at if api_version else None
    license_text = api_version.license if api_version else None
    standard = licenses.standardise(license_text) if licenses else None
    return (
        LANGUAGE,
        REPOSITORY,
        _product_key(real),
        version.vers,
        real,
        api.description if api else None,
        license_text,
        standard.standard_license if standard else None,
        standard.license_ids if standard else None,
        standard.expression if standard else None,
        (ai_ids or {}).get(license_text or ""),
        version.dependencies_json(),
        dumps(version.features),
        version.cksum,
        version.yanked,
        version.rust_version,
        version.links,
        f"{CRATES_IO_PAGE}{real}/{version.vers}",
        _crate_scm(api),
        api_version.downloads if api_version else None,
        released or parse_time(version.pubtime),
        COLLECTED,
        now,
    )


def product_columns(entry: IndexEntry, api: ApiCrate | None) -> dict[str, Any]:
    """A crate's own PRODUCT columns (`Registry.product_row` makes the row)."""
    return {
        "DESCRIPTION": api.description if api else None,
        "URL": CRATES_IO_PAGE + entry.real_name,
        "SCM": _scm(api),
        "KEYWORDS": dumps(api.keywords) if api else None,
        "CATEGORIES": dumps(api.categories) if api else None,
        "DOWNLOADS": api.downloads if api else None,
    }


def index_state_row(entry: IndexEntry, now: Any) -> dict[str, Any]:
    """What refresh needs to ask the index "changed since?" next time."""
    return {
        "PRODUCT_KEY": product_key(entry.real_name),
        "NAME": entry.real_name,
        "ETAG": entry.validators.etag,
        "LAST_MODIFIED": entry.validators.last_modified,
        "CONTENT_SHA256": entry.sha256,
        "CHECKED_AT": now,
    }


_last_scm: tuple[ApiCrate | None, str | None] = (None, None)


def _crate_scm(api: ApiCrate | None) -> str | None:
    """`_scm` of the crate whose versions are being built (the rows of one crate are built
    one after another on the event loop, so the last answer is the one asked for again)."""
    global _last_scm
    if api is None:
        return None
    if _last_scm[0] is not api:
        _last_scm = (api, _scm(api))
    return _last_scm[1]


def _scm(api: ApiCrate | None) -> str | None:
    if api is None:
        return None
    return dumps(
        {"repository": api.repository, "homepage": api.homepage, "documentation": api.documentation}
    )
