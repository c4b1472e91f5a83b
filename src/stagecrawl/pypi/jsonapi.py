"""The JSON API (`/pypi/<name>/json`, `/pypi/<name>/<version>/json`): enrichment only. Reads
the current shape and the 2018–2022 ones (no `license_expression`, `yanked`, `ownership`;
`releases` still in the release form); `requires_dist` null means the dependencies are
unknown, not none."""

from __future__ import annotations

from dataclasses import dataclass

from stagecrawl.jsoncodec import loads, text, texts
from stagecrawl.pypi.metadata import Declared
from stagecrawl.pypi.simple import SimpleFormatError


@dataclass(frozen=True)
class ApiRelease(Declared):
    display_name: str


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
        summary=text(info.get("summary"), strip=True),
        license=text(info.get("license"), strip=True),
        license_expression=text(info.get("license_expression"), strip=True),
        classifiers=texts(info.get("classifiers")) or (),
        requires_dist=texts(info.get("requires_dist")),
        requires_python=text(info.get("requires_python"), strip=True),
        provides_extra=texts(info.get("provides_extra")),
        project_urls={str(k): str(v) for k, v in urls.items() if isinstance(v, str)}
        if isinstance(urls, dict)
        else {},
        home_page=text(info.get("home_page"), strip=True),
    )
