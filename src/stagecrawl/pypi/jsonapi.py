"""The JSON API (`/pypi/<name>/json`, `/pypi/<name>/<version>/json`): enrichment only. Reads
the current shape and the 2018–2022 ones (no `license_expression`, `yanked`, `ownership`;
`releases` still in the release form); `requires_dist` null means the dependencies are
unknown, not none."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from stagecrawl.jsoncodec import loads
from stagecrawl.pypi.metadata import Declared
from stagecrawl.pypi.simple import SimpleFormatError


@dataclass(frozen=True)
class ApiRelease(Declared):
    display_name: str


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _strings(value: Any) -> tuple[str, ...] | None:
    if not isinstance(value, list):
        return None
    return tuple(str(v) for v in value if isinstance(v, str))


def parse_json_api(content: bytes) -> ApiRelease:
    """One JSON API reply (project or release form). Raises SimpleFormatError when it is not
    the JSON API's shape."""
    if content.lstrip()[:1] == b"<":
        raise SimpleFormatError("an HTML page where the JSON API was asked for")
    try:
        document = loads(content)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # Recursion: too deep
        raise SimpleFormatError(f"JSON API reply is not JSON ({str(exc)[:80]})") from None
    info = document.get("info") if isinstance(document, dict) else None
    if not isinstance(info, dict) or not isinstance(info.get("name"), str):
        raise SimpleFormatError("not a JSON API reply (no info.name)")
    urls = info.get("project_urls")
    return ApiRelease(
        display_name=info["name"],
        summary=_text(info.get("summary")),
        license=_text(info.get("license")),
        license_expression=_text(info.get("license_expression")),
        classifiers=_strings(info.get("classifiers")) or (),
        requires_dist=_strings(info.get("requires_dist")),
        requires_python=_text(info.get("requires_python")),
        provides_extra=_strings(info.get("provides_extra")),
        project_urls={str(k): str(v) for k, v in urls.items() if isinstance(v, str)}
        if isinstance(urls, dict)
        else {},
        home_page=_text(info.get("home_page")),
    )
