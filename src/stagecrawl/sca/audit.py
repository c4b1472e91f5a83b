"""Audit: which stored advisories hit a set of package versions, for any ecosystem.

The answer comes from the advisory ranges in the registry's VULN RAW table (every advisory of
the OSV source, whatever packages were collected), evaluated for each version asked about with
the ecosystem's version order — the version need not be collected.

Exit decision (cargo-audit's convention): 1 when a vulnerability hits, or a package could not
be evaluated; informational advisories (unmaintained, unsound, notice…) are warnings unless
`deny` names them (`warnings` for all of them). Withdrawn advisories never hit.

Advisories that alias each other (a GHSA and its PYSEC twin, stored by two imports) are one
finding (`osv_model.merge_twins`). What was not audited is said, never passed over: a pin not
from the registry (git, URL, path, editable), not pinned, or whose version the ecosystem cannot
read is in `unaudited` with why; an advisory with a part that could not be read, for a version
none of its readable parts hits, is in `unevaluated`. A version the ecosystem cannot read, or a
requirement that is not a pin, fails the audit; the rest fail it only when `strict` (pip-audit's
`--strict`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from packageurl import PackageURL
from sqlalchemy import Table, func, select

from stagecrawl.errors import InputError
from stagecrawl.sca.config import Ignore
from stagecrawl.sca.ecosystem import Ecosystem, parse_time
from stagecrawl.sca.osv_model import (
    Affected,
    affected_packages,
    best_summary,
    cvss_vector,
    informational,
    merge_twins,
)
from stagecrawl.storage.db import Database

DENY_KINDS = ("warnings", "unmaintained", "unsound", "notice", "yanked", "informational")
CHUNK = 500


@dataclass
class Package:
    """One package version to audit and where it was found (lock file, repo@tag, argument)."""

    name: str
    version: str
    sources: list[str] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict)  # source → line of its entry
    product_key: str = ""  # the registry's key of `name`; set by merge_packages

    @property
    def key(self) -> tuple[str, str]:
        return (self.product_key or self.name.lower(), self.version)


@dataclass
class DependencyGraph:
    """A project's resolved graph as its lock file gives it: (name, version) nodes, the
    project's own package (`root`, None when the lock names several), the packages not from
    the registry (workspace members, path and git dependencies), and who depends on whom."""

    root: tuple[str, str] | None
    local: list[tuple[str, str]]
    edges: dict[tuple[str, str], list[tuple[str, str]]]
    name: str = ""  # the project, when no single root package names it (the lock's folder)


@dataclass(frozen=True)
class Unaudited:
    """An input that was not audited, and why: a pin not from the registry (git, URL, path,
    editable: `version` None when the source does not say), a requirement that is not a pin, a
    version the ecosystem cannot read. `fails`: it fails the audit without `strict` too (a
    requirement that is not a pin, a version that cannot be read: nothing can be said)."""

    name: str
    version: str | None
    source: str  # where it was found: "requirements.txt line 4", "uv.lock"
    reason: str
    fails: bool = False

    def text(self) -> str:
        pin = self.name if self.version is None else f"{self.name} {self.version}"
        return f"{pin} ({self.source}): {self.reason}"


@dataclass(frozen=True)
class Unevaluated:
    """An advisory of a package that could not be evaluated fully for one of its versions:
    its readable parts do not hit that version, and a part that could not be read might."""

    package: Package
    osv_id: str
    reasons: tuple[str, ...]

    def text(self) -> str:
        return (
            f"advisory {self.osv_id} could not be fully evaluated for {self.package.name}"
            f" {self.package.version}: {'; '.join(self.reasons)}"
        )


@dataclass(frozen=True)
class StoredAdvisory:
    osv_id: str
    aliases: tuple[str, ...]
    summary: str | None  # its summary, else the first sentence of its details
    details: str | None
    severity: str | None  # the CVSS vector, when the advisory has one
    informational: str | None
    published: datetime | None
    modified: datetime | None
    affected: Affected
    url: str


@dataclass(frozen=True)
class Hit:
    package: Package
    advisory: StoredAdvisory


@dataclass
class AuditReport:
    packages: list[Package]
    ecosystem: Ecosystem
    hits: list[Hit] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # inputs that could not be evaluated
    skipped: int = 0  # lock packages not from the registry (workspace, path, git, other)
    unaudited: list[Unaudited] = field(default_factory=list)  # named, with why
    unevaluated: list[Unevaluated] = field(default_factory=list)
    strict: bool = False  # the gate fails on anything unaudited or not fully evaluated
    deny: frozenset[str] = frozenset()
    advisories_stored: int = 0
    advisories_modified: datetime | None = None  # the newest `modified` among them
    # package key → (normalised SPDX expression, raw LICENSE) where collected
    licenses: dict[tuple[str, str], tuple[str | None, str | None]] = field(default_factory=dict)
    # The gate (stagecrawl.sca.gate): hits set aside, and what fails or is said beside them.
    ignored: list[tuple[Hit, Ignore]] = field(default_factory=list)
    below_threshold: list[Hit] = field(default_factory=list)
    gate_failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    yanked: list[Package] = field(default_factory=list)  # audited versions known yanked
    graph: DependencyGraph | None = None  # for a single lock file: the BOM's dependencies

    def denied(self, hit: Hit) -> bool:
        kind = hit.advisory.informational
        if kind is None:
            return True
        return bool({"warnings", "informational", kind} & self.deny)

    @property
    def yanked_denied(self) -> bool:
        return bool(self.yanked) and bool({"warnings", "yanked"} & self.deny)

    @property
    def vulnerabilities(self) -> list[Hit]:
        return [h for h in self.hits if h.advisory.informational is None]

    @property
    def warnings(self) -> list[Hit]:
        return [h for h in self.hits if h.advisory.informational is not None]

    @property
    def strict_failures(self) -> list[str]:
        """What fails only because the gate is strict."""
        if not self.strict:
            return []
        return [f"not audited: {u.text()}" for u in self.unaudited if not u.fails] + [
            e.text() for e in self.unevaluated
        ]

    @property
    def exit_code(self) -> int:
        failing = self.problems or self.gate_failures or self.yanked_denied
        failing = failing or any(u.fails for u in self.unaudited) or self.strict_failures
        return 1 if failing or any(self.denied(h) for h in self.hits) else 0

    def purl(self, package: Package | Unaudited) -> str:
        """The package URL, built by the purl library (`+` in a version is `%2B`), with the
        version in the ecosystem's one spelling."""
        version = package.version
        if version is not None:
            version = self.ecosystem.normalise_version(version)
        return PackageURL(
            type=self.ecosystem.purl_type, name=package.name, version=version
        ).to_string()


