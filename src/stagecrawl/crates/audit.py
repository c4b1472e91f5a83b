"""`crates audit`: which stored advisories hit a set of crate versions.

The answer comes from the advisory ranges in TB_COMP_LIB_VULN_CARGO_RAW (every advisory of
the OSV source, whatever crates were collected), evaluated for each version asked about with
cargo's SemVer precedence — the version need not be collected. What to audit: `NAME@VERSION`,
`NAME` (its collected versions), the crates.io packages of a Cargo.lock (v1–v4; one crate may
be locked at several versions), or the locks of a git repository's tags.

Exit decision (cargo-audit's convention): 1 when a vulnerability hits, or a package could not
be evaluated; informational advisories (unmaintained, unsound, notice…) are warnings unless
`deny` names them (`warnings` for all of them). Withdrawn advisories never hit.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from stagecrawl.crates.lock import (
    GitRepo,
    LockedPackage,
    cargo_home,
    external_crates,
    lock_at_tag,
    parse_lockfile,
    select_tags,
)
from stagecrawl.crates.names import validate_name
from stagecrawl.crates.osv import Affected, affected_crates, cvss_vector
from stagecrawl.crates.semver import Version, sort_key
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.errors import InputError
from stagecrawl.storage.db import Database

DENY_KINDS = ("warnings", "unmaintained", "unsound", "notice", "informational")
CHUNK = 500


@dataclass
class Package:
    """One crate version to audit and where it was found (lock file, repo@tag, argument)."""

    name: str
    version: str
    sources: list[str] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict)  # source → line of its [[package]]

    @property
    def key(self) -> tuple[str, str]:
        return (self.name.lower(), self.version)

    @property
    def purl(self) -> str:
        return f"pkg:cargo/{self.name}@{self.version}"


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

    @property
    def url(self) -> str:
        if self.osv_id.startswith("RUSTSEC-"):
            return f"https://rustsec.org/advisories/{self.osv_id}.html"
        return f"https://osv.dev/vulnerability/{self.osv_id}"


@dataclass(frozen=True)
class Hit:
    package: Package
    advisory: StoredAdvisory


@dataclass
class AuditReport:
    packages: list[Package]
    hits: list[Hit] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # inputs that could not be evaluated
    skipped: int = 0  # lock packages not from crates.io (workspace, path, git, other registry)
    deny: frozenset[str] = frozenset()
    advisories_stored: int = 0
    advisories_modified: datetime | None = None  # the newest `modified` among them
    # (lowercased name, version) → (normalised SPDX expression, raw LICENSE) where collected
    licenses: dict[tuple[str, str], tuple[str | None, str | None]] = field(default_factory=dict)

    def denied(self, hit: Hit) -> bool:
        kind = hit.advisory.informational
        if kind is None:
            return True
        return bool({"warnings", "informational", kind} & self.deny)

    @property
    def vulnerabilities(self) -> list[Hit]:
        return [h for h in self.hits if h.advisory.informational is None]

    @property
    def warnings(self) -> list[Hit]:
        return [h for h in self.hits if h.advisory.informational is not None]

    @property
    def exit_code(self) -> int:
        return 1 if self.problems or any(self.denied(h) for h in self.hits) else 0


def parse_deny(values: Iterable[str]) -> frozenset[str]:
    kinds = {v.strip().lower() for value in values for v in value.split(",") if v.strip()}
    unknown = kinds - set(DENY_KINDS)
    if unknown:
        raise InputError(f"--deny takes {', '.join(DENY_KINDS)}; not {', '.join(sorted(unknown))}")
    return frozenset(kinds)


def merge_packages(packages: Iterable[Package]) -> list[Package]:
    """One Package per (crate, version), the places it was found merged, sorted."""
    merged: dict[tuple[str, str], Package] = {}
    for package in packages:
        into = merged.setdefault(package.key, Package(package.name, package.version))
        into.sources += [s for s in package.sources if s not in into.sources]
        into.lines = {**package.lines, **into.lines}
    return sorted(merged.values(), key=lambda p: (p.name.lower(), sort_key(p.version)))


def packages_of_lock(packages: list[LockedPackage], label: str) -> tuple[list[Package], int]:
    """The crates.io packages of a parsed Cargo.lock, and how many others it lists."""
    external = external_crates(packages)
    others = len({(p.name, p.version, p.source) for p in packages}) - len(external)
    return [Package(p.name, p.version, [label]) for p in external], others


def read_lockfile(path: Path) -> tuple[list[Package], int]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    packages, others = packages_of_lock(parse_lockfile(text, str(path)), str(path))
    lines = package_lines(text)
    for package in packages:
        line = lines.get((package.name, package.version))
        if line is not None:
            package.lines[str(path)] = line
    return packages, others


def package_lines(text: str) -> dict[tuple[str, str], int]:
    """The 1-based line of each `[[package]]` header of a Cargo.lock, by (name, version), for
    SARIF locations (the first one when a pair appears twice)."""
    result: dict[tuple[str, str], int] = {}
    header = 0
    name: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped == "[[package]]":
            header, name = number, None
        elif stripped.startswith("name = ") and header:
            name = stripped[len("name = ") :].strip().strip('"')
        elif stripped.startswith("version = ") and header and name is not None:
            version = stripped[len("version = ") :].strip().strip('"')
            result.setdefault((name, version), header)
            header = 0
    return result


async def packages_of_repo(
    repo: str,
    tags: list[str],
    pattern: str | None,
    all_tags: bool,
    cache_dir: Path,
    index_url: str,
    stop: GracefulStop | None = None,
) -> tuple[list[Package], int, list[str]]:
    """The packages of each chosen tag's Cargo.lock (committed, or resolved by cargo as lock
    mode does). A tag that cannot be read is a problem, not a silent gap."""
    if not (tags or pattern or all_tags):
        raise InputError("say which tags: --tag T (repeatable), --tags-matching GLOB or --all-tags")
    git = GitRepo(repo, cache_dir, stop)
    await git.sync()
    chosen = select_tags(await git.tags(), tags, pattern, all_tags)
    if not chosen:
        raise InputError(f"no tag of {repo} matches")
    home = cargo_home(cache_dir, index_url)
    result: list[Package] = []
    skipped = 0
    problems: list[str] = []
    for tag in chosen:
        try:
            locked, _kind = await lock_at_tag(git, tag, home)
        except InputError as exc:
            problems.append(str(exc))
            continue
        packages, others = packages_of_lock(locked, f"{git.label}@{tag}")
        result += packages
        skipped += others
    return result, skipped, problems


def parse_targets(targets: list[str]) -> tuple[list[Package], list[str]]:
    """`NAME@VERSION` as packages, and the bare `NAME`s (every collected version of each),
    all checked before any database is opened."""
    result: list[Package] = []
    wanted_all: list[str] = []
    for target in targets:
        name, at, version = target.partition("@")
        validate_name(name)
        if at and not version.strip():
            raise InputError(f"{target!r}: no version after @")
        if at:
            try:
                Version.parse(version)
            except ValueError:
                raise InputError(f"{target!r}: {version!r} is not a semantic version") from None
            result.append(Package(name, version.strip(), ["argument"]))
        else:
            wanted_all.append(name)
    return result, wanted_all


def collected_packages(db: Database, names: list[str]) -> list[Package]:
    result: list[Package] = []
    for name in names:
        with db.engine.connect() as conn:
            rows = conn.execute(
                select(db.version.c.NAME, db.version.c.VERSION).where(
                    db.version.c.PRODUCT_KEY == name.lower()
                )
            ).all()
        if not rows:
            raise InputError(
                f"no version of {name} is collected in {db.safe_url}; name one ({name}@1.2.3)"
                " or collect it first"
            )
        result += [Package(str(r.NAME), str(r.VERSION), ["collected"]) for r in rows]
    return result


def packages_of_targets(db: Database, targets: list[str]) -> list[Package]:
    """`NAME@VERSION` as given; `NAME` as every collected version of it."""
    packages, names = parse_targets(targets)
    return packages + collected_packages(db, names)


def stored_advisories(db: Database, keys: Iterable[str]) -> dict[str, list[StoredAdvisory]]:
    """The advisories stored for each crate (lowercased name), withdrawn ones left out."""
    raw = db.vuln_raw
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
                key = str(row.PRODUCT_KEY).lower()
                record: dict[str, Any] = json.loads(row.OSV_JSON)
                for affected in affected_crates(record):
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
                        )
                    )
    return found


def audit(
    db: Database, packages: Iterable[Package], deny: frozenset[str] = frozenset()
) -> AuditReport:
    """Evaluate every stored advisory of each package's crate for its version."""
    report = AuditReport(merge_packages(packages), deny=deny)
    with db.engine.connect() as conn:
        count, newest = conn.execute(select(func.count(), func.max(db.vuln_raw.c.MODIFIED))).one()
    if not count:
        raise InputError(
            f"no advisories are stored in {db.safe_url}: run `stagecrawl crates vulns` first"
        )
    report.advisories_stored, report.advisories_modified = int(count), newest
    advisories = stored_advisories(db, (p.name.lower() for p in report.packages))
    for package in report.packages:
        try:
            Version.parse(package.version)
        except ValueError:
            report.problems.append(
                f"{package.name} {package.version}: not a semantic version, not evaluated"
            )
            continue
        for advisory in advisories.get(package.name.lower(), []):
            if advisory.affected.hits(package.version):
                report.hits.append(Hit(package, advisory))
    report.hits.sort(
        key=lambda h: (h.package.name.lower(), sort_key(h.package.version), h.advisory.osv_id)
    )
    report.licenses = collected_licenses(db, report.packages)
    return report


def collected_licenses(
    db: Database, packages: list[Package]
) -> dict[tuple[str, str], tuple[str | None, str | None]]:
    table = db.version
    wanted = {p.key for p in packages}
    names = sorted({p.name.lower() for p in packages})
    result: dict[tuple[str, str], tuple[str | None, str | None]] = {}
    with db.engine.connect() as conn:
        for start in range(0, len(names), CHUNK):
            rows = conn.execute(
                select(
                    table.c.PRODUCT_KEY,
                    table.c.VERSION,
                    table.c.LICENSE_EXPRESSION,
                    table.c.LICENSE,
                ).where(table.c.PRODUCT_KEY.in_(names[start : start + CHUNK]))
            )
            for row in rows:
                key = (str(row.PRODUCT_KEY).lower(), str(row.VERSION))
                if key in wanted:
                    result[key] = (row.LICENSE_EXPRESSION, row.LICENSE)
    return result
