"""Vulnerabilities from the OSV crates.io dump (`all.zip`, one OSV JSON file per advisory).

The archive is read in memory entry by entry (never extracted), with a size limit on the
archive and on each entry. Ranges follow the OSV schema's evaluation rules:
- the events of a range are sorted by version before use (SemVer precedence; `introduced: "0"`
  is below every version, pre-releases included; `0.0.0` is the release 0.0.0, so
  `0.0.0-alpha` is not in `[0.0.0,…)`); `last_affected` is inclusive; `limit` caps a range;
- a malformed range (no events, an event that is not one version, a version that is not
  SemVer, no `introduced`) is skipped and reported with the advisory's id; the other ranges
  and entries of the advisory still count; a record whose `affected` is not a list is skipped
  and reported whole;
- a GHSA record that duplicates a RUSTSEC advisory of the same source (it aliases the RUSTSEC
  id, or the RUSTSEC record aliases it — OSV's crates.io dump holds both) is merged into the
  RUSTSEC one: its id and aliases join the RUSTSEC aliases, its ranges are not used twice.

Tables (docs/schema.md): RAW holds every advisory for every crate it names, whatever the scope,
so `crates audit` can answer for any crate; V1 (the CVE table) holds the CVE advisories of the
crates in scope, without withdrawn ones and without informational ones (unmaintained, unsound,
notice…) unless they carry a CVSS score; HIT holds the collected versions each advisory hits.
Every table is keyed on the advisory's own OSV id, so two advisories sharing a CVE both keep
their ranges. An import writes in one transaction, rows sent as executemany batches.
"""

from __future__ import annotations

import copy
import io
import json
import logging
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from sqlalchemy import Table, bindparam, delete, select
from sqlalchemy.engine import Connection

from stagecrawl.crates.api import parse_time
from stagecrawl.crates.queue import utcnow
from stagecrawl.crates.semver import Version
from stagecrawl.errors import InputError
from stagecrawl.storage.bulk import upsert
from stagecrawl.storage.db import Database, dumps

log = logging.getLogger("stagecrawl.osv")

DEFAULT_OSV_URL = "https://osv-vulnerabilities.storage.googleapis.com/crates.io/all.zip"
MAX_ARCHIVE_BYTES = 512 * 1024 * 1024
MAX_ENTRY_BYTES = 4 * 1024 * 1024
MAPPED_TYPE = "RE"
BATCH = 2000
# `introduced` values meaning "from the very first version": "0" by the schema, and 0.0.0-0,
# which RustSec writes and below which SemVer has no version.
LOWEST = frozenset({"0", "0.0.0-0"})
EVENT_KINDS = ("introduced", "last_affected", "fixed", "limit")
# Equal versions: an `introduced` is applied before the events that end a range, so
# `introduced 1.0, fixed 1.0` is empty and `introduced 1.0, last_affected 1.0` is `[1.0,1.0]`.
_TIE_ORDER = {kind: n for n, kind in enumerate(EVENT_KINDS)}
CVSS_TYPES = ("CVSS_V3", "CVSS_V4", "CVSS_V2")


def vuln_id(advisory: dict[str, Any]) -> str:
    """The id the Go-compatible VULN_ID columns hold: the CVE alias if there is one, else the
    RUSTSEC id, else the OSV id."""
    aliases = [str(a) for a in advisory.get("aliases") or []]
    osv_id = str(advisory["id"])
    for candidate in sorted(a for a in aliases if a.startswith("CVE-")):
        return candidate
    if osv_id.startswith("RUSTSEC-"):
        return osv_id
    for candidate in sorted(a for a in aliases if a.startswith("RUSTSEC-")):
        return candidate
    return osv_id


