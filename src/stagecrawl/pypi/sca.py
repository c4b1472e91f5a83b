"""PyPI as the SCA core knows it (stagecrawl.sca): the OSV ecosystem `PyPI` ordered by PEP 440
(`packaging`), purl type `pypi` (names PEP 503-normalised, as the purl spec asks), PYSEC as its
advisory database, its VULN tables; and the pipeline functions `pypi vulns`, `pypi audit` and
`pypi licenses check` call."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version
from sqlalchemy import Connection, select

from stagecrawl.errors import InputError, StorageError
from stagecrawl.pypi import tables
from stagecrawl.pypi.locks import LockFile, read_lock
from stagecrawl.pypi.names import name_problem, normalize
from stagecrawl.pypi.versions import sort_key
from stagecrawl.sca.audit import AuditReport, Package, Unaudited, audit, parse_deny
from stagecrawl.sca.ecosystem import Ecosystem, VulnTables
from stagecrawl.sca.matcher import LicenseMatcher
from stagecrawl.sca.osv_import import ImportReport, RegistryState, import_advisories
from stagecrawl.sca.osv_read import read_advisories
from stagecrawl.sca.policy import LicenseCheck, Policy, check_rows
from stagecrawl.storage.db import Database


def normalised(version: str) -> str:
    """The PEP 440 normal form (`v23.9.0` → `23.9.0`, `2.0.0RC1` → `2.0.0rc1`, `3.0-1` →
    `3.0.post1`); a version that is not PEP 440 as written."""
    try:
        return str(Version(version))
    except InvalidVersion:
        return version


PYPI = Ecosystem(
    name="PyPI",
    purl_type="pypi",
    parse_version=Version,  # InvalidVersion is a ValueError: such a version matches no range
    version_kind="PEP 440 version",
    product_key=normalize,
    primary_prefix="PYSEC-",
    database_name="PyPA Advisory Database",
    sort_key=sort_key,
    package_word="project",
    registry_key="pypi",
    lockfile_name="lock file",
    normalise_version=normalised,  # equality: packaging's Version (the default key)
)
SCOPES = ("collected", "all")
_PIN = re.compile(r"^\s*(?P<name>[^=\s]+)\s*==\s*(?P<version>\S+)\s*$")


def license_matcher(db: Database) -> LicenseMatcher:
    """The SCA core's matcher over TB_LICENSE_V2 (seeded from the SPDX list when empty)."""
    return LicenseMatcher.load(db)


def vuln_tables(db: Database) -> VulnTables:
    """TB_COMP_LIB_VULN_PYPI_RAW / _V1 / _HIT."""
    t = db.metadata.tables
    return VulnTables(
        raw=t["TB_COMP_LIB_VULN_PYPI_RAW"],
        v1=t["TB_COMP_LIB_VULN_PYPI_V1"],
        hit=t["TB_COMP_LIB_VULN_PYPI_HIT"],
    )


def import_osv(db: Database, source: bytes | Path, scope: str, max_entry: int) -> ImportReport:
    """The OSV PyPI dump (all.zip, a folder or one .json) into the PYPI VULN tables."""
    if scope not in SCOPES:
        raise InputError(f"--scope must be 'collected' or 'all', not {scope!r}")
    report = ImportReport()
    records = read_advisories(source, report.read, max_entry)
    registry = tables.tables(db)

    def state(conn: Connection) -> RegistryState:
        known = {str(k).lower() for (k,) in conn.execute(select(registry.product.c.PRODUCT_KEY))}
        collected: dict[str, list[str]] = {}
        rows = conn.execute(select(registry.version.c.PRODUCT_KEY, registry.version.c.VERSION))
        for key, v in rows:
            collected.setdefault(str(key).lower(), []).append(str(v))
        return RegistryState(known, collected)

    import_advisories(db, PYPI, vuln_tables(db), records, scope, report, state)
    return report


def parse_targets(targets: Sequence[str]) -> list[Package]:
    """`NAME==VERSION` arguments (a bare NAME, or another specifier, is refused: no resolver)."""
    packages: list[Package] = []
    for target in targets:
        match = _PIN.match(target)
        if match is None:
            raise InputError(f"{target!r}: give NAME==VERSION (pins only; nothing is resolved)")
        problem = name_problem(match["name"])
        if problem:
            raise InputError(f"{target!r}: {problem}")
        name = normalize(match["name"])
        packages.append(Package(name, match["version"], [target]))
    return packages


