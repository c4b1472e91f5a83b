"""Semantic versions as cargo orders them (SemVer 2.0 precedence).

Hand-written because no maintained Python package applies cargo's rules (semantic_version
reads `1.2` differently, univers does not parse cargo's forms); the ordering is small and is
tested hard in tests/crates/test_semver.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import total_ordering

from stagecrawl.storage.owners import VersionOrder
from stagecrawl.storage.owners import latest_version as latest_of

_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)


@total_ordering
@dataclass(frozen=True)
class Version:
    major: int
    minor: int
    patch: int
    pre: tuple[int | str, ...] = ()
    build: str = ""

    @classmethod
    def parse(cls, text: str) -> Version:
        match = _SEMVER.match(text.strip())
        if not match:
            raise ValueError(f"not a semantic version: {text!r}")
        major, minor, patch, pre, build = match.groups()
        identifiers: tuple[int | str, ...] = ()
        if pre:
            identifiers = tuple(int(p) if p.isdigit() else p for p in pre.split("."))
        return cls(int(major), int(minor), int(patch), identifiers, build or "")

    @property
    def is_prerelease(self) -> bool:
        return bool(self.pre)

    def _key(self) -> tuple[object, ...]:
        # A release sorts after all its pre-releases; numeric identifiers sort before
        # alphanumeric ones; a shorter identifier list sorts first when it is a prefix.
        pre_key = tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in self.pre)
        return (self.major, self.minor, self.patch, not self.pre, pre_key)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


def sort_key(text: str) -> tuple[int, object, str]:
    """Sort any version string: valid semver by precedence, anything else after, by text."""
    try:
        return (0, Version.parse(text)._key(), text)
    except ValueError:
        return (1, (), text)


def latest_version(versions: list[tuple[str, bool]]) -> str | None:
    """Highest non-yanked stable version, else non-yanked pre-release, else any version:
    the table owner's one rule (stagecrawl.storage.owners) in cargo's order.

    `versions` is (version, yanked) pairs.
    """
    return latest_of(versions, SEMVER).latest


def _is_pre(text: str) -> bool:
    try:
        return Version.parse(text).is_prerelease
    except ValueError:
        return False


# Cargo's order, as the VERSION/PRODUCT owners take it.
SEMVER = VersionOrder(sort_key, _is_pre)