@dataclass(frozen=True)
class Interval:
    low: str | None  # None: from the lowest version there is
    high: str | None  # None: no fix
    high_inclusive: bool = False

    def text(self) -> str:
        low = "(" if self.low is None else f"[{self.low}"
        if self.high is None:
            return f"{low},)"
        return f"{low},{self.high}{']' if self.high_inclusive else ')'}"

    # Parsed once per interval (an import tests every collected version against it);
    # cached_property writes the instance dict, which a frozen dataclass allows.
    @cached_property
    def low_version(self) -> Version | None:
        return None if self.low is None else Version.parse(self.low)

    @cached_property
    def high_version(self) -> Version | None:
        return None if self.high is None else Version.parse(self.high)

    def contains(self, version: Version) -> bool:
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
        return high < low or (high == low and not self.high_inclusive)


class MalformedRange(ValueError):
    """A range the schema does not allow; the message says what is wrong."""


def range_intervals(range_: Any) -> list[Interval]:
    """The intervals of one SEMVER/ECOSYSTEM range, events sorted as the OSV schema says.
    Raises MalformedRange for anything the schema does not allow."""
    if not isinstance(range_, dict):
        raise MalformedRange("a range is not an object")
    events = range_.get("events")
    if not isinstance(events, list) or not events:
        raise MalformedRange("a range has no events")
    parsed: list[tuple[int, Version | None, int, str, str]] = []
    for event in events:
        if not isinstance(event, dict) or len(event) != 1:
            raise MalformedRange(f"event {json.dumps(event)[:80]} is not one version")
        kind, value = next(iter(event.items()))
        if kind not in _TIE_ORDER or not isinstance(value, str):
            raise MalformedRange(f"event {json.dumps(event)[:80]} is not one version")
        if kind == "introduced" and value in LOWEST:
            parsed.append((0, None, _TIE_ORDER[kind], kind, value))
            continue
        if kind == "limit" and value == "*":
            continue  # no limit
        try:
            version = Version.parse(value)
        except ValueError:
            raise MalformedRange(f"{kind} {value!r} is not a semantic version") from None
        parsed.append((1, version, _TIE_ORDER[kind], kind, value))
    if not any(kind == "introduced" for *_, kind, _ in parsed):
        raise MalformedRange("a range has no introduced event")
    parsed.sort(key=lambda e: (e[0], _SortableVersion(e[1]), e[2]))
    result: list[Interval] = []
    start: str | None = None
    is_open = False
    limits: list[tuple[Version, str]] = []
    for _, bound, _, kind, value in parsed:
        if kind == "introduced":
            if not is_open:
                start, is_open = (None if bound is None else value), True
        elif kind in ("fixed", "last_affected"):
            if is_open:
                result.append(Interval(start, value, kind == "last_affected"))
                is_open = False
        elif bound is not None:
            limits.append((bound, value))
    if is_open:
        result.append(Interval(start, None))
    if limits:
        result = _under_limit(result, *max(limits, key=lambda limit: _SortableVersion(limit[0])))
    return [r for r in result if not r.is_empty()]


class _SortableVersion:
    """Version or None (the lowest) as a sort key."""

    __slots__ = ("version",)

    def __init__(self, version: Version | None) -> None:
        self.version = version

    def __lt__(self, other: _SortableVersion) -> bool:
        if self.version is None:
            return other.version is not None
        return other.version is not None and self.version < other.version

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _SortableVersion) and self.version == other.version

    __hash__ = None  # type: ignore[assignment]


def _under_limit(intervals: list[Interval], limit: Version, text: str) -> list[Interval]:
    """The schema's `limit`: versions at or above it are not affected by the range."""
    result = []
    for interval in intervals:
        low = interval.low_version
        if low is not None and low >= limit:
            continue
        high = interval.high_version
        if high is None or high > limit or (high == limit and interval.high_inclusive):
            interval = Interval(interval.low, text, False)
        result.append(interval)
    return result


