"""Vulnerabilities from the OSV crates.io dump (`all.zip`, one OSV JSON file per advisory).

The archive is read in memory entry by entry (never extracted), with a size limit on the
archive and on each entry. Per advisory and affected crate:
- VULN_ID: the CVE alias if there is one, else the RUSTSEC id, else the OSV id;
- VULN_RANGE: SEMVER events in interval notation — `[a,b)` introduced/fixed, `[a,b]` with
  last_affected, `(,b)` when introduced is 0 / 0.0.0 / 0.0.0-0, `[a,)` with no end — several
  ranges (also from several `affected` entries of the same crate) joined with `|`; with no
  ranges, the explicit `versions` as `[v,v]` each.
Which collected versions an advisory hits is computed with cargo's semver precedence.
"""

from __future__ import annotations

import io
import json
import logging
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.engine import Connection

from stagecrawl.crates.api import parse_time
from stagecrawl.crates.queue import utcnow
from stagecrawl.crates.semver import Version
from stagecrawl.errors import InputError
from stagecrawl.storage.db import Database, dumps, upsert

log = logging.getLogger("stagecrawl.osv")

DEFAULT_OSV_URL = "https://osv-vulnerabilities.storage.googleapis.com/crates.io/all.zip"
MAX_ARCHIVE_BYTES = 512 * 1024 * 1024
MAX_ENTRY_BYTES = 4 * 1024 * 1024
ZERO = frozenset({"0", "0.0.0", "0.0.0-0"})
MAPPED_TYPE = "RE"


def vuln_id(advisory: dict[str, Any]) -> str:
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
    low: str | None  # None: from the beginning
    high: str | None  # None: no fix
    high_inclusive: bool = False

    def text(self) -> str:
        low = "(" if self.low is None else f"[{self.low}"
        if self.high is None:
            return f"{low},)"
        return f"{low},{self.high}{']' if self.high_inclusive else ')'}"

    def contains(self, version: Version) -> bool:
        if self.low is not None and version < Version.parse(self.low):
            return False
        if self.high is None:
            return True
        high = Version.parse(self.high)
        return version <= high if self.high_inclusive else version < high


def intervals(affected: dict[str, Any]) -> list[Interval]:
    """The SEMVER (and ECOSYSTEM) ranges of one `affected` entry, in event order."""
    result: list[Interval] = []
    for range_ in affected.get("ranges") or []:
        if range_.get("type") not in ("SEMVER", "ECOSYSTEM"):
            continue
        start: str | None = None
        open_range = False
        for event in range_.get("events") or []:
            if "introduced" in event:
                introduced = str(event["introduced"])
                start = None if introduced in ZERO else introduced
                open_range = True
            elif "fixed" in event and open_range:
                result.append(Interval(start, str(event["fixed"])))
                open_range = False
            elif "last_affected" in event and open_range:
                result.append(Interval(start, str(event["last_affected"]), True))
                open_range = False
        if open_range:
            result.append(Interval(start, None))
    return result


@dataclass
class Affected:
    product_key: str
    ranges: list[Interval] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)

    def range_text(self) -> str:
        if self.ranges:
            return "|".join(r.text() for r in self.ranges)
        return "|".join(f"[{v},{v}]" for v in self.versions)

    def hits(self, version: str) -> bool:
        if version in self.versions:
            return True
        try:
            parsed = Version.parse(version)
        except ValueError:
            return False
        try:
            return any(r.contains(parsed) for r in self.ranges)
        except ValueError:  # a malformed bound in the advisory: do not guess
            return False


def affected_crates(advisory: dict[str, Any]) -> list[Affected]:
    """crates.io packages of an advisory, several `affected` entries of one crate merged."""
    merged: dict[str, Affected] = {}
    for entry in advisory.get("affected") or []:
        package = entry.get("package") or {}
        if package.get("ecosystem") != "crates.io" or not package.get("name"):
            continue
        key = str(package["name"]).lower()
        item = merged.setdefault(key, Affected(key))
        item.ranges += intervals(entry)
        item.versions += [str(v) for v in entry.get("versions") or []]
    return list(merged.values())


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
        return
    report.entries += 1
    yield record


@dataclass
class ImportReport:
    read: ReadReport = field(default_factory=ReadReport)
    advisories: int = 0
    in_scope: int = 0
    raw_written: int = 0
    unchanged: int = 0
    v1_rows: int = 0
    withdrawn: int = 0
    hits: int = 0


