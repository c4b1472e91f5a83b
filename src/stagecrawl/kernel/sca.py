"""A registry's SCA commands, written once: import its advisories (`vulns`), audit pins, lock
files or a repository's tags against them through the gate (`audit`), and check licenses
against a policy (`licenses check`). The semantics are the SCA core's (stagecrawl.sca: OSV
ranges, the gate, cargo-deny's license policy); the registry gives its ecosystem, its lock
files and its pin syntax. Each function returns a report for the command to render.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, select

from stagecrawl.components import download_fetcher, open_database
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.errors import ConfigError, InputError, StorageError
from stagecrawl.kernel.lock import LockSources, read_lockfiles, read_sources
from stagecrawl.kernel.registry import LockInput, Pin, Registry
from stagecrawl.sca.ai import AiBackfillReport, AiLicenseClient, backfill_ai
from stagecrawl.sca.audit import (
    CHUNK,
    AuditReport,
    Package,
    Unaudited,
    audit,
    merge_packages,
    parse_deny,
)
from stagecrawl.sca.config import (
    SEVERITY_LEVELS,
    GateConfig,
    Ignore,
    discover,
    parse_duration,
    parse_threshold,
)
from stagecrawl.sca.ecosystem import utcnow
from stagecrawl.sca.gate import apply_gate
from stagecrawl.sca.matcher import BackfillReport, LicenseMatcher, backfill
from stagecrawl.sca.osv_import import ImportReport, RegistryState, import_advisories
from stagecrawl.sca.osv_read import read_advisories
from stagecrawl.sca.policy import (
    Clarification,
    LicenseCheck,
    PackageLicenses,
    Policy,
    Violation,
    check_rows,
    parse_licensee,
)
from stagecrawl.settings import Settings
from stagecrawl.storage.db import Database

SCOPES = ("collected", "all")


async def download_or_path(
    s: Settings, source: str, limit: int, what: str, stop: GracefulStop
) -> bytes | Path:
    """A URL is fetched on the download lane (into memory up to `limit`); a path is checked."""
    if source.startswith(("http://", "https://")):
        async with download_fetcher(s, source, max_body_bytes=limit) as fetcher:
            return (await stop.cancelling(fetcher.get(source, lane="download"))).content
    path = Path(source)
    if not path.exists():
        raise InputError(f"{what} {source} does not exist")
    if path.is_file() and path.stat().st_size > limit:
        raise InputError(f"{what} {source} is larger than {limit} bytes")
    return path


def import_records(
    db: Database, registry: Registry[Any], data: bytes | Path, scope: str, max_entry: int
) -> ImportReport:
    """An OSV dump of the registry's ecosystem (all.zip, a folder or one .json) into its
    VULN tables: V1 for the packages in PRODUCT (`collected`) or every one (`all`), HIT for
    the collected versions."""
    if scope not in SCOPES:
        raise InputError(f"--scope must be 'collected' or 'all', not {scope!r}")
    report = ImportReport()
    store_records(db, registry, read_advisories(data, report.read, max_entry), scope, report)
    return report


def store_records(
    db: Database,
    registry: Registry[Any],
    records: Iterable[dict[str, Any]],
    scope: str,
    report: ImportReport,
) -> None:
    """Advisories already read into the registry's VULN tables (see `import_records`)."""
    products, versions = registry.products(db), registry.versions(db)

    def state(conn: Connection) -> RegistryState:
        return RegistryState(products.keys(conn), versions.by_product(conn))

    import_advisories(
        db, registry.ecosystem, registry.vuln_tables(db), records, scope, report, state
    )


async def run_vulns(
    registry: Registry[Any],
    s: Settings,
    source: str,
    scope: str,
    max_archive_bytes: int,
    max_entry_bytes: int,
    stop: GracefulStop,
) -> ImportReport:
    """`<registry> vulns`: the OSV dump (URL, zip, folder or .json) into the VULN tables."""
    if scope not in SCOPES:
        raise InputError(f"--scope must be 'collected' or 'all', not {scope!r}")
    data = await download_or_path(s, source, max_archive_bytes, "OSV source", stop)
    database = open_database(s)
    return await asyncio.to_thread(import_records, database, registry, data, scope, max_entry_bytes)