def parse_deny(values: Iterable[str]) -> frozenset[str]:
    kinds = {v.strip().lower() for value in values for v in value.split(",") if v.strip()}
    unknown = kinds - set(DENY_KINDS)
    if unknown:
        raise InputError(f"--deny takes {', '.join(DENY_KINDS)}; not {', '.join(sorted(unknown))}")
    return frozenset(kinds)


def merge_packages(packages: Iterable[Package], ecosystem: Ecosystem) -> list[Package]:
    """One Package per (package, version), the places it was found merged, sorted in the
    ecosystem's order. Two spellings of one version (`3.0` and `3.0.0` of PyPI) are one
    package, spelled as the ecosystem normalises it (the shorter spelling of the two)."""
    merged: dict[tuple[str, object], Package] = {}
    for package in packages:
        key = ecosystem.product_key(package.name)
        version = ecosystem.normalise_version(package.version)
        identity = (key, ecosystem.identity(package.version))
        into = merged.get(identity)
        if into is None:
            into = merged[identity] = Package(package.name, version, product_key=key)
        elif (len(version), version) < (len(into.version), into.version):
            into.version = version
        into.sources += [s for s in package.sources if s not in into.sources]
        into.lines = {**package.lines, **into.lines}
    return sorted(merged.values(), key=lambda p: (p.key[0], ecosystem.sort_key(p.version)))


