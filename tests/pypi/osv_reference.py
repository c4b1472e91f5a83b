"""An independent OSV evaluation for the PyPI audit tests, written from the OSV schema
(https://ossf.github.io/osv-schema/#evaluation) with PEP 440 from `packaging`, sharing no code
with stagecrawl: which advisories of an OSV zip hit (name, version), one version at a time.

How a range is read (the authors' meaning, as osv.dev enumerates `versions` pair by pair):
- events that alternate `introduced`, then `fixed` or `last_affected`, each introduction at or
  below its end: the version is affected when it lies in any one pair;
- anything else: the schema's pseudo-code over the events sorted by version, an end event
  before an `introduced` at the same version;
- `limit`: the version must lie below some limit; `versions`: PEP 440 equality (a string the
  standard cannot read: equal strings only).
An event that PEP 440 cannot read makes the range unreadable: it is reported, not guessed."""

from __future__ import annotations

import functools
import json
import re
import zipfile
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version


class Unreadable(Exception):
    """A range with an event PEP 440 cannot read."""


def pep503(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@functools.cache
def version_of(text: str) -> Version | None:
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


def _events(events: list[dict[str, str]]) -> list[tuple[str, Version | None]]:
    """(kind, bound) in listed order; `introduced: "0"` is None (below every version)."""
    result: list[tuple[str, Version | None]] = []
    for event in events:
        ((kind, value),) = event.items()
        if kind == "introduced" and value == "0":
            result.append((kind, None))
            continue
        if kind == "limit" and value == "*":
            continue
        bound = version_of(value)
        if bound is None:
            raise Unreadable(f"{kind} {value}")
        result.append((kind, bound))
    return result


def _at_or_above(version: Version, bound: Version | None) -> bool:
    return bound is None or version >= bound


def in_range(version: Version, events: list[dict[str, str]]) -> bool:
    """Whether `version` is affected by one ECOSYSTEM range (see the module doc)."""
    parsed = _events(events)
    limits = [b for k, b in parsed if k == "limit"]
    steps = [(k, b) for k, b in parsed if k != "limit"]
    if limits and not any(b is not None and version < b for b in limits):
        return False
    starts, ends = steps[0::2], steps[1::2]
    pairs = all(k == "introduced" for k, _ in starts) and all(
        k in ("fixed", "last_affected") for k, _ in ends
    )
    pairs = pairs and all(
        s is None or (e is not None and s <= e)
        for (_, s), (_, e) in zip(starts, ends, strict=False)
    )
    if pairs:
        for position, (_, start) in enumerate(starts):
            if not _at_or_above(version, start):
                continue
            if position >= len(ends):
                return True  # introduced, never fixed
            kind, end = ends[position]
            assert end is not None
            if version < end or (kind == "last_affected" and version == end):
                return True
        return False

    # The schema's pseudo-code: sorted by version, an end before an introduction at a tie.
    def order(step: tuple[str, Version | None]) -> tuple[int, Version, int]:
        kind, bound = step
        rank = 1 if kind == "introduced" else 0
        return (0, Version("0"), rank) if bound is None else (1, bound, rank)

    vulnerable = False
    for kind, bound in sorted(steps, key=order):
        if kind == "introduced" and _at_or_above(version, bound):
            vulnerable = True
        elif bound is not None and (
            (kind == "fixed" and version >= bound) or (kind == "last_affected" and version > bound)
        ):
            vulnerable = False
    return vulnerable


_LISTED: dict[int, tuple[list[str], frozenset[Version]]] = {}


def _listed(version: str, parsed: Version | None, listed: list[str]) -> bool:
    if version in listed:
        return True
    if parsed is None:
        return False
    known = _LISTED.get(id(listed))
    if known is None or known[0] is not listed:  # each list's versions parsed once
        versions = frozenset(v for v in map(version_of, listed) if v is not None)
        known = _LISTED[id(listed)] = (listed, versions)
    return parsed in known[1]


def evaluate(
    advisories: dict[str, list[dict[str, Any]]], name: str, version: str
) -> tuple[set[str], set[str]]:
    """(ids of the non-withdrawn advisories that affect name==version, ids that cannot be
    evaluated for it: no readable part hits it and some part is unreadable)."""
    key = pep503(name)
    parsed = version_of(version)
    found: set[str] = set()
    unknown: set[str] = set()
    for advisory in advisories.get(key, []):
        if advisory.get("withdrawn"):
            continue
        unreadable = False
        for affected in advisory.get("affected", []):
            package = affected.get("package", {})
            if package.get("ecosystem") != "PyPI" or pep503(package.get("name", "")) != key:
                continue
            if _listed(version, parsed, affected.get("versions", [])):
                found.add(advisory["id"])
                continue
            if parsed is None:
                continue
            for range_ in affected.get("ranges", []):
                if range_.get("type") != "ECOSYSTEM":
                    continue
                try:
                    if in_range(parsed, range_["events"]):
                        found.add(advisory["id"])
                except Unreadable:
                    unreadable = True
        if unreadable and advisory["id"] not in found:
            unknown.add(advisory["id"])
    return found, unknown


def hits(advisories: dict[str, list[dict[str, Any]]], name: str, version: str) -> set[str]:
    """The ids of the non-withdrawn advisories that affect name==version."""
    return evaluate(advisories, name, version)[0]