@dataclass
class Affected:
    product_key: str
    name: str = ""
    ranges: list[Interval] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)

    def range_text(self) -> str:
        if self.ranges:
            return "|".join(r.text() for r in self.ranges)
        return "|".join(f"[{v},{v}]" for v in self.versions)

    def range_texts(self) -> list[str]:
        return [r.text() for r in self.ranges] + [f"[{v},{v}]" for v in self.versions]

    def hits(self, version: str) -> bool:
        return self.hits_parsed(version, _parsed(version))

    def hits_parsed(self, version: str, parsed: Version | None) -> bool:
        """`hits` with the version already parsed (None: not SemVer), for a caller testing
        one version against many advisories."""
        if version in self.versions:
            return True
        if parsed is None:
            return False
        return any(r.contains(parsed) for r in self.ranges)

    def patched(self) -> list[str]:
        """The version requirements outside every range above the first fix, as RustSec
        writes them (`>=0.9.18, <0.10.0`, `>=0.10.2`): the versions to upgrade to."""
        merged: list[Interval] = []
        for interval in sorted(self.ranges, key=lambda i: _SortableVersion(i.low_version)):
            if merged and _reaches(merged[-1], interval):
                last = merged[-1]
                if last.high is not None and (interval.high is None or _ends_after(interval, last)):
                    merged[-1] = Interval(last.low, interval.high, interval.high_inclusive)
            else:
                merged.append(interval)
        result = []
        for position, interval in enumerate(merged):
            if interval.high is None:
                break
            start = f">{interval.high}" if interval.high_inclusive else f">={interval.high}"
            following = merged[position + 1] if position + 1 < len(merged) else None
            if following is not None and following.low is not None:
                start += f", <{following.low}"
            result.append(start)
        return result


def _reaches(left: Interval, right: Interval) -> bool:
    """Whether `right` (starting at or after `left`'s start) overlaps or touches `left`."""
    if left.high is None:
        return True
    low, high = right.low_version, left.high_version
    assert high is not None
    return low is None or low <= high


def _ends_after(right: Interval, left: Interval) -> bool:
    r, lft = right.high_version, left.high_version
    assert r is not None and lft is not None
    return r > lft or (r == lft and right.high_inclusive and not left.high_inclusive)


def affected_crates(advisory: dict[str, Any], problems: list[str] | None = None) -> list[Affected]:
    """crates.io packages of an advisory, several `affected` entries of one crate merged.
    A malformed entry or range is left out and described in `problems`."""
    merged: dict[str, Affected] = {}
    entries = advisory.get("affected")
    if not isinstance(entries, list):
        raise MalformedRange("affected is not a list")
    for number, entry in enumerate(entries):
        where = f"affected[{number}]"
        package = entry.get("package") if isinstance(entry, dict) else None
        if not isinstance(package, dict):
            _note(problems, f"{where} has no package object")
            continue
        if package.get("ecosystem") != "crates.io":
            continue
        name = package.get("name")
        if not isinstance(name, str) or not name:
            _note(problems, f"{where} names no crate")
            continue
        key = name.lower()
        item = merged.setdefault(key, Affected(key, name))
        ranges = entry.get("ranges") or []
        if not isinstance(ranges, list):
            _note(problems, f"{where}.ranges is not a list")
            ranges = []
        for position, range_ in enumerate(ranges):
            if isinstance(range_, dict) and range_.get("type") not in ("SEMVER", "ECOSYSTEM"):
                continue  # GIT ranges say nothing about crate versions
            try:
                item.ranges += range_intervals(range_)
            except MalformedRange as exc:
                _note(problems, f"{where}.ranges[{position}]: {exc}")
        versions = entry.get("versions") or []
        if isinstance(versions, list) and all(isinstance(v, str) for v in versions):
            item.versions += [v for v in versions if v not in item.versions]
        else:
            _note(problems, f"{where}.versions is not a list of strings")
        specific = entry.get("ecosystem_specific")
        affects = specific.get("affects") if isinstance(specific, dict) else None
        functions = affects.get("functions") if isinstance(affects, dict) else None
        if isinstance(functions, list):
            item.functions += [str(f) for f in functions if str(f) not in item.functions]
    return list(merged.values())


