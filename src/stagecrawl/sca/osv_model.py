"""OSV advisories as the SCA core uses them: the packages of one ecosystem an advisory affects
(ranges, listed versions, functions), its kind, its CVSS vector, and duplicates folded into
the ecosystem's own advisory (a GHSA record duplicating a RUSTSEC one: OSV's dumps hold both).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from stagecrawl.sca.ecosystem import Ecosystem, OrderedVersion, parse_time
from stagecrawl.sca.osv_ranges import (
    Interval,
    MalformedRange,
    SortableVersion,
    ends_after,
    range_intervals,
    reaches,
)

CVSS_TYPES = ("CVSS_V3", "CVSS_V4", "CVSS_V2")


def vuln_id(advisory: dict[str, Any], primary_prefix: str = "") -> str:
    """The id the Go-compatible VULN_ID columns hold: the CVE alias if there is one, else the
    ecosystem database's id (RUSTSEC-…), else the OSV id."""
    aliases = [str(a) for a in _listed(advisory.get("aliases"))]
    osv_id = str(advisory["id"])
    for candidate in sorted(a for a in aliases if a.startswith("CVE-")):
        return candidate
    if primary_prefix:
        if osv_id.startswith(primary_prefix):
            return osv_id
        for candidate in sorted(a for a in aliases if a.startswith(primary_prefix)):
            return candidate
    return osv_id


@dataclass
class Affected:
    """One package of an advisory, its `affected` entries merged."""

    product_key: str
    name: str = ""
    ranges: list[Interval] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    ecosystem: Ecosystem | None = field(default=None, compare=False, repr=False)

    def range_text(self) -> str:
        """VULN_RANGE: the intervals, then the listed versions no interval already holds
        (`[v,v]`), `|`-separated."""
        return "|".join(self.range_texts())

    def range_texts(self) -> list[str]:
        extra = [v for v in self.versions if not self._in_a_range(v)]
        return [r.text() for r in self.ranges] + [f"[{v},{v}]" for v in extra]

    def _in_a_range(self, version: str) -> bool:
        parsed = self.ecosystem.parsed(version) if self.ecosystem is not None else None
        return parsed is not None and any(r.contains(parsed) for r in self.ranges)

    def hits(self, version: str) -> bool:
        assert self.ecosystem is not None
        return self.hits_parsed(version, self.ecosystem.parsed(version))

    def hits_parsed(self, version: str, parsed: OrderedVersion | None) -> bool:
        """`hits` with the version already parsed (None: the ecosystem cannot order it, so
        only the listed versions can name it), for a caller testing one version against many
        advisories."""
        if version in self.versions:
            return True
        if parsed is None:
            return False
        return any(r.contains(parsed) for r in self.ranges)

    def patched(self) -> list[str]:
        """The version requirements outside every range above the first fix, as RustSec
        writes them (`>=0.9.18, <0.10.0`, `>=0.10.2`): the versions to upgrade to."""
        merged: list[Interval] = []
        for interval in sorted(self.ranges, key=lambda i: SortableVersion(i.low_version)):
            if merged and reaches(merged[-1], interval):
                last = merged[-1]
                if last.high is not None and (interval.high is None or ends_after(interval, last)):
                    merged[-1] = Interval(
                        last.low,
                        interval.high,
                        interval.high_inclusive,
                        last.low_version,
                        interval.high_version,
                    )
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


def affected_packages(
    advisory: dict[str, Any], ecosystem: Ecosystem, problems: list[str] | None = None
) -> list[Affected]:
    """The packages of `ecosystem` an advisory affects, several `affected` entries of one
    package merged. A malformed entry or range is left out and described in `problems`."""
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
        if package.get("ecosystem") != ecosystem.name:
            continue
        name = package.get("name")
        if not isinstance(name, str) or not name:
            _note(problems, f"{where} names no package")
            continue
        key = ecosystem.product_key(name)
        item = merged.setdefault(key, Affected(key, name, ecosystem=ecosystem))
        ranges = entry.get("ranges") or []
        if not isinstance(ranges, list):
            _note(problems, f"{where}.ranges is not a list")
            ranges = []
        for position, range_ in enumerate(ranges):
            if isinstance(range_, dict) and range_.get("type") not in ("SEMVER", "ECOSYSTEM"):
                continue  # GIT ranges say nothing about package versions
            try:
                item.ranges += range_intervals(range_, ecosystem)
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
        # The Go database's affected symbols: imports[{path, symbols}] → `path.Symbol`
        imports = specific.get("imports") if isinstance(specific, dict) else None
        for spot in imports if isinstance(imports, list) else []:
            if isinstance(spot, dict) and isinstance(spot.get("symbols"), list):
                named = [f"{spot.get('path')}.{s}" for s in spot["symbols"]]
                item.functions += [f for f in named if f not in item.functions]
    return list(merged.values())