# -- what to audit or check ------------------------------------------------------------------


@dataclass(frozen=True)
class Inputs:
    """What to check (any mix): pins, lock files, a repository's tags."""

    targets: tuple[str, ...] = ()
    lockfiles: tuple[Path, ...] = ()
    repo: str | None = None
    tags: tuple[str, ...] = ()
    tags_matching: str | None = None
    all_tags: bool = False

    def __bool__(self) -> bool:
        return bool(self.targets or self.lockfiles or self.repo)

    @property
    def sources(self) -> LockSources:
        return LockSources(self.lockfiles, self.repo, self.tags, self.tags_matching, self.all_tags)


@dataclass(frozen=True)
class AuditRequest:
    """What to audit and what fails the run beside the config file: `deny` kinds, advisory
    ids to ignore, a severity threshold and a maximum advisory-data age (flags win), and
    `strict`: any input that could not be audited fails (pip-audit's --strict)."""

    inputs: Inputs
    deny: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    severity_threshold: str | None = None
    max_advisory_age: str | None = None
    strict: bool = False


@dataclass
class Gathered:
    packages: list[Package] = field(default_factory=list)
    # audited, but no registry package: no license of ours to check (Go's standard library)
    audit_only: list[Package] = field(default_factory=list)
    whole: list[str] = field(default_factory=list)  # names: every collected version of each
    skipped: int = 0  # lock entries not from the registry
    problems: list[str] = field(default_factory=list)  # inputs that could not be read
    unaudited: list[Unaudited] = field(default_factory=list)  # named, with why
    notes: list[str] = field(default_factory=list)  # how inputs were read (an include once)
    locks: list[LockInput] = field(default_factory=list)


def lock_packages(registry: Registry[Any], pins: list[Pin]) -> list[Package]:
    packages = []
    for pin in pins:
        package = registry.audit_package(pin.name, pin.version, pin.where)
        if pin.line is not None:
            package.lines[pin.where] = pin.line
        packages.append(package)
    return packages


def add_lock(registry: Registry[Any], gathered: Gathered, lock: LockInput) -> None:
    gathered.locks.append(lock)
    gathered.packages += lock_packages(registry, lock.pins)
    gathered.audit_only += lock_packages(registry, lock.audit_only)
    gathered.skipped += sum(1 for u in lock.unaudited if not u.fails)
    gathered.unaudited += lock.unaudited
    gathered.notes += lock.notes
    gathered.problems += [
        f"{lock.where}: {what}: {why}" for what, why in sorted(lock.rejected.items())
    ]


async def gather(
    registry: Registry[Any], s: Settings, inputs: Inputs, stop: GracefulStop | None
) -> Gathered:
    """The versions the inputs name; every input is read before a database is opened."""
    gathered = Gathered()
    registry.configure(s)
    for target in inputs.targets:
        name, version = registry.parse_pin(target)
        if version is None:
            gathered.whole.append(name)
        else:
            gathered.packages.append(registry.audit_package(name, version, "argument"))
    for lock in await read_lockfiles(registry, inputs.lockfiles, stop):
        add_lock(registry, gathered, lock)
    if inputs.repo is not None:
        sources = replace(inputs.sources, lockfiles=())
        for read in await read_sources(registry, s, sources, stop):
            if read.error is not None:
                gathered.problems.append(read.error)
            for lock in read.locks:
                add_lock(registry, gathered, lock)
    return gathered


def collected_packages(db: Database, registry: Registry[Any], names: list[str]) -> list[Package]:
    """Every collected version of each name (a name with none is an error: name a version)."""
    result: list[Package] = []
    versions = registry.versions(db)
    example = registry.decl.pin_form.replace("NAME", "{}").replace("VERSION", "1.2.3")
    for name in names:
        with db.reading() as conn:
            rows = versions.versions_of(conn, registry.product_key(name))
        if not rows:
            raise InputError(
                f"no version of {name} is collected in {db.safe_url}; name one"
                f" ({example.format(name)}) or collect it first"
            )
        result += [registry.audit_package(real, version, "collected") for real, version in rows]
    return result