def _note(problems: list[str] | None, message: str) -> None:
    if problems is not None:
        problems.append(message)


def informational(advisory: dict[str, Any]) -> str | None:
    """RustSec's `informational` kind (unmaintained, unsound, notice…), or None for a
    vulnerability. RustSec writes it in each affected entry's database_specific."""
    places = [advisory.get("database_specific")]
    entries = advisory.get("affected")
    if isinstance(entries, list):
        places += [e.get("database_specific") for e in entries if isinstance(e, dict)]
    for place in places:
        if isinstance(place, dict) and isinstance(place.get("informational"), str):
            return str(place["informational"])
    return None


def cvss_vector(advisory: dict[str, Any]) -> str | None:
    severities = advisory.get("severity")
    if isinstance(severities, list):
        by_type = {
            s.get("type"): s.get("score")
            for s in severities
            if isinstance(s, dict) and isinstance(s.get("score"), str)
        }
        for kind in CVSS_TYPES:
            if kind in by_type:
                return str(by_type[kind])
    for entry in advisory.get("affected") or []:
        specific = entry.get("database_specific") if isinstance(entry, dict) else None
        if isinstance(specific, dict) and isinstance(specific.get("cvss"), str):
            return str(specific["cvss"])
    return None


@dataclass
class Advisory:
    """One advisory as stored: the record, its aliases (merged duplicates included), and the
    crates it affects."""

    osv_id: str
    record: dict[str, Any]
    aliases: list[str]
    modified: datetime | None
    withdrawn: datetime | None
    informational: str | None
    severity: str | None
    crates: list[Affected]

    @property
    def vuln_id(self) -> str:
        return vuln_id({"id": self.osv_id, "aliases": self.aliases})

    @property
    def summary(self) -> str | None:
        summary = self.record.get("summary")
        return summary if isinstance(summary, str) else None

    def in_cve_table(self) -> bool:
        """V1 is the CVE table: a CVE, not withdrawn, and a vulnerability — an informational
        advisory only when it carries a CVSS score (rated as a vulnerability)."""
        if self.withdrawn is not None or not self.vuln_id.startswith("CVE-"):
            return False
        return self.informational is None or self.severity is not None


def parse_advisory(record: dict[str, Any], problems: list[str]) -> Advisory | None:
    """The Advisory of a record, or None (with the reason in problems) when it is unusable."""
    osv_id = str(record["id"])
    aliases = record.get("aliases") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        problems.append(f"{osv_id}: aliases is not a list of strings")
        return None
    found: list[str] = []
    try:
        crates = affected_crates(record, found)
    except MalformedRange as exc:
        problems.append(f"{osv_id}: {exc}")
        return None
    problems += [f"{osv_id}: {p}" for p in found]
    return Advisory(
        osv_id=osv_id,
        record=record,
        aliases=sorted(set(aliases) - {osv_id}),
        modified=parse_time(record.get("modified")),
        withdrawn=parse_time(record.get("withdrawn")),
        informational=informational(record),
        severity=cvss_vector(record),
        crates=crates,
    )


