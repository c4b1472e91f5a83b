"""Reading the crates.io JSON API (`/api/v1/crates/{name}`): enrichment only."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from stagecrawl.jsoncodec import text
from stagecrawl.sca.ecosystem import parse_time


@dataclass(frozen=True)
class ApiVersion:
    license: str | None
    created_at: datetime | None
    downloads: int | None


@dataclass(frozen=True)
class ApiCrate:
    name: str
    description: str | None
    repository: str | None
    homepage: str | None
    documentation: str | None
    downloads: int | None
    keywords: list[str]
    categories: list[str]
    versions: dict[str, ApiVersion] = field(default_factory=dict)


def parse_api_crate(document: Any) -> ApiCrate:
    """The API's view of a crate; an answer of another shape raises ValueError (so the crate
    goes to the retry ladder with the reason, like any failed request)."""
    if not isinstance(document, dict) or not isinstance(document.get("crate"), dict):
        raise ValueError("API answer has no 'crate' object")
    try:
        return _parse_api_crate(document)
    except (TypeError, KeyError, AttributeError) as exc:
        raise ValueError(f"API answer is malformed ({type(exc).__name__}: {exc})") from None


def _parse_api_crate(document: dict[str, Any]) -> ApiCrate:
    crate = document["crate"]
    keywords = [
        k["keyword"] if isinstance(k, dict) else str(k)
        for k in document.get("keywords") or crate.get("keywords") or []
    ]
    categories = [
        c.get("slug") or c.get("id") if isinstance(c, dict) else str(c)
        for c in document.get("categories") or crate.get("categories") or []
    ]
    versions: dict[str, ApiVersion] = {}
    for version in document.get("versions") or []:
        if not isinstance(version, dict) or not isinstance(version.get("num"), str):
            continue
        downloads = version.get("downloads")
        versions[version["num"]] = ApiVersion(
            license=text(version.get("license")),
            created_at=parse_time(version.get("created_at")),
            downloads=downloads if isinstance(downloads, int) else None,
        )
    total = crate.get("downloads")
    return ApiCrate(
        name=str(crate.get("name") or crate.get("id")),
        description=text(crate.get("description")),
        repository=text(crate.get("repository")),
        homepage=text(crate.get("homepage")),
        documentation=text(crate.get("documentation")),
        downloads=total if isinstance(total, int) else None,
        keywords=sorted(set(k for k in keywords if k)),
        categories=sorted(set(c for c in categories if c)),
        versions=versions,
    )