def _note(problems: list[str] | None, message: str) -> None:
    if problems is not None:
        problems.append(message)


def informational(advisory: dict[str, Any]) -> str | None:
    """The `informational` kind (RustSec: unmaintained, unsound, notice…), or None for a
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
            if isinstance(s, dict)
            and isinstance(s.get("type"), str)
            and isinstance(s.get("score"), str)
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
    packages it affects."""

    osv_id: str
    record: dict[str, Any]
    aliases: list[str]
    modified: datetime | None
    withdrawn: datetime | None
    informational: str | None
    severity: str | None
    packages: list[Affected]
    primary_prefix: str = ""

    @property
    def vuln_id(self) -> str:
        return vuln_id({"id": self.osv_id, "aliases": self.aliases}, self.primary_prefix)

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


def parse_advisory(
    record: dict[str, Any], ecosystem: Ecosystem, problems: list[str]
) -> Advisory | None:
    """The Advisory of a record, or None (with the reason in problems) when it is unusable."""
    osv_id = str(record["id"])
    aliases = record.get("aliases") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        problems.append(f"{osv_id}: aliases is not a list of strings")
        return None
    found: list[str] = []
    try:
        packages = affected_packages(record, ecosystem, found)
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
        packages=packages,
        primary_prefix=ecosystem.primary_prefix,
    )


def merge_duplicates(
    records: Iterable[dict[str, Any]], primary_prefix: str
) -> tuple[list[dict[str, Any]], int]:
    """Fold records (GHSA…) that duplicate an advisory of the ecosystem's own database (ids
    starting with `primary_prefix`) of the same source into it: the duplicate's id and aliases
    join the primary aliases, and the later `modified` of the two is kept so a change to either
    is seen as a change. Returns the records to import (copies where changed) and how many
    duplicates were folded. No prefix: nothing is folded."""
    records = list(records)
    if not primary_prefix:
        return records, 0
    primary = {str(r["id"]): r for r in records if str(r["id"]).startswith(primary_prefix)}
    named_by: dict[str, set[str]] = {}
    for rid, r in primary.items():
        for alias in _listed(r.get("aliases")):  # not a list: parse_advisory says so
            named_by.setdefault(str(alias), set()).add(rid)
    merged: dict[str, dict[str, Any]] = {}
    kept: list[dict[str, Any]] = []
    folded = 0
    for r in records:
        own = str(r["id"])
        if own in primary:
            continue
        aliases = r.get("aliases") if isinstance(r.get("aliases"), list) else []
        targets = {str(a) for a in aliases or [] if str(a) in primary} | named_by.get(own, set())
        if not targets:
            kept.append(r)
            continue
        folded += 1
        for target in targets:
            into = merged.setdefault(target, copy.copy(primary[target]))
            into["aliases"] = sorted(
                ({str(a) for a in _listed(into.get("aliases"))} | {own, *map(str, aliases or [])})
                - {target}
            )
            mine, theirs = parse_time(into.get("modified")), parse_time(r.get("modified"))
            if theirs is not None and (mine is None or theirs > mine):
                into["modified"] = r["modified"]
    result = [merged.get(rid, r) for rid, r in primary.items()] + kept
    return result, folded


def _listed(value: Any) -> list[Any]:
    """A record's list field, or nothing when the record holds something else there."""
    return value if isinstance(value, list) else []


def folded_ids(source: list[dict[str, Any]], primary_prefix: str) -> set[str]:
    """Ids that merged primary records now carry as aliases (GHSA duplicates): rows an older
    import stored under those ids are duplicates to remove."""
    result: set[str] = set()
    if not primary_prefix:
        return result
    for record in source:
        if str(record["id"]).startswith(primary_prefix):
            aliases = _listed(record.get("aliases"))
            result |= {str(a) for a in aliases if not str(a).startswith("CVE-")}
    return result
