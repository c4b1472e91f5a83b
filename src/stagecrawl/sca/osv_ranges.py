"""OSV ranges as intervals of one ecosystem's versions, read as their authors mean them.

- a SEMVER or ECOSYSTEM range whose events alternate `introduced` → end (`fixed` or
  `last_affected`), each pair in order, is the union of those pairs as listed, in whatever
  order the pairs come and however they overlap: `[I0, F3.1.1, I3.2.0, F3.2.2, I3.1.1,
  F3.2.0]` (PYSEC-2023-72) is everything below 3.2.2. osv.dev enumerates the affected
  `versions` pair by pair, and the advisories' texts agree;
- events that do not alternate so (an end first, two `introduced` in a row, a pair whose
  introduced lies above its end) are the schema's timeline: sorted by version, an end event
  applied before an `introduced` at the same version;
- `introduced: "0"` (and the ecosystem's other `lowest` spellings) is below every version,
  pre-releases included; `last_affected` is inclusive; `limit` caps a range (`*`: no limit);
- a malformed range (no events, an event that is not one version, a version the ecosystem
  cannot order, no `introduced`) raises MalformedRange with what is wrong.

The intervals of every range of a package are kept as one union (`union`): sorted, overlapping
or touching intervals joined, so a hit, the VULN_RANGE text and the "patched" advice all come
from the same set.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from stagecrawl.sca.ecosystem import Ecosystem, OrderedVersion

EVENT_KINDS = ("introduced", "last_affected", "fixed", "limit")
END_KINDS = ("fixed", "last_affected")
# The timeline's order at one version: an end event before an `introduced`, so a range that
# is fixed at 3.1.1 and introduced again at 3.1.1 goes on affecting 3.1.1.
_TIE_ORDER = {"fixed": 0, "last_affected": 0, "introduced": 1, "limit": 2}


@dataclass(frozen=True)
class Interval:
    """Versions from `low` (None: the lowest there is) up to `high` (None: no fix), as text
    and parsed by the ecosystem (parsed once: an import tests many versions against it)."""

    low: str | None
    high: str | None
    high_inclusive: bool = False
    low_version: OrderedVersion | None = field(default=None, compare=False, repr=False)
    high_version: OrderedVersion | None = field(default=None, compare=False, repr=False)

    def text(self) -> str:
        low = "(" if self.low is None else f"[{self.low}"
        if self.high is None:
            return f"{low},)"
        return f"{low},{self.high}{']' if self.high_inclusive else ')'}"

    def contains(self, version: OrderedVersion) -> bool:
        low, high = self.low_version, self.high_version
        if low is not None and version < low:
            return False
        if high is None:
            return True
        return version <= high if self.high_inclusive else version < high

    def is_empty(self) -> bool:
        low, high = self.low_version, self.high_version
        if low is None or high is None:
            return False
        return high < low or (not high < low and not low < high and not self.high_inclusive)


class MalformedRange(ValueError):
    """A range the schema does not allow; the message says what is wrong."""


class SortableVersion:
    """A parsed version or None (the lowest) as a sort key."""

    __slots__ = ("version",)

    def __init__(self, version: OrderedVersion | None) -> None:
        self.version = version

    def __lt__(self, other: SortableVersion) -> bool:
        if self.version is None:
            return other.version is not None
        return other.version is not None and self.version < other.version

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SortableVersion) and self.version == other.version

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class _Event:
    kind: str
    text: str
    version: OrderedVersion | None  # None: the lowest (`introduced: "0"`)


def range_intervals(range_: Any, ecosystem: Ecosystem) -> list[Interval]:
    """The intervals of one SEMVER/ECOSYSTEM range, as the module doc says: the union of its
    listed pairs, else the schema's timeline. Raises MalformedRange for anything the schema
    does not allow."""
    if not isinstance(range_, dict):
        raise MalformedRange("a range is not an object")
    events = range_.get("events")
    if not isinstance(events, list) or not events:
        raise MalformedRange("a range has no events")
    lowest = ecosystem.lowest | {"0"}
    listed: list[_Event] = []
    limits: list[_Event] = []
    for event in events:
        if not isinstance(event, dict) or len(event) != 1:
            raise MalformedRange(f"event {json.dumps(event)[:80]} is not one version")
        kind, value = next(iter(event.items()))
        if kind not in _TIE_ORDER or not isinstance(value, str):
            raise MalformedRange(f"event {json.dumps(event)[:80]} is not one version")
        if kind == "introduced" and value in lowest:
            listed.append(_Event(kind, value, None))
            continue
        if kind == "limit" and value == "*":
            continue  # no limit
        try:
            version = ecosystem.parse_version(value)
        except ValueError:
            raise MalformedRange(f"{kind} {value!r} is not a {ecosystem.version_kind}") from None
        (limits if kind == "limit" else listed).append(_Event(kind, value, version))
    if not any(e.kind == "introduced" for e in listed):
        raise MalformedRange("a range has no introduced event")
    pairs = _listed_pairs(listed)
    result = pairs if pairs is not None else _timeline(listed)
    if limits:
        top = max(limits, key=lambda e: SortableVersion(e.version))
        assert top.version is not None
        result = _under_limit(result, top.version, top.text)
    return union(result)


def _listed_pairs(events: list[_Event]) -> list[Interval] | None:
    """The intervals of events that alternate introduced → end with each pair in order; None
    when they do not (the timeline reads them then)."""
    result: list[Interval] = []
    for position in range(0, len(events), 2):
        start = events[position]
        if start.kind != "introduced":
            return None
        if position + 1 == len(events):
            result.append(Interval(_text(start), None, False, start.version, None))
            break
        end = events[position + 1]
        if end.kind not in END_KINDS:
            return None
        assert end.version is not None  # only `introduced` can be the lowest
        if start.version is not None and end.version < start.version:
            return None  # introduced above its end: not a pair as written
        inclusive = end.kind == "last_affected"
        result.append(Interval(_text(start), end.text, inclusive, start.version, end.version))
    return result


def _timeline(events: list[_Event]) -> list[Interval]:
    """The schema's evaluation as intervals: events sorted by version (the lowest first; an
    end before an `introduced` at the same version), each one setting the state."""
    ordered = sorted(events, key=lambda e: (SortableVersion(e.version), _TIE_ORDER[e.kind]))
    result: list[Interval] = []
    start: _Event | None = None
    for event in ordered:
        if event.kind == "introduced":
            if start is None:
                start = event
        elif start is not None:
            inclusive = event.kind == "last_affected"
            result.append(
                Interval(_text(start), event.text, inclusive, start.version, event.version)
            )
            start = None
    if start is not None:
        result.append(Interval(_text(start), None, False, start.version, None))
    return result


def _text(event: _Event) -> str | None:
    return None if event.version is None else event.text


def _under_limit(intervals: list[Interval], limit: OrderedVersion, text: str) -> list[Interval]:
    """The schema's `limit`: versions at or above it are not affected by the range."""
    result = []
    for interval in intervals:
        low = interval.low_version
        if low is not None and not low < limit:
            continue
        high = interval.high_version
        if high is None or limit < high or (not high < limit and interval.high_inclusive):
            interval = Interval(interval.low, text, False, low, limit)
        result.append(interval)
    return result


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """The same versions as one sorted list of disjoint intervals: empty ones dropped,
    overlapping or touching ones (`[1,2)` and `[2,3)`) joined."""
    ordered = sorted(
        (i for i in intervals if not i.is_empty()), key=lambda i: SortableVersion(i.low_version)
    )
    result: list[Interval] = []
    for interval in ordered:
        if result and _reaches(result[-1], interval):
            last = result[-1]
            if last.high is not None and (interval.high is None or _ends_after(interval, last)):
                result[-1] = Interval(
                    last.low,
                    interval.high,
                    interval.high_inclusive,
                    last.low_version,
                    interval.high_version,
                )
        else:
            result.append(interval)
    return result


def _reaches(left: Interval, right: Interval) -> bool:
    """Whether `right` (starting at or after `left`'s start) overlaps or touches `left`."""
    if left.high is None or right.low_version is None:
        return True
    assert left.high_version is not None
    return not left.high_version < right.low_version


def _ends_after(right: Interval, left: Interval) -> bool:
    r, lft = right.high_version, left.high_version
    assert r is not None and lft is not None
    equal = not r < lft and not lft < r
    return lft < r or (equal and right.high_inclusive and not left.high_inclusive)
