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

from stagecrawl.sca.cvss_rating import cvss_rating
from stagecrawl.sca.ecosystem import Ecosystem, OrderedVersion, parse_time
from stagecrawl.sca.osv_ranges import Interval, MalformedRange, range_intervals, union

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
    """One package of an advisory, its `affected` entries merged: its ranges as one union of
    intervals, its listed versions (matched by the ecosystem's equality), and the parts that
    could not be read (`unreadable`: a version of that package may be affected by them, so
    an audit says it could not evaluate the advisory fully)."""

    product_key: str
    name: str = ""
    ranges: list[Interval] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)
    ecosystem: Ecosystem | None = field(default=None, compare=False, repr=False)
    unreadable: list[str] = field(default_factory=list)
    # (how many listed versions it was made from, their identities): one set per Affected,
    # not one parse per listed version per version asked about
    _listed: tuple[int, frozenset[Any]] = field(
        default=(0, frozenset()), init=False, compare=False, repr=False
    )
    _outside_made: tuple[tuple[int, int], list[tuple[str, OrderedVersion | None]]] = field(
        default=((-1, -1), []), init=False, compare=False, repr=False
    )

    def range_text(self) -> str:
        """VULN_RANGE: the intervals, then the listed versions no interval already holds
        (`[v,v]`), `|`-separated."""
        return "|".join(self.range_texts())

    def range_texts(self) -> list[str]:
        return [r.text() for r in self.ranges] + [f"[{v},{v}]" for v, _ in self._outside()]

    def _outside(self) -> list[tuple[str, OrderedVersion | None]]:
        """The listed versions no interval holds, each identity once, with their parsed
        versions (made once: a report asks for the advice of every hit)."""
        made_from = (len(self.versions), len(self.ranges))
        if self._outside_made[0] == made_from:
            return self._outside_made[1]
        seen: set[Any] = set()
        result = []
        for version in self.versions:
            parsed = self.ecosystem.parsed(version) if self.ecosystem is not None else None
            identity = (
                self.ecosystem.identity(version, parsed) if self.ecosystem is not None else version
            )
            if identity in seen:
                continue
            seen.add(identity)
            if parsed is None or not any(r.contains(parsed) for r in self.ranges):
                result.append((version, parsed))
        self._outside_made = (made_from, result)
        return result

    def _identity(self, version: str) -> Any:
        return self.ecosystem.identity(version) if self.ecosystem is not None else version

    def listed(self, version: str, parsed: OrderedVersion | bool | None = True) -> bool:
        """Whether the `versions` list names `version`, by the ecosystem's equality
        (`parsed`: the version already parsed, None when it is not one)."""
        if version in self.versions:
            return True
        if not self.versions:
            return False
        count, identities = self._listed
        if count != len(self.versions):
            identities = frozenset(self._identity(v) for v in self.versions)
            self._listed = (len(self.versions), identities)
        if self.ecosystem is None:
            return False
        return self.ecosystem.identity(version, parsed) in identities

    def hits(self, version: str) -> bool:
        assert self.ecosystem is not None
        return self.hits_parsed(version, self.ecosystem.parsed(version))

    def hits_parsed(self, version: str, parsed: OrderedVersion | None) -> bool:
        """`hits` with the version already parsed (None: the ecosystem cannot order it, so
        only the listed versions can name it), for a caller testing one version against many
        advisories."""
        if parsed is not None and any(r.contains(parsed) for r in self.ranges):
            return True
        return self.listed(version, parsed)

    def patched(self) -> list[str]:
        """The version requirements outside every affected version above the first fix, as
        RustSec writes them (`>=0.9.18, <0.10.0`, `>=0.10.2`): the versions to upgrade to.
        From the same union the hits come from, listed versions outside the ranges included,
        so no requirement admits an affected version."""
        points = [Interval(v, v, True, p, p) for v, p in self._outside() if p is not None]
        merged = union([*self.ranges, *points])
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


def merge_affected(parts: list[Affected]) -> Affected:
    """One package's Affected from several twins' (ranges united, lists joined)."""
    first = parts[0]
    merged = Affected(first.product_key, first.name, ecosystem=first.ecosystem)
    for part in parts:
        merged.ranges += part.ranges
        merged.versions += [v for v in part.versions if v not in merged.versions]
        merged.functions += [f for f in part.functions if f not in merged.functions]
        merged.unreadable += [u for u in part.unreadable if u not in merged.unreadable]
    merged.ranges = union(merged.ranges)
    return merged