def lock_packages(lock: LockFile) -> list[Package]:
    """The pins of a lock file, each where it is pinned (an included file, at its line)."""
    packages = []
    for release in lock.releases:
        where = release.where or lock.where
        lines = {where: release.line} if release.line else {}
        packages.append(Package(release.name, release.version, [where], lines))
    return packages


def lock_unaudited(lock: LockFile) -> list[Unaudited]:
    """What a lock names that is not audited, and why."""
    return [Unaudited(p.name, p.version, p.where, p.reason, p.fails) for p in lock.not_audited]


@dataclass
class AuditInputs:
    packages: list[Package]
    skipped: int
    problems: list[str]
    unaudited: list[Unaudited] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def audit_inputs(
    targets: Sequence[str],
    lockfiles: Iterable[Path],
    tagged: Sequence[tuple[str, list[LockFile] | str]] = (),
) -> AuditInputs:
    """Every input read and checked before the database is opened: pins, lock files, and the
    lock files of repository tags (`pipeline.lock_files`; a tag without one is a problem)."""
    packages = parse_targets(targets)
    skipped = 0
    problems: list[str] = []
    unaudited: list[Unaudited] = []
    notes: list[str] = []
    locks = [read_lock(path) for path in lockfiles]
    for label, found in tagged:
        if isinstance(found, str):
            problems.append(f"{label}: {found}")
        else:
            locks += found
    for lock in locks:
        packages += lock_packages(lock)
        skipped += len(lock.skipped)
        unaudited += lock_unaudited(lock)
        notes += lock.notes
    if not packages and not problems and not locks:  # a lock of no PyPI package: a clean audit
        raise InputError("say what to audit: NAME==VERSION … or --lockfile PATH")
    return AuditInputs(packages, skipped, problems, unaudited, notes)


def audit_pypi(
    db_url: str, inputs: AuditInputs, deny: Sequence[str], strict: bool = False
) -> AuditReport:
    """`pypi audit`: the pins asked about, against the stored PyPI advisories (collected or
    not). An unpinned lock line, or a version PEP 440 cannot read, fails the audit (exit 1):
    it cannot be audited. A pin not from the index (git, URL, path, editable) or an advisory
    that could not be fully evaluated is said in the report, and fails it when `strict`
    (pip-audit's --strict)."""
    denied = parse_deny(deny)
    try:
        database = Database(db_url, read_only=True)
    except StorageError as exc:
        raise StorageError(f"{exc}; import advisories first: stagecrawl pypi vulns") from None
    try:
        report = audit(
            database,
            PYPI,
            vuln_tables(database).raw,
            inputs.packages,
            denied,
            "stagecrawl pypi vulns --source …",
        )
    finally:
        database.dispose()  # SQLite: its WAL closed with the last connection
    report.skipped = inputs.skipped
    report.problems = inputs.problems + report.problems
    report.unaudited = inputs.unaudited + report.unaudited
    report.notes += inputs.notes
    report.strict = strict
    return report


def check_licenses(
    db_url: str, allow: list[str], deny: list[str], exceptions: list[str]
) -> LicenseCheck:
    """`pypi licenses check`: every collected PyPI version against the policy (cargo-deny's
    semantics, the SCA core's), read from LICENSE_EXPRESSION where stagecrawl has one."""
    if not allow:
        raise InputError("give the allowed licenses: --allow MIT,Apache-2.0,…")
    policy = Policy.parse(allow, deny, exceptions, package_word="PROJECT")
    database = Database(db_url, read_only=True)
    try:
        matcher = LicenseMatcher.load(database)
        table = tables.tables(database).version
        with database.engine.connect() as conn:
            rows = [
                (str(r.PRODUCT_KEY), str(r.VERSION), r.LICENSE_EXPRESSION or r.LICENSE)
                for r in conn.execute(
                    select(
                        table.c.PRODUCT_KEY,
                        table.c.VERSION,
                        table.c.LICENSE_EXPRESSION,
                        table.c.LICENSE,
                    ).where(table.c.LANGUAGE == tables.LANGUAGE)
                )
            ]
    finally:
        database.dispose()
    return check_rows(rows, policy, matcher, sort_key)
