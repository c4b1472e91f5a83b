"""An independent OSV evaluation for the PyPI audit tests, written from the OSV schema
(https://ossf.github.io/osv-schema/#evaluation) with PEP 440 ordering from `packaging`, sharing
no code with stagecrawl: which advisories of an OSV zip hit (name, version)."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version


def pep503(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def load(zip_path: Path) -> dict[str, list[dict[str, Any]]]:
    """Advisories by normalised package name (each advisory under every package it names)."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    with zipfile.ZipFile(zip_path) as archive:
        for member in archive.namelist():
            if not member.endswith(".json"):
                continue
            advisory = json.loads(archive.read(member))
            names = {
                pep503(a["package"]["name"])
                for a in advisory.get("affected", [])
                if a.get("package", {}).get("ecosystem") == "PyPI"
            }
            for name in names:
                by_name.setdefault(name, []).append(advisory)
    return by_name


def _in_range(version: Version, events: list[dict[str, str]]) -> bool:
    def key(event: dict[str, str]) -> tuple[int, Version]:
        value = next(iter(event.values()))
        if value == "0":
            return (0, Version("0"))
        parsed = _version(value)
        if parsed is None:
            raise ValueError(value)
        return (1, parsed)

    try:
        ordered = sorted(events, key=key)
    except ValueError:
        return False  # a range this evaluation cannot order matches nothing
    affected = False
    for event in ordered:
        kind, value = next(iter(event.items()))
        limit = Version("0") if value == "0" else Version(value)
        if kind == "introduced" and (value == "0" or version >= limit):
            affected = True
        elif (kind == "fixed" and version >= limit) or (
            kind == "last_affected" and version > limit
        ):
            affected = False
    return affected


def hits(advisories: dict[str, list[dict[str, Any]]], name: str, version: str) -> set[str]:
    """The ids of the non-withdrawn advisories that affect name==version."""
    key = pep503(name)
    parsed = _version(version)
    found: set[str] = set()
    for advisory in advisories.get(key, []):
        if advisory.get("withdrawn"):
            continue
        for affected in advisory.get("affected", []):
            package = affected.get("package", {})
            if package.get("ecosystem") != "PyPI" or pep503(package.get("name", "")) != key:
                continue
            if version in affected.get("versions", []):
                found.add(advisory["id"])
                continue
            if parsed is None:
                continue
            for range_ in affected.get("ranges", []):
                if range_.get("type") == "ECOSYSTEM" and _in_range(parsed, range_["events"]):
                    found.add(advisory["id"])
    return found
