"""OSV ranges as intervals of one ecosystem's versions, by the OSV schema's evaluation rules.

- the events of a range are sorted by version before use (the ecosystem's order); `introduced:
  "0"` (and the ecosystem's other `lowest` spellings) is below every version, pre-releases
  included; `last_affected` is inclusive; `limit` caps a range (`*`: no limit);
- a malformed range (no events, an event that is not one version, a version the ecosystem
  cannot order, no `introduced`) raises MalformedRange with what is wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from stagecrawl.sca.ecosystem import Ecosystem, OrderedVersion

EVENT_KINDS = ("introduced", "last_affected", "fixed", "limit")
# Equal versions: an `introduced` is applied before the events that end a range, so
# `introduced 1.0, fixed 1.0` is empty and `introduced 1.0, last_affected 1.0` is `[1.0,1.0]`.
_TIE_ORDER = {kind: n for n, kind in enumerate(EVENT_KINDS)}


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


def range_intervals(range_: Any, ecosystem: Ecosystem) -> list[Interval]:
    """The intervals of one SEMVER/ECOSYSTEM range, events sorted as the OSV schema says.
    Raises MalformedRange for anything the schema does not allow."""
    if not isinstance(range_, dict):
        raise MalformedRange("a range is not an object")
    events = range_.get("events")
    if not isinstance(events, list) or not events:
        raise MalformedRange("a range has no events")
    lowest = ecosystem.lowest | {"0"}
    parsed: list[tuple[int, OrderedVersion | None, int, str, str]] = []
    for event in events:
        if not isinstance(event, dict) or len(event) != 1:
            raise MalformedRange(f"event {json.dumps(event)[:80]} is not one version")
        kind, value = next(iter(event.items()))
        if kind not in _TIE_ORDER or not isinstance(value, str):
            raise MalformedRange(f"event {json.dumps(event)[:80]} is not one version")
        if kind == "introduced" and value in lowest:
            parsed.append((0, None, _TIE_ORDER[kind], kind, value))
            continue
        if kind == "limit" and value == "*":
            continue  # no limit
        try:
            version = ecosystem.parse_version(value)
        except ValueError:
            raise MalformedRange(f"{kind} {value!r} is not a {ecosystem.version_kind}") from None
        parsed.append((1, version, _TIE_ORDER[kind], kind, value))
    if not any(kind == "introduced" for *_, kind, _ in parsed):
        raise MalformedRange("a range has no introduced event")
    parsed.sort(key=lambda e: (e[0], SortableVersion(e[1]), e[2]))
    result: list[Interval] = []
    start: tuple[str, OrderedVersion] | None = None
    is_open = False
    limits: list[tuple[OrderedVersion, str]] = []
    for _, bound, _, kind, value in parsed:
        if kind == "introduced":
            if not is_open:
                start, is_open = (None if bound is None else (value, bound)), True
        elif kind in ("fixed", "last_affected"):
            if is_open:
                result.append(
                    Interval(
                        None if start is None else start[0],
                        value,
                        kind == "last_affected",
                        None if start is None else start[1],
                        bound,
                    )
                )
                is_open = False
        elif bound is not None:
            limits.append((bound, value))
    if is_open:
        low_text, low_version = (None, None) if start is None else start
        result.append(Interval(low_text, None, False, low_version, None))
    if limits:
        result = _under_limit(result, *max(limits, key=lambda limit: SortableVersion(limit[0])))
    return [r for r in result if not r.is_empty()]


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


def reaches(left: Interval, right: Interval) -> bool:
    """Whether `right` (starting at or after `left`'s start) overlaps or touches `left`."""
    if left.high is None:
        return True
    low, high = right.low_version, left.high_version
    assert high is not None
    return low is None or low <= high


def ends_after(right: Interval, left: Interval) -> bool:
    r, lft = right.high_version, left.high_version
    assert r is not None and lft is not None
    equal = not r < lft and not lft < r
    return lft < r or (equal and right.high_inclusive and not left.high_inclusive)
