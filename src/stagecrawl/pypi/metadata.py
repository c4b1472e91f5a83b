"""PEP 658 core metadata (a wheel's METADATA, email-header format) read with the stdlib email
parser: packaging.metadata would refuse the real files' old-style fields, and only headers
are needed."""

from __future__ import annotations

import email.parser
import email.policy
from dataclasses import dataclass


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


@dataclass(frozen=True)
class CoreMetadata(Declared):
    name: str | None
    version: str | None


def _one(message: email.message.Message, key: str) -> str | None:
    value = message.get(key)
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def parse_core_metadata(content: bytes) -> CoreMetadata:
    """Headers of a METADATA file; a missing field is None or empty, never invented."""
    text = content.decode("utf-8", errors="replace")
    message = email.parser.Parser(policy=email.policy.compat32).parsestr(text, headersonly=True)
    urls: dict[str, str] = {}
    for entry in message.get_all("Project-URL") or []:
        label, _, url = str(entry).partition(",")
        if url.strip():
            urls[label.strip()] = url.strip()
    license_text = _one(message, "License")
    return CoreMetadata(
        name=_one(message, "Name"),
        version=_one(message, "Version"),
        summary=_one(message, "Summary"),
        requires_dist=tuple(str(v).strip() for v in message.get_all("Requires-Dist") or []),
        provides_extra=tuple(
            dict.fromkeys(str(v).strip() for v in message.get_all("Provides-Extra") or [])
        ),
        requires_python=_one(message, "Requires-Python"),
        license_expression=_one(message, "License-Expression"),
        license=license_text,
        classifiers=tuple(str(v).strip() for v in message.get_all("Classifier") or []),
        project_urls=urls,
        home_page=_one(message, "Home-page"),
    )