def affected_packages(
    advisory: dict[str, Any], ecosystem: Ecosystem, problems: list[str] | None = None
) -> list[Affected]:
    """The packages of `ecosystem` an advisory affects, several `affected` entries of one
    package merged. A malformed entry or range is left out, described in `problems` and, where
    the entry names its package, in that package's `unreadable`."""
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

        def unreadable(message: str, item: Affected = item) -> None:
            _note(problems, message)
            item.unreadable.append(message)

        ranges = entry.get("ranges") or []
        if not isinstance(ranges, list):
            unreadable(f"{where}.ranges is not a list")
            ranges = []
        for position, range_ in enumerate(ranges):
            if isinstance(range_, dict) and range_.get("type") not in ("SEMVER", "ECOSYSTEM"):
                continue  # GIT ranges say nothing about package versions
            try:
                item.ranges += range_intervals(range_, ecosystem)
            except MalformedRange as exc:
                unreadable(f"{where}.ranges[{position}]: {exc}")
        versions = entry.get("versions") or []
        if isinstance(versions, list) and all(isinstance(v, str) for v in versions):
            item.versions += [v for v in versions if v not in item.versions]
        else:
            unreadable(f"{where}.versions is not a list of strings")
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
    for item in merged.values():
        item.ranges = union(item.ranges)
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
    """One advisory as stored: the record, its aliases (merged twins included), and the
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
    record: dict[str, Any],
    ecosystem: Ecosystem,
    problems: list[str],
    warnings: list[str] | None = None,
) -> Advisory | None:
    """The Advisory of a record, or None (with the reason in `problems`) when it is unusable
    as a whole. A part that cannot be read (a range, a versions list, an entry) is described
    in `warnings` (in `problems` when no list is given for them) and the rest is used."""
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
    (problems if warnings is None else warnings).extend(f"{osv_id}: {p}" for p in found)
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


_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "inc.", "ltd.", "no.", "approx.", "cf.")


def first_sentence(details: str, limit: int = 200) -> str | None:
    """The first sentence of an advisory's `details` (CommonMark), on one line, for an
    advisory without a `summary` (2,659 of the 2,661 PYSEC records): up to the first `.`, `!`
    or `?` followed by a space (not one ending a common abbreviation), cut at `limit`."""
    text = " ".join(line.strip().lstrip("#").strip() for line in details.strip().splitlines())
    text = " ".join(text.split())
    if not text:
        return None
    end = len(text)
    for position, char in enumerate(text):
        if char not in ".!?" or (position + 1 < len(text) and not text[position + 1].isspace()):
            continue
        word = text[: position + 1].rsplit(" ", 1)[-1].lower()
        if char == "." and word.endswith(_ABBREVIATIONS):
            continue
        end = position + 1
        break
    sentence = text[:end]
    if len(sentence) > limit:
        sentence = sentence[: limit - 1].rstrip() + "…"
    return sentence


def best_summary(record: dict[str, Any]) -> str | None:
    """What a person reads of an advisory in one line: its `summary`, else the first sentence
    of its `details`."""
    summary = record.get("summary")
    if isinstance(summary, str) and summary.strip():
        return " ".join(summary.split())
    details = record.get("details")
    return first_sentence(details) if isinstance(details, str) else None


@dataclass
class TwinMerge:
    """Records after twins were merged: the records to use, how many were folded into a twin,
    and the ids now carried only as aliases of another record (rows stored under them by an
    earlier import are duplicates to remove)."""

    records: list[dict[str, Any]]
    merged: int = 0
    folded: set[str] = field(default_factory=set)


def merge_twins(records: Iterable[dict[str, Any]], primary_prefix: str = "") -> TwinMerge:
    """Records that alias each other (a GHSA and a PYSEC twin: OSV's dumps hold both; aliases
    are symmetric and transitive, the schema says) as one record that loses nothing:

    - its id: a live twin's, the ecosystem's own database first (`primary_prefix`), else the
      lowest; every other id, and every twin's aliases, are its aliases;
    - withdrawn only when every twin is; otherwise what a withdrawn twin says is left out
      (its authors took it back) and the live twins speak;
    - `affected`: every (live) twin's entries, so ranges unite and a package named by any twin
      is named; `severity`: the highest rated CVSS of the twins; `summary` and `details`: the
      chosen twin's, else another's; `references` joined; `modified` the latest (a change to
      any twin is a change), `published` the earliest.

    Records sharing only a third id (two RUSTSEC records naming one CVE) are not twins: each
    is its own advisory."""
    records = list(records)
    parent = list(range(len(records)))

    def find(index: int) -> int:
        while parent[index] != index:
            parent[index] = parent[parent[index]]
            index = parent[index]
        return index

    by_id: dict[str, list[int]] = {}
    for index, record in enumerate(records):
        by_id.setdefault(str(record["id"]), []).append(index)
    for index, record in enumerate(records):
        for other in by_id[str(record["id"])]:
            parent[find(other)] = find(index)
        for alias in _listed(record.get("aliases")):
            for other in by_id.get(str(alias), []):
                parent[find(other)] = find(index)
    groups: dict[int, list[dict[str, Any]]] = {}
    for index, record in enumerate(records):
        groups.setdefault(find(index), []).append(record)
    result = TwinMerge([])
    for group in groups.values():
        if len(group) == 1:
            result.records.append(group[0])
            continue
        merged = _merged(group, primary_prefix)
        result.records.append(merged)
        result.merged += len(group) - 1
        result.folded |= {str(r["id"]) for r in group} - {str(merged["id"])}
    result.folded |= folded_ids(result.records, primary_prefix)
    result.folded -= {str(r["id"]) for r in result.records}
    return result


def _merged(group: list[dict[str, Any]], primary_prefix: str) -> dict[str, Any]:
    def preference(record: dict[str, Any]) -> tuple[bool, bool, str]:
        own = str(record["id"])
        own_database = bool(primary_prefix) and own.startswith(primary_prefix)
        return (_withdrawn(record), not own_database, own)

    ordered = sorted(group, key=preference)
    live = [r for r in ordered if not _withdrawn(r)] or ordered
    chosen = ordered[0]
    merged = copy.copy(chosen)
    ids = {str(r["id"]) for r in group}
    aliases = {str(a) for r in group for a in _listed(r.get("aliases"))}
    merged["aliases"] = sorted((ids | aliases) - {str(chosen["id"])})
    modified = [(t, r["modified"]) for r in group if (t := parse_time(r.get("modified")))]
    if modified:
        merged["modified"] = max(modified)[1]
    published = [(t, r["published"]) for r in group if (t := parse_time(r.get("published")))]
    if published:
        merged["published"] = min(published)[1]
    if len(live) < len(group) or not _withdrawn(chosen):  # a live twin: not withdrawn
        merged.pop("withdrawn", None)
    entries = [e for r in live for e in _listed(r.get("affected"))]
    if isinstance(chosen.get("affected"), list) or entries:
        merged["affected"] = entries
    rated = [(cvss_rating(cvss_vector(r)), r) for r in live]
    best = max(
        ((rating[0], -position, r) for position, (rating, r) in enumerate(rated) if rating),
        default=None,
        key=lambda item: item[:2],
    )
    if best is not None and best[2] is not chosen:
        severity = best[2].get("severity")
        vector = cvss_vector(best[2])
        merged["severity"] = (
            severity
            if isinstance(severity, list) and severity
            else [{"type": _cvss_type(vector), "score": vector}]
        )
    for text in ("summary", "details"):
        value = next(
            (r[text] for r in live if isinstance(r.get(text), str) and r[text].strip()), None
        )
        if value is not None:
            merged[text] = value
    references: list[Any] = []
    seen: set[str] = set()
    for record in ordered:
        for reference in _listed(record.get("references")):
            key = str(reference.get("url")) if isinstance(reference, dict) else str(reference)
            if key not in seen:
                seen.add(key)
                references.append(reference)
    if references:
        merged["references"] = references
    return merged


def _withdrawn(record: dict[str, Any]) -> bool:
    return bool(record.get("withdrawn"))


def _cvss_type(vector: str | None) -> str:
    if vector and vector.startswith("CVSS:4."):
        return "CVSS_V4"
    if vector and vector.startswith("CVSS:3."):
        return "CVSS_V3"
    return "CVSS_V2"


def _listed(value: Any) -> list[Any]:
    """A record's list field, or nothing when the record holds something else there."""
    return value if isinstance(value, list) else []


def folded_ids(source: list[dict[str, Any]], primary_prefix: str) -> set[str]:
    """Ids that records of the ecosystem's own database carry as aliases (GHSA twins), CVEs
    aside: rows an older import stored under those ids are duplicates to remove."""
    result: set[str] = set()
    if not primary_prefix:
        return result
    for record in source:
        if str(record["id"]).startswith(primary_prefix):
            aliases = _listed(record.get("aliases"))
            result |= {str(a) for a in aliases if not str(a).startswith("CVE-")}
    return result
