"""Audit: which stored advisories hit a set of package versions, for any ecosystem.

The answer comes from the advisory ranges in the registry's VULN RAW table (every advisory of
the OSV source, whatever packages were collected), evaluated for each version asked about with
the ecosystem's version order — the version need not be collected.

Exit decision (cargo-audit's convention): 1 when a vulnerability hits, or a package could not
be evaluated; informational advisories (unmaintained, unsound, notice…) are warnings unless
`deny` names them (`warnings` for all of them). Withdrawn advisories never hit.
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
from stagecrawl.sca.ecosystem import Ecosystem
from stagecrawl.sca.osv_model import Affected, affected_packages, cvss_vector
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
class StoredAdvisory:
    osv_id: str
    aliases: tuple[str, ...]
    summary: str | None
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
    # what the inputs name that is not the registry's (a git or path source): (what, why)
    unaudited: list[tuple[str, str]] = field(default_factory=list)
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
    def exit_code(self) -> int:
        failing = self.problems or self.gate_failures or self.yanked_denied
        return 1 if failing or any(self.denied(h) for h in self.hits) else 0

    def purl(self, package: Package) -> str:
        """The package URL, built by the purl library (`+` in a version is `%2B`)."""
        return PackageURL(
            type=self.ecosystem.purl_type, name=package.name, version=package.version
        ).to_string()


def parse_deny(values: Iterable[str]) -> frozenset[str]:
    kinds = {v.strip().lower() for value in values for v in value.split(",") if v.strip()}
    unknown = kinds - set(DENY_KINDS)
    if unknown:
        raise InputError(f"--deny takes {', '.join(DENY_KINDS)}; not {', '.join(sorted(unknown))}")
    return frozenset(kinds)


def merge_packages(packages: Iterable[Package], ecosystem: Ecosystem) -> list[Package]:
    """One Package per (package, version), the places it was found merged, sorted in the
    ecosystem's order."""
    merged: dict[tuple[str, str], Package] = {}
    for package in packages:
        key = (ecosystem.product_key(package.name), package.version)
        into = merged.setdefault(key, Package(package.name, package.version, product_key=key[0]))
        into.sources += [s for s in package.sources if s not in into.sources]
        into.lines = {**package.lines, **into.lines}
    return sorted(merged.values(), key=lambda p: (p.key[0], ecosystem.sort_key(p.version)))


def stored_advisories(
    db: Database, ecosystem: Ecosystem, raw: Table, keys: Iterable[str]
) -> dict[str, list[StoredAdvisory]]:
    """The advisories stored in `raw` for each package key, withdrawn ones left out."""
    wanted = sorted(set(keys))
    found: dict[str, list[StoredAdvisory]] = {}
    with db.engine.connect() as conn:
        for start in range(0, len(wanted), CHUNK):
            rows = conn.execute(
                select(
                    raw.c.OSV_ID,
                    raw.c.PRODUCT_KEY,
                    raw.c.ALIASES,
                    raw.c.SUMMARY,
                    raw.c.INFORMATIONAL,
                    raw.c.PUBLISHED,
                    raw.c.MODIFIED,
                    raw.c.OSV_JSON,
                ).where(
                    raw.c.PRODUCT_KEY.in_(wanted[start : start + CHUNK]),
                    raw.c.WITHDRAWN.is_(None),
                )
            )
            for row in rows:
                key = ecosystem.product_key(str(row.PRODUCT_KEY))
                record: dict[str, Any] = json.loads(row.OSV_JSON)
                for affected in affected_packages(record, ecosystem):
                    if affected.product_key != key:
                        continue
                    details = record.get("details")
                    found.setdefault(key, []).append(
                        StoredAdvisory(
                            osv_id=str(row.OSV_ID),
                            aliases=tuple(json.loads(row.ALIASES or "[]")),
                            summary=row.SUMMARY,
                            details=details if isinstance(details, str) else None,
                            severity=cvss_vector(record),
                            informational=row.INFORMATIONAL,
                            published=row.PUBLISHED,
                            modified=row.MODIFIED,
                            affected=affected,
                            url=ecosystem.advisory_url(str(row.OSV_ID)),
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
    at all is an error (an empty table must not read as "all clear")."""
    report = AuditReport(merge_packages(packages, ecosystem), ecosystem, deny=deny)
    with db.engine.connect() as conn:
        count, newest = conn.execute(select(func.count(), func.max(raw.c.MODIFIED))).one()
    if not count:
        raise InputError(f"no advisories are stored in {db.safe_url}: {import_hint}")
    report.advisories_stored, report.advisories_modified = int(count), newest
    advisories = stored_advisories(db, ecosystem, raw, (p.key[0] for p in report.packages))
    for package in report.packages:
        if ecosystem.parsed(package.version) is None:
            report.problems.append(
                f"{package.name} {package.version}: not a {ecosystem.version_kind}, not evaluated"
            )
            continue
        for advisory in advisories.get(package.key[0], []):
            if advisory.affected.hits(package.version):
                report.hits.append(Hit(package, advisory))
    report.hits.sort(
        key=lambda h: (
            h.package.key[0],
            ecosystem.sort_key(h.package.version),
            h.advisory.osv_id,
        )
    )
    return report