def merge_duplicates(records: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Fold GHSA (and other non-RUSTSEC) records that duplicate a RUSTSEC advisory of the same
    source into it: the duplicate's id and aliases join the RUSTSEC aliases, and the later
    `modified` of the two is kept so a change to either is seen as a change. Returns the
    records to import (copies where changed) and how many duplicates were folded."""
    records = list(records)
    rustsec = {str(r["id"]): r for r in records if str(r["id"]).startswith("RUSTSEC-")}
    named_by: dict[str, set[str]] = {}
    for rid, r in rustsec.items():
        for alias in r.get("aliases") or []:
            named_by.setdefault(str(alias), set()).add(rid)
    merged: dict[str, dict[str, Any]] = {}
    kept: list[dict[str, Any]] = []
    folded = 0
    for r in records:
        own = str(r["id"])
        if own in rustsec:
            continue
        aliases = r.get("aliases") if isinstance(r.get("aliases"), list) else []
        targets = {str(a) for a in aliases or [] if str(a) in rustsec} | named_by.get(own, set())
        if not targets:
            kept.append(r)
            continue
        folded += 1
        for target in targets:
            into = merged.setdefault(target, copy.copy(rustsec[target]))
            into["aliases"] = sorted(
                ({str(a) for a in into.get("aliases") or []} | {own, *map(str, aliases or [])})
                - {target}
            )
            mine, theirs = parse_time(into.get("modified")), parse_time(r.get("modified"))
            if theirs is not None and (mine is None or theirs > mine):
                into["modified"] = r["modified"]
    result = [merged.get(rid, r) for rid, r in rustsec.items()] + kept
    return result, folded


@dataclass
class ReadReport:
    entries: int = 0
    skipped_too_large: int = 0
    skipped_invalid: int = 0


def read_advisories(
    data: bytes | Path, report: ReadReport, max_entry: int = MAX_ENTRY_BYTES
) -> Iterator[dict[str, Any]]:
    """OSV records from a zip (bytes or path), a folder of JSON files, or one JSON file."""
    if isinstance(data, Path) and data.is_dir():
        for path in sorted(data.glob("*.json")):
            yield from _one(path.read_bytes(), path.name, report, max_entry)
        return
    if isinstance(data, Path) and data.suffix.lower() == ".json":
        yield from _one(data.read_bytes(), data.name, report, max_entry)
        return
    try:
        archive = zipfile.ZipFile(io.BytesIO(data) if isinstance(data, bytes) else data)
    except (zipfile.BadZipFile, OSError) as exc:
        raise InputError(f"the OSV source is not a zip archive: {exc}") from None
    with archive:
        for info in archive.infolist():
            if info.is_dir() or not info.filename.endswith(".json"):
                continue
            if info.file_size > max_entry:
                report.skipped_too_large += 1
                log.warning(
                    "skipping %s: %d bytes is over the entry limit", info.filename, info.file_size
                )
                continue
            with archive.open(info) as handle:
                body = handle.read(max_entry + 1)  # the header's size could lie
            yield from _one(body, info.filename, report, max_entry)


def _one(body: bytes, name: str, report: ReadReport, max_entry: int) -> Iterator[dict[str, Any]]:
    if len(body) > max_entry:
        report.skipped_too_large += 1
        return
    try:
        record = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        report.skipped_invalid += 1
        log.warning("skipping %s: not JSON", name)
        return
    if not isinstance(record, dict) or not isinstance(record.get("id"), str):
        report.skipped_invalid += 1
        log.warning("skipping %s: not an OSV record (no id)", name)
        return
    report.entries += 1
    yield record


@dataclass
class ImportReport:
    read: ReadReport = field(default_factory=ReadReport)
    advisories: int = 0
    duplicates_merged: int = 0
    pairs: int = 0  # (advisory, crate) pairs read
    in_scope: int = 0  # pairs whose crate is in scope for the CVE table
    raw_written: int = 0
    unchanged: int = 0
    v1_rows: int = 0
    withdrawn: int = 0
    informational: int = 0
    hits: int = 0
    problems: list[str] = field(default_factory=list)  # "ID: what is wrong", one per skip


def import_advisories(
    db: Database, records: Iterable[dict[str, Any]], scope: str, report: ImportReport
) -> None:
    """Store the advisories of `records` (see the module doc for what each table holds).
    RAW rows are replaced only when the advisory's `modified` is newer; V1 and HIT rows are
    brought to what the advisories say now (inserting and deleting only what differs), so
    versions collected since the last import are matched too. `scope` is `collected` (V1 for
    the crates in PRODUCT) or `all`."""
    source, report.duplicates_merged = merge_duplicates(records)
    advisories: list[Advisory] = []
    for record in source:
        report.advisories += 1
        advisory = parse_advisory(record, report.problems)
        if advisory is not None:
            advisories.append(advisory)
    report.advisories += report.duplicates_merged
    if report.problems:
        for problem in report.problems:
            log.warning("OSV: %s (skipped)", problem)

    with db.engine.connect() as conn:
        known = {str(r[0]).lower() for r in conn.execute(select(db.product.c.PRODUCT_KEY))}
        stored = {
            (r.OSV_ID, str(r.PRODUCT_KEY).lower()): r.MODIFIED
            for r in conn.execute(
                select(db.vuln_raw.c.OSV_ID, db.vuln_raw.c.PRODUCT_KEY, db.vuln_raw.c.MODIFIED)
            )
        }
        v1_now = {
            (str(r.PRODUCT_KEY).lower(), r.VULN_ID, r.OSV_ID): (r.VULN_RANGE, r.MODIFIED)
            for r in conn.execute(
                select(
                    db.vuln_v1.c.PRODUCT_KEY,
                    db.vuln_v1.c.VULN_ID,
                    db.vuln_v1.c.OSV_ID,
                    db.vuln_v1.c.VULN_RANGE,
                    db.vuln_v1.c.MODIFIED,
                )
            )
        }
        hits_now = {
            (str(r.PRODUCT_KEY).lower(), r.VERSION, r.OSV_ID): r.VULN_ID
            for r in conn.execute(
                select(
                    db.vuln_hit.c.PRODUCT_KEY,
                    db.vuln_hit.c.VERSION,
                    db.vuln_hit.c.OSV_ID,
                    db.vuln_hit.c.VULN_ID,
                )
            )
        }
        # Each collected version parsed once, not once per advisory that names its crate.
        collected: dict[str, list[tuple[str, Version | None]]] = {}
        for r in conn.execute(select(db.version.c.PRODUCT_KEY, db.version.c.VERSION)):
            collected.setdefault(str(r[0]).lower(), []).append((r[1], _parsed(r[1])))

    now = utcnow()
    raw_rows: list[dict[str, Any]] = []
    v1_wanted: dict[tuple[str, str, str], dict[str, Any]] = {}
    hits_wanted: dict[tuple[str, str, str], dict[str, Any]] = {}
    ids = {a.osv_id for a in advisories}
    for advisory in advisories:
        if advisory.informational:
            report.informational += 1
        vid = advisory.vuln_id
        shared: dict[str, Any] | None = None  # the advisory's own RAW columns, made once
        for affected in advisory.crates:
            report.pairs += 1
            key = (advisory.osv_id, affected.product_key)
            previous = stored.get(key, _ABSENT)
            modified = advisory.modified
            if previous is _ABSENT or (
                modified is not None and (previous is None or previous < modified)
            ):
                if shared is None:
                    shared = _raw_columns(advisory)
                raw_rows.append(_raw_row(shared, affected, now))
                report.withdrawn += advisory.withdrawn is not None
            else:
                report.unchanged += 1
            in_scope = scope == "all" or affected.product_key in known
            report.in_scope += in_scope
            if in_scope and advisory.in_cve_table():
                v1_wanted[(affected.product_key, vid, advisory.osv_id)] = {
                    "PRODUCT_KEY": affected.product_key,
                    "VULN_ID": vid,
                    "OSV_ID": advisory.osv_id,
                    "VULN_RANGE": affected.range_text(),
                    "MAPPED_TYPE": MAPPED_TYPE,
                    "MODIFIED": modified,
                    "LAST_UPDATED": now,
                }
            if advisory.withdrawn is not None:
                continue
            for version, parsed in collected.get(affected.product_key, []):
                if affected.hits_parsed(version, parsed):
                    hits_wanted[(affected.product_key, version, advisory.osv_id)] = {
                        "PRODUCT_KEY": affected.product_key,
                        "VERSION": version,
                        "OSV_ID": advisory.osv_id,
                        "VULN_ID": vid,
                        "LAST_UPDATED": now,
                    }
    report.raw_written = len(raw_rows)
    report.v1_rows = len(v1_wanted)
    report.hits = len(hits_wanted)
    # Rows of advisories this source names that no longer hold (withdrawn, fixed ranges,
    # merged duplicates) go; rows of advisories the source does not name are left alone.
    folded = {str(a) for a in _folded_ids(source) if a not in ids}
    v1_gone = [k for k in v1_now if (k[2] in ids or k[2] in folded) and k not in v1_wanted]
    v1_new = [
        row for k, row in v1_wanted.items() if v1_now.get(k) != (row["VULN_RANGE"], row["MODIFIED"])
    ]
    hits_gone = [k for k in hits_now if (k[2] in ids or k[2] in folded) and k not in hits_wanted]
    hits_new = [row for k, row in hits_wanted.items() if hits_now.get(k) != row["VULN_ID"]]
    raw_gone = [k for k in stored if k[0] in folded]

    raw, v1, hit = db.vuln_raw, db.vuln_v1, db.vuln_hit
    with db.engine.begin() as conn:
        _delete_many(conn, raw, ("OSV_ID", "PRODUCT_KEY"), raw_gone)
        _delete_many(conn, v1, ("PRODUCT_KEY", "VULN_ID", "OSV_ID"), v1_gone)
        _delete_many(conn, hit, ("PRODUCT_KEY", "VERSION", "OSV_ID"), hits_gone)
        _upsert_many(conn, raw, raw_rows)
        _upsert_many(conn, v1, v1_new)
        _upsert_many(conn, hit, hits_new)


def _upsert_many(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    """Rows (dicts with the same keys) in executemany batches of the compiled upsert."""
    for start in range(0, len(rows), BATCH):
        upsert(conn, table, rows[start : start + BATCH])


def _folded_ids(source: list[dict[str, Any]]) -> set[str]:
    """Ids that merged RUSTSEC records now carry as aliases (GHSA duplicates): rows an older
    import stored under those ids are duplicates to remove."""
    result: set[str] = set()
    for record in source:
        if str(record["id"]).startswith("RUSTSEC-"):
            result |= {str(a) for a in record.get("aliases") or [] if not str(a).startswith("CVE-")}
    return result


def _delete_many(
    conn: Connection, table: Table, columns: tuple[str, ...], keys: Sequence[tuple[Any, ...]]
) -> None:
    if not keys:
        return
    statement = delete(table).where(*(table.c[c] == bindparam(f"k_{c}") for c in columns))
    rows = [{f"k_{c}": value for c, value in zip(columns, key, strict=True)} for key in keys]
    for start in range(0, len(rows), BATCH):
        conn.execute(statement, rows[start : start + BATCH])


def _raw_columns(advisory: Advisory) -> dict[str, Any]:
    """The RAW columns that are the advisory's, the same for every crate it names (its JSON
    is serialised once, not once per crate)."""
    record = advisory.record
    return {
        "OSV_ID": advisory.osv_id,
        "VULN_ID": advisory.vuln_id,
        "ALIASES": dumps(advisory.aliases),
        "SUMMARY": advisory.summary,
        "SEVERITY": dumps(record.get("severity") or []),
        "PUBLISHED": parse_time(record.get("published")),
        "MODIFIED": advisory.modified,
        "WITHDRAWN": advisory.withdrawn,
        "INFORMATIONAL": advisory.informational,
        "MAPPED_TYPE": MAPPED_TYPE,
        "OSV_JSON": dumps(record),
    }


def _raw_row(shared: dict[str, Any], affected: Affected, now: datetime) -> dict[str, Any]:
    return {
        **shared,
        "PRODUCT_KEY": affected.product_key,
        "VULN_RANGE": affected.range_text(),
        "LAST_UPDATED": now,
    }


def _parsed(version: str) -> Version | None:
    try:
        return Version.parse(version)
    except ValueError:
        return None


_ABSENT: Any = object()
