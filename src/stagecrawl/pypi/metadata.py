"""PEP 658 core metadata (a wheel's METADATA, email-header format): its header fields, read as
the stdlib email parser reads them (`stagecrawl.emailheaders`). packaging.metadata would
refuse the real files' old-style fields, and only headers are needed."""

from __future__ import annotations

from dataclasses import dataclass

from stagecrawl.emailheaders import header_fields


@dataclass(frozen=True)
class Declared:
    """What a release says of itself, in its core metadata or the JSON API's `info`."""

    summary: str | None
    requires_dist: tuple[str, ...] | None  # None: not known (not "no dependencies")
    provides_extra: tuple[str, ...] | None
    requires_python: str | None
    license_expression: str | None
    license: str | None
    classifiers: tuple[str, ...]
    project_urls: dict[str, str]
    home_page: str | None


NOTHING_DECLARED = Declared(None, None, None, None, None, None, (), {}, None)


def _one(fields: dict[str, list[str]], key: str) -> str | None:
    values = fields.get(key)
    text = values[0].strip() if values else ""
    return text or None


def _all(fields: dict[str, list[str]], key: str) -> list[str]:
    return [value.strip() for value in fields.get(key, ())]


def parse_core_metadata(content: bytes) -> Declared:
    """Headers of a METADATA file; a missing field is None or empty, never invented."""
    fields = header_fields(content.decode("utf-8", errors="replace"))
    urls: dict[str, str] = {}
    for entry in _all(fields, "project-url"):
        label, _, url = entry.partition(",")
        if url.strip():
            urls[label.strip()] = url.strip()
    return Declared(
        summary=_one(fields, "summary"),
        requires_dist=tuple(_all(fields, "requires-dist")),
        provides_extra=tuple(dict.fromkeys(_all(fields, "provides-extra"))),
        requires_python=_one(fields, "requires-python"),
        license_expression=_one(fields, "license-expression"),
        license=_one(fields, "license"),
        classifiers=tuple(_all(fields, "classifier")),
        project_urls=urls,
        home_page=_one(fields, "home-page"),
    )