def stored_advisories(
    db: Database, ecosystem: Ecosystem, raw: Table, keys: Iterable[str]
) -> dict[str, list[StoredAdvisory]]:
    """The advisories stored in `raw` for each package key, withdrawn ones left out, twins
    (records that alias each other, stored apart by two imports) merged into one."""
    wanted = sorted(set(keys))
    records: dict[str, list[dict[str, Any]]] = {}
    with db.engine.connect() as conn:
        for start in range(0, len(wanted), CHUNK):
            rows = conn.execute(
                select(raw.c.PRODUCT_KEY, raw.c.OSV_JSON).where(
                    raw.c.PRODUCT_KEY.in_(wanted[start : start + CHUNK]),
                    raw.c.WITHDRAWN.is_(None),
                )
            )
            for row in rows:
                key = ecosystem.product_key(str(row.PRODUCT_KEY))
                records.setdefault(key, []).append(json.loads(row.OSV_JSON))
    found: dict[str, list[StoredAdvisory]] = {}
    for key, stored in records.items():
        for record in merge_twins(stored, ecosystem.primary_prefix).records:
            for affected in affected_packages(record, ecosystem):
                if affected.product_key != key:
                    continue
                osv_id = str(record["id"])
                details = record.get("details")
                aliases = record.get("aliases")
                found.setdefault(key, []).append(
                    StoredAdvisory(
                        osv_id=osv_id,
                        aliases=tuple(sorted({str(a) for a in aliases or []} - {osv_id})),
                        summary=best_summary(record),
                        details=details if isinstance(details, str) else None,
                        severity=cvss_vector(record),
                        informational=informational(record),
                        published=parse_time(record.get("published")),
                        modified=parse_time(record.get("modified")),
                        affected=affected,
                        url=ecosystem.advisory_url(osv_id),
                    )
                )
    return found


def audit(
    db: Database,
    ecosystem: Ecosystem,
    raw: Table,
    packages: Iterable[Package],
    deny: frozenset[str] = frozenset(),
    import_hint: str = "import advisories first",
) -> AuditReport:
    """Evaluate every advisory stored in `raw` for each package's version. No advisory stored
    at all is an error (an empty table must not read as "all clear"). A version the ecosystem
    cannot read is matched against the advisories' `versions` lists only, and reported as not
    audited."""
    report = AuditReport(merge_packages(packages, ecosystem), ecosystem, deny=deny)
    with db.engine.connect() as conn:
        count, newest = conn.execute(select(func.count(), func.max(raw.c.MODIFIED))).one()
    if not count:
        raise InputError(f"no advisories are stored in {db.safe_url}: {import_hint}")
    report.advisories_stored, report.advisories_modified = int(count), newest
    advisories = stored_advisories(db, ecosystem, raw, (p.key[0] for p in report.packages))
    for package in report.packages:
        parsed = ecosystem.parsed(package.version)
        if parsed is None:
            report.unaudited.append(
                Unaudited(
                    package.name,
                    package.version,
                    ", ".join(package.sources) or "argument",
                    f"not a {ecosystem.version_kind}: only advisories that list it exactly"
                    " can name it",
                    fails=True,
                )
            )
        for advisory in advisories.get(package.key[0], []):
            if advisory.affected.hits_parsed(package.version, parsed):
                report.hits.append(Hit(package, advisory))
            elif parsed is not None and advisory.affected.unreadable:
                report.unevaluated.append(
                    Unevaluated(package, advisory.osv_id, tuple(advisory.affected.unreadable))
                )
    report.hits.sort(
        key=lambda h: (
            h.package.key[0],
            ecosystem.sort_key(h.package.version),
            h.advisory.osv_id,
        )
    )
    return report