def gate_config(
    registry: Registry[Any] | None, config_file: Path | None, request: AuditRequest
) -> GateConfig:
    """The config file (found upward from the working directory, or --config) under the
    flags: --deny replaces the file's kinds, --ignore adds, the others replace. The cargo
    tools' files (deny.toml, .cargo/audit.toml) are read for a Rust audit only."""
    cargo = registry is None or registry.reads_cargo_configs
    config = discover(Path.cwd(), config_file, cargo)
    flags = GateConfig(
        ignores=tuple(Ignore(i, source="--ignore") for i in request.ignore),
        strict=request.strict,
    )
    if request.severity_threshold is not None:
        threshold = parse_threshold(request.severity_threshold)
        if threshold is None:
            raise InputError(
                f"--severity-threshold takes a CVSS score (0–10) or one of"
                f" {', '.join(SEVERITY_LEVELS)}, not {request.severity_threshold!r}"
            )
        flags = replace(flags, severity_threshold=threshold)
    if request.max_advisory_age is not None:
        age = parse_duration(request.max_advisory_age)
        if age is None:
            raise InputError(
                f"--max-advisory-age takes days (30, 30d or P30D), not {request.max_advisory_age!r}"
            )
        flags = replace(flags, max_advisory_age=age)
    merged = config.merged(flags)
    if request.deny:
        merged = replace(merged, deny_kinds=frozenset())
    return merged


def audit_packages(
    db: Database,
    registry: Registry[Any],
    packages: Iterable[Package],
    denied: frozenset[str] = frozenset(),
) -> AuditReport:
    """Versions against the registry's stored advisories (collected or not), with the
    license of each collected one (for the BOM) and which are known yanked; no gate yet."""
    report = audit(
        db,
        registry.ecosystem,
        registry.vuln_tables(db).raw,
        packages,
        denied,
        import_hint=f"run `stagecrawl {registry.decl.cli} vulns` first",
    )
    report.licenses = collected_licenses(db, registry, report.packages)
    report.yanked = yanked_packages(db, registry, report.packages)
    return report


def audit_gathered(
    db: Database,
    registry: Registry[Any],
    gathered: Gathered,
    denied: frozenset[str],
    config: GateConfig,
) -> AuditReport:
    """The gathered versions against the registry's stored advisories, through the gate."""
    packages = gathered.packages + gathered.audit_only
    packages += collected_packages(db, registry, gathered.whole)
    report = audit_packages(db, registry, packages, denied)
    report.skipped = gathered.skipped
    report.problems = gathered.problems + report.problems
    report.unaudited = gathered.unaudited + report.unaudited
    report.notes += gathered.notes
    apply_gate(report, config, utcnow())
    return report


async def run_audit(
    registry: Registry[Any],
    s: Settings,
    request: AuditRequest,
    stop: GracefulStop | None,
    config_file: Path | None = None,
) -> AuditReport:
    """`<registry> audit`: the versions asked about, against the stored advisories (collected
    or not), through the gate of the config file and the flags. Read-only."""
    if not request.inputs:
        raise InputError(
            f"say what to audit: {registry.decl.pin_form}, --lockfile PATH or --repo REPO"
        )
    denied = parse_deny(request.deny)
    config = gate_config(registry, config_file, request)
    gathered = await gather(registry, s, request.inputs, stop)
    try:
        database = open_database(s, read_only=True)
    except StorageError as exc:
        hint = f"import advisories first: stagecrawl {registry.decl.cli} vulns"
        raise StorageError(f"{exc}; {hint}") from None
    try:
        report = audit_gathered(database, registry, gathered, denied, config)
    finally:
        database.dispose()  # SQLite: its WAL closed with the last connection
    locks = request.inputs.lockfiles
    if len(locks) == 1 and not (request.inputs.repo or request.inputs.targets):
        report.graph = gathered.locks[0].graph if gathered.locks else None
    return report


