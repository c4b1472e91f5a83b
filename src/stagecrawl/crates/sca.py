"""The crates.io SCA pipelines: import advisories, audit, license backfill and check. Each is
one function the command line calls with the run's settings; it returns a report for the
command to render (cli/crates_sca.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from pathlib import Path

from stagecrawl.components import build_fetcher, download_fetcher, open_database
from stagecrawl.crates.audit import (
    AuditReport,
    audit,
    collected_packages,
    lock_graph,
    packages_of_repo,
    parse_deny,
    parse_targets,
    read_lockfile,
    yanked_packages,
)
from stagecrawl.crates.ecosystem import CRATES
from stagecrawl.crates.licenses import (
    AiLicenseClient,
    backfill,
    backfill_ai,
    check_database,
    check_packages,
    policy_from_config,
)
from stagecrawl.crates.osv import import_advisories
from stagecrawl.engine.ratelimit import Lane, Lanes, Rate
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.errors import InputError, StorageError
from stagecrawl.sca.ai import AiBackfillReport
from stagecrawl.sca.audit import Package, merge_packages
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
from stagecrawl.sca.matcher import BackfillReport
from stagecrawl.sca.osv_import import ImportReport
from stagecrawl.sca.osv_read import read_advisories
from stagecrawl.sca.policy import LicenseCheck
from stagecrawl.settings import Settings

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


async def import_osv(
    s: Settings,
    source: str,
    scope: str,
    max_archive_bytes: int,
    max_entry_bytes: int,
    stop: GracefulStop,
) -> ImportReport:
    """`crates vulns`: the OSV crates.io dump (URL, zip, folder or .json) into the VULN tables."""
    if scope not in SCOPES:
        raise InputError(f"--scope must be 'collected' or 'all', not {scope!r}")
    data = await download_or_path(s, source, max_archive_bytes, "OSV source", stop)
    database = open_database(s)
    report = ImportReport()
    records = read_advisories(data, report.read, max_entry_bytes)
    await asyncio.to_thread(import_advisories, database, records, scope, report)
    return report


@dataclass(frozen=True)
class Inputs:
    """What to check (any mix): versions, lock files, a repository's tags."""

    targets: list[str]
    lockfiles: list[Path]
    repo: str | None = None
    tags: tuple[str, ...] = ()
    tags_matching: str | None = None
    all_tags: bool = False

    def __bool__(self) -> bool:
        return bool(self.targets or self.lockfiles or self.repo)


@dataclass(frozen=True)
class AuditRequest(Inputs):
    """What to audit and what fails the run beside the config file: `deny` kinds, advisory
    ids to ignore, a severity threshold and a maximum advisory-data age (flags win)."""

    deny: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    severity_threshold: str | None = None
    max_advisory_age: str | None = None


@dataclass
class Gathered:
    packages: list[Package]
    whole_crates: list[str]
    skipped: int
    problems: list[str]


async def gather(s: Settings, inputs: Inputs, stop: GracefulStop) -> Gathered:
    """The crate versions of the inputs; every input is read before a database is opened."""
    packages, whole_crates = parse_targets(inputs.targets)
    skipped = 0
    problems: list[str] = []
    for path in inputs.lockfiles:
        found, others = read_lockfile(path)
        packages += found
        skipped += others
    if inputs.repo is not None:
        found, others, problems = await packages_of_repo(
            inputs.repo,
            list(inputs.tags),
            inputs.tags_matching,
            inputs.all_tags,
            Path(s.cache_dir),
            s.index_url,
            stop,
        )
        packages += found
        skipped += others
    return Gathered(packages, whole_crates, skipped, problems)


def gate_config(config_file: Path | None, request: AuditRequest) -> GateConfig:
    """The config file (found upward from the working directory, or --config) under the
    flags: --deny replaces the file's kinds, --ignore adds, the others replace."""
    config = discover(Path.cwd(), config_file)
    flags = GateConfig(ignores=tuple(Ignore(i, source="--ignore") for i in request.ignore))
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


async def audit_crates(
    s: Settings, request: AuditRequest, stop: GracefulStop, config_file: Path | None = None
) -> AuditReport:
    """`crates audit`: the versions asked about, against the stored advisories, through the
    gate of the config file and the flags."""
    if not request:
        raise InputError("say what to audit: NAME@VERSION, --lockfile PATH or --repo REPO")
    denied = parse_deny(request.deny)
    config = gate_config(config_file, request)
    gathered = await gather(s, request, stop)
    try:
        database = open_database(s, read_only=True)
    except StorageError as exc:
        raise StorageError(f"{exc}; import advisories first: stagecrawl crates vulns") from None
    packages = gathered.packages + collected_packages(database, gathered.whole_crates)
    report = audit(database, packages, denied)
    report.skipped = gathered.skipped
    report.problems = gathered.problems + report.problems
    report.yanked = yanked_packages(database, report.packages)
    if len(request.lockfiles) == 1 and not (request.repo or request.targets):
        report.graph = lock_graph(request.lockfiles[0])
    apply_gate(report, config, utcnow())
    return report


async def backfill_licenses(
    s: Settings, recompute_all: bool, stop: GracefulStop
) -> tuple[BackfillReport, AiBackfillReport | None]:
    """`crates licenses backfill`: the license columns from the stored LICENSE (no network);
    with an AI classifier URL, LICENSE_AI for every row still NULL."""
    database = open_database(s)
    report = await asyncio.to_thread(backfill, database, recompute_all)
    ai_report: AiBackfillReport | None = None
    if s.ai_license_url:
        lanes = Lanes([Lane("ai", s.ai_license_url, Rate(s.ai_rate))])
        async with build_fetcher(s, lanes) as fetcher:
            ai_client = AiLicenseClient(fetcher, s.ai_license_url)
            ai_report = await backfill_ai(database, ai_client, stop, s.concurrency)
    return report, ai_report


async def check_licenses(
    s: Settings,
    allow: list[str],
    deny: list[str],
    exceptions: list[str],
    inputs: Inputs,
    stop: GracefulStop,
    config_file: Path | None = None,
) -> LicenseCheck:
    """`crates licenses check`: a project's resolved crates (lock files, a repository's tags,
    NAME@VERSION) or, with no input, every collected version, against the license policy of
    the config file and the flags."""
    config = discover(Path.cwd(), config_file)
    policy = policy_from_config(config, allow, deny, exceptions)
    if not policy.allow and not policy.exceptions:
        raise InputError(
            "give the allowed licenses: --allow MIT,Apache-2.0,… or [licenses] allow in"
            " stagecrawl.toml (or deny.toml)"
        )
    gathered = await gather(s, inputs, stop) if inputs else None
    database = open_database(s, read_only=True)
    if gathered is None:
        result = check_database(database, policy)
    else:
        packages = gathered.packages + collected_packages(database, gathered.whole_crates)
        result = check_packages(database, merge_packages(packages, CRATES), policy)
        result.problems = gathered.problems
    result.notes = list(config.notes)
    return result
