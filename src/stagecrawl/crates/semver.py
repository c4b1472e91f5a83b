"""Semantic versions as cargo orders them (SemVer 2.0 precedence).

Hand-written because no maintained Python package applies cargo's rules (semantic_version
reads `1.2` differently, univers does not parse cargo's forms); the ordering is small and is
tested hard in tests/crates/test_semver.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import total_ordering

from stagecrawl.storage.owners import VersionOrder
from stagecrawl.storage.owners import latest_version as latest_of

_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)


def _parts(text: str) -> tuple[int, int, int, tuple[int | str, ...], str]:
    """(major, minor, patch, pre-release identifiers, build) of a semantic version."""
    match = _SEMVER.match(text.strip())
    if not match:
        raise ValueError(f"not a semantic version: {text!r}")
    major, minor, patch, pre, build = match.groups()
    identifiers: tuple[int | str, ...] = ()
    if pre:
        identifiers = tuple(int(p) if p.isdigit() else p for p in pre.split("."))
    return int(major), int(minor), int(patch), identifiers, build or ""


def _precedence(
    major: int, minor: int, patch: int, pre: tuple[int | str, ...]
) -> tuple[object, ...]:
    """The sort key of a version's precedence: a release sorts after all its pre-releases;
    numeric identifiers sort before alphanumeric ones; a shorter identifier list sorts first
    when it is a prefix."""
    pre_key = tuple((0, p, "") if isinstance(p, int) else (1, 0, p) for p in pre)
    return (major, minor, patch, not pre, pre_key)


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
        major, minor, patch, identifiers, build = _parts(text)
        return cls(major, minor, patch, identifiers, build)

    @property
    def is_prerelease(self) -> bool:
        return bool(self.pre)

    def _key(self) -> tuple[object, ...]:
        return _precedence(self.major, self.minor, self.patch, self.pre)

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


def _pre_and_key(text: str) -> tuple[bool, tuple[int, object, str]]:
    """`_is_pre` and `sort_key` from one parse, without a Version object (the latest-version
    rule asks this of every version of every crate collected)."""
    try:
        major, minor, patch, pre, _build = _parts(text)
    except ValueError:
        return False, (1, (), text)
    return bool(pre), (0, _precedence(major, minor, patch, pre), text)


# Cargo's order, as the VERSION/PRODUCT owners take it.
SEMVER = VersionOrder(sort_key, _is_pre, _pre_and_key)


# --- Version requirements, as cargo reads them (`1.2`, `^1.2.3`, `~1.2`, `>=1, <2`, `1.*`) ---
#
# Hand-written for the same reason as Version: cargo's requirement rules (a bare version is a
# caret requirement, pre-releases only match a comparator naming the same release) are not
# what the Python semver packages implement.

_COMPARATOR = re.compile(
    r"^\s*(?P<op>=|>=|<=|>|<|~|\^)?\s*(?P<major>\d+|\*|x|X)"
    r"(?:\.(?P<minor>\d+|\*|x|X))?(?:\.(?P<patch>\d+|\*|x|X))?"
    r"(?:-(?P<pre>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z.-]+)?\s*$"
)


def _bounds(
    op: str, parts: list[int | None], pre: str
) -> tuple[Version | None, Version | None, bool]:
    """(lowest included, upper bound, whether the upper bound is included) of one comparator."""
    major, minor, patch = parts
    pre_ids: tuple[int | str, ...] = (
        tuple(int(p) if p.isdigit() else p for p in pre.split(".")) if pre else ()
    )
    low = Version(major or 0, minor or 0, patch or 0, pre_ids)
    if major is None:
        return None, None, False
    if op in ("", "^"):
        if minor is None:
            return low, Version(major + 1, 0, 0, (0,)), False
        if major > 0 or patch is None:
            if major > 0:
                return low, Version(major + 1, 0, 0, (0,)), False
            return low, Version(0, minor + 1, 0, (0,)), False
        if minor > 0:
            return low, Version(0, minor + 1, 0, (0,)), False
        return low, Version(0, 0, patch + 1, (0,)), False
    if op == "~":
        if minor is None:
            return low, Version(major + 1, 0, 0, (0,)), False
        return low, Version(major, minor + 1, 0, (0,)), False
    if op == "=":
        if minor is None:
            return low, Version(major + 1, 0, 0, (0,)), False
        if patch is None:
            return low, Version(major, minor + 1, 0, (0,)), False
        return low, low, True
    if op == ">=":
        return low, None, False
    if op == ">":
        if minor is None:
            return Version(major + 1, 0, 0), None, False
        if patch is None:
            return Version(major, minor + 1, 0), None, False
        return Version(major, minor, patch + 1, ()) if not pre_ids else low, None, False
    if op == "<":
        return None, low if pre_ids else Version(major, minor or 0, patch or 0, (0,)), False
    # <=
    if minor is None:
        return None, Version(major + 1, 0, 0, (0,)), False
    if patch is None:
        return None, Version(major, minor + 1, 0, (0,)), False
    return None, low, True


def version_matcher(requirement: str) -> Callable[[str], bool]:
    """A predicate for cargo's version requirement `requirement` (raises ValueError when it
    is not one). A pre-release matches only when a comparator names a pre-release of the same
    major.minor.patch, as cargo says."""
    comparators = []
    for text in requirement.split(","):
        match = _COMPARATOR.match(text)
        if not match:
            raise ValueError(f"not a version requirement: {requirement!r}")
        parts: list[int | None] = []
        for name in ("major", "minor", "patch"):
            value = match[name]
            parts.append(None if value is None or value in "*xX" else int(value))
        if parts[0] is None:
            parts = [None, None, None]
        elif parts[1] is None:
            parts[2] = None
        op = match["op"] or ""
        low, high, inclusive = _bounds(op, parts, match["pre"] or "")
        comparators.append((low, high, inclusive, parts, match["pre"] or ""))

    def matches(text: str) -> bool:
        try:
            version = Version.parse(text)
        except ValueError:
            return False
        for low, high, inclusive, _, _ in comparators:
            if low is not None and version < low:
                return False
            if high is not None and (version > high if inclusive else not version < high):
                return False
        if version.pre:
            return any(
                pre and parts == [version.major, version.minor, version.patch]
                for _, _, _, parts, pre in comparators
            )
        return True

    return matches