def collected_licenses(
    db: Database, registry: Registry[Any], packages: list[Package]
) -> dict[tuple[str, str], tuple[str | None, str | None]]:
    """The license of each audited version that is collected (for the CycloneDX BOM), by
    the package's key; versions compared by the registry's equality (PyPI's pin `3.13.0` is
    the `3.13` collected)."""
    wanted = _by_version_key(registry, packages)
    names = sorted({p.key[0] for p in packages})
    result: dict[tuple[str, str], tuple[str | None, str | None]] = {}
    with db.reading() as conn:
        for key, _name, version, expression, text in registry.versions(db).licenses(conn, names):
            for package in wanted.get((key, registry.version_key(version)), ()):
                result[package.key] = (expression, text)
    return result


def _by_version_key(
    registry: Registry[Any], packages: list[Package]
) -> dict[tuple[str, Hashable], list[Package]]:
    wanted: dict[tuple[str, Hashable], list[Package]] = {}
    for package in packages:
        name, version = package.key
        wanted.setdefault((name, registry.version_key(version)), []).append(package)
    return wanted


def yanked_packages(
    db: Database, registry: Registry[Any], packages: list[Package]
) -> list[Package]:
    """The audited versions that are collected and yanked (a version not collected is not
    known to be yanked: it is not listed)."""
    table = registry.tables(db).version
    fold = registry.decl.names.fold
    wanted = _by_version_key(registry, packages)
    names = sorted({p.key[0] for p in packages})
    found: list[Package] = []
    with db.reading() as conn:
        for start in range(0, len(names), CHUNK):
            rows = conn.execute(
                select(table.c.PRODUCT_KEY, table.c.VERSION).where(
                    table.c.LANGUAGE == registry.language,
                    table.c.PRODUCT_KEY.in_(names[start : start + CHUNK]),
                    table.c.YANKED.is_(True),
                )
            )
            for row in rows:
                key = (fold(str(row.PRODUCT_KEY)), registry.version_key(str(row.VERSION)))
                found += wanted.get(key, ())
    return found


# -- licenses ------------------------------------------------------------------------------


def policy_from_config(
    registry: Registry[Any],
    config: GateConfig,
    allow: list[str],
    deny: list[str],
    exceptions: list[str],
) -> Policy:
    """The license policy of a run: the flags over the config file (`--allow` / `--deny`
    replace the file's lists; `--exception` adds to its exceptions); version requirements in
    exceptions are the registry's (cargo's, PEP 440's)."""
    word = registry.decl.words.unit.upper()
    flags = Policy.parse(allow, deny, exceptions, word, registry.version_matcher)

    def matcher(requirement: str) -> Callable[[str], bool]:
        if registry.version_matcher is not None:
            return registry.version_matcher(requirement)
        return lambda version: version == requirement.lstrip("=").strip()

    try:
        from_file = Policy(
            tuple(parse_licensee(text) for text in config.allow),
            tuple(parse_licensee(text) for text in config.deny),
            tuple(
                PackageLicenses(
                    rule.name,
                    tuple(parse_licensee(text) for text in rule.licenses),
                    None if rule.version is None else matcher(rule.version),
                    rule.source,
                )
                for rule in config.exceptions
            ),
            tuple(
                Clarification(
                    rule.name,
                    rule.expression or "",
                    None if rule.version is None else matcher(rule.version),
                    rule.source,
                )
                for rule in config.clarify
            ),
        )
    except ValueError as exc:
        files = ", ".join(config.files) or "the config"
        raise ConfigError(f"{files}: licenses: {exc}") from None
    reader = registry.policy_reader or registry.license_reader
    for rule in config.clarify:
        if reader.normalise(rule.expression or "").expression is None:
            raise ConfigError(
                f"{rule.source}: licenses.clarify: {rule.name}: not an SPDX expression"
            )
    return Policy(
        allow=flags.allow or from_file.allow,
        deny=flags.deny or from_file.deny,
        exceptions=flags.exceptions + from_file.exceptions,
        clarify=from_file.clarify,
    )