def import_advisories(
    db: Database, records: Iterator[dict[str, Any]], scope: str, report: ImportReport
) -> None:
    """Upsert RAW (every advisory), V1 (CVE ids), and the HIT rows of collected versions.
    A newer `modified` replaces; a withdrawn advisory is flagged in RAW and leaves V1."""
    with db.engine.connect() as conn:
        known = {r[0] for r in conn.execute(select(db.product.c.PRODUCT_KEY))}
        stored = {
            (r.OSV_ID, r.PRODUCT_KEY): r.MODIFIED
            for r in conn.execute(
                select(db.vuln_raw.c.OSV_ID, db.vuln_raw.c.PRODUCT_KEY, db.vuln_raw.c.MODIFIED)
            )
        }
        collected: dict[str, list[str]] = {}
        for r in conn.execute(select(db.version.c.PRODUCT_KEY, db.version.c.VERSION)):
            collected.setdefault(str(r[0]).lower(), []).append(r[1])
    now = utcnow()
    for advisory in records:
        report.advisories += 1
        modified = parse_time(advisory.get("modified"))
        withdrawn = parse_time(advisory.get("withdrawn"))
        vid = vuln_id(advisory)
        for affected in affected_crates(advisory):
            if scope == "collected" and affected.product_key not in known:
                continue
            report.in_scope += 1
            key = (advisory["id"], affected.product_key)
            previous = stored.get(key, _ABSENT)
            changed = previous is _ABSENT or (
                modified is not None and (previous is None or previous < modified)
            )
            stored[key] = modified if changed else previous
            with db.engine.begin() as conn:
                if changed:
                    _write_advisory(
                        db, conn, advisory, affected, vid, modified, withdrawn, now, report
                    )
                else:
                    report.unchanged += 1
                # Hits are recomputed every time: versions collected since the last import
                # are matched even when the advisory itself did not change.
                conn.execute(
                    delete(db.vuln_hit).where(
                        db.vuln_hit.c.PRODUCT_KEY == affected.product_key,
                        db.vuln_hit.c.OSV_ID == advisory["id"],
                    )
                )
                if withdrawn is not None:
                    continue
                hits = [
                    {
                        "PRODUCT_KEY": affected.product_key,
                        "VERSION": version,
                        "VULN_ID": vid,
                        "OSV_ID": advisory["id"],
                        "LAST_UPDATED": now,
                    }
                    for version in collected.get(affected.product_key, [])
                    if affected.hits(version)
                ]
                if hits:
                    upsert(conn, db.vuln_hit, hits)
                    report.hits += len(hits)


def _write_advisory(
    db: Database,
    conn: Connection,
    advisory: dict[str, Any],
    affected: Affected,
    vid: str,
    modified: datetime | None,
    withdrawn: datetime | None,
    now: datetime,
    report: ImportReport,
) -> None:
    range_text = affected.range_text()
    upsert(
        conn,
        db.vuln_raw,
        [
            {
                "OSV_ID": advisory["id"],
                "PRODUCT_KEY": affected.product_key,
                "VULN_ID": vid,
                "ALIASES": dumps(sorted(advisory.get("aliases") or [])),
                "SUMMARY": advisory.get("summary"),
                "SEVERITY": dumps(advisory.get("severity") or []),
                "PUBLISHED": parse_time(advisory.get("published")),
                "MODIFIED": modified,
                "WITHDRAWN": withdrawn,
                "VULN_RANGE": range_text,
                "MAPPED_TYPE": MAPPED_TYPE,
                "OSV_JSON": dumps(advisory),
                "LAST_UPDATED": now,
            }
        ],
    )
    report.raw_written += 1
    if withdrawn is not None:
        report.withdrawn += 1
        conn.execute(
            delete(db.vuln_v1).where(
                db.vuln_v1.c.PRODUCT_KEY == affected.product_key,
                db.vuln_v1.c.OSV_ID == advisory["id"],
            )
        )
    elif vid.startswith("CVE-"):
        upsert(
            conn,
            db.vuln_v1,
            [
                {
                    "PRODUCT_KEY": affected.product_key,
                    "VULN_ID": vid,
                    "VULN_RANGE": range_text,
                    "MAPPED_TYPE": MAPPED_TYPE,
                    "OSV_ID": advisory["id"],
                    "MODIFIED": modified,
                    "LAST_UPDATED": now,
                }
            ],
        )
        report.v1_rows += 1


_ABSENT: Any = object()