def check_database(db: Database, registry: Registry[Any], policy: Policy) -> LicenseCheck:
    """Every collected version whose license the policy does not accept."""
    matcher = LicenseMatcher.load(db, registry.license_reader)
    with db.reading() as conn:
        rows = (
            (name, version, registry.policy_license(expression, text))
            for _, name, version, expression, text in registry.versions(db).licenses(conn)
        )
        return check_rows(
            rows, policy, matcher, registry.ecosystem.sort_key, registry.policy_reader
        )


def check_packages(
    db: Database, registry: Registry[Any], packages: list[Package], policy: Policy
) -> LicenseCheck:
    """The license of each version of a project, as collected; a version not collected is
    reported (its license is unknown), never passed."""
    licenses = collected_licenses(db, registry, packages)
    matcher = LicenseMatcher.load(db, registry.license_reader)
    sort_key = registry.ecosystem.sort_key
    collected = [p for p in packages if p.key in licenses]
    result = check_rows(
        ((p.name, p.version, registry.policy_license(*licenses[p.key])) for p in collected),
        policy,
        matcher,
        sort_key,
        registry.policy_reader,
    )
    sources = {p.key: tuple(p.sources) for p in packages}
    missing = [
        Violation(p.name, p.version, None, None, "not collected: license unknown")
        for p in packages
        if p.key not in licenses
    ]
    result.rows += len(missing)
    key = registry.product_key
    result.violations = sorted(
        (
            replace(v, found_in=sources.get((key(v.package), v.version), ()))
            for v in [*result.violations, *missing]
        ),
        key=lambda v: (key(v.package), sort_key(v.version)),
    )
    return result


async def run_licenses_check(
    registry: Registry[Any],
    s: Settings,
    allow: list[str],
    deny: list[str],
    exceptions: list[str],
    inputs: Inputs,
    stop: GracefulStop | None,
    config_file: Path | None = None,
) -> LicenseCheck:
    """`<registry> licenses check`: a project's resolved packages (lock files, a repository's
    tags, pins) or, with no input, every collected version, against the license policy of
    the config file and the flags. Read-only."""
    config = discover(Path.cwd(), config_file, registry.reads_cargo_configs)
    policy = policy_from_config(registry, config, allow, deny, exceptions)
    if not policy.allow and not policy.exceptions:
        raise InputError(
            "give the allowed licenses: --allow MIT,Apache-2.0,… or [licenses] allow in"
            " stagecrawl.toml" + (" (or deny.toml)" if registry.reads_cargo_configs else "")
        )
    gathered = await gather(registry, s, inputs, stop) if inputs else None
    database = open_database(s, read_only=True)
    try:
        if gathered is None:
            result = check_database(database, registry, policy)
        else:
            packages = gathered.packages + collected_packages(database, registry, gathered.whole)
            merged = merge_packages(packages, registry.ecosystem)
            result = check_packages(database, registry, merged, policy)
            result.problems = gathered.problems
    finally:
        database.dispose()
    result.notes = list(config.notes)
    return result


async def run_backfill(
    registry: Registry[Any], s: Settings, recompute_all: bool, stop: GracefulStop
) -> tuple[BackfillReport, AiBackfillReport | None]:
    """`<registry> licenses backfill`: the license columns from the stored LICENSE (no
    network); with an AI classifier URL, LICENSE_AI for every row still NULL."""
    from stagecrawl.components import build_fetcher
    from stagecrawl.engine.ratelimit import Lane, Lanes, Rate

    database = open_database(s)
    matcher = LicenseMatcher.load(database, registry.license_reader)
    versions = registry.versions(database)
    report = await asyncio.to_thread(backfill, versions, matcher, recompute_all)
    ai_report: AiBackfillReport | None = None
    if s.ai_license_url:
        lanes = Lanes([Lane("ai", s.ai_license_url, Rate(s.ai_rate))])
        async with build_fetcher(s, lanes) as fetcher:
            client = AiLicenseClient(fetcher, s.ai_license_url)
            ai_report = await backfill_ai(versions, client, stop, s.concurrency)
    return report, ai_report
