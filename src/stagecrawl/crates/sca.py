"""The crates.io SCA pipelines: import advisories, audit, license backfill and check. Each is
one function the command line calls with the run's settings; it returns a report for the
command to render (cli/crates_sca.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from stagecrawl.components import build_fetcher, download_fetcher
from stagecrawl.crates.audit import (
    AuditReport,
    audit,
    collected_packages,
    packages_of_repo,
    parse_deny,
    parse_targets,
    read_lockfile,
)
from stagecrawl.crates.licenses import (
    AiLicenseClient,
    backfill,
    backfill_ai,
    check_database,
    parse_policy,
)
from stagecrawl.crates.osv import import_advisories
from stagecrawl.engine.ratelimit import Lane, Lanes, Rate
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.errors import InputError, StorageError
from stagecrawl.sca.ai import AiBackfillReport
from stagecrawl.sca.matcher import BackfillReport
from stagecrawl.sca.osv_import import ImportReport
from stagecrawl.sca.osv_read import read_advisories
from stagecrawl.sca.policy import LicenseCheck
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
    database = Database(s.db)
    report = ImportReport()
    records = read_advisories(data, report.read, max_entry_bytes)
    await asyncio.to_thread(import_advisories, database, records, scope, report)
    return report


@dataclass(frozen=True)
class AuditRequest:
    """What to audit (any mix) and what fails the run."""

    targets: list[str]
    lockfiles: list[Path]
    repo: str | None = None
    tags: tuple[str, ...] = ()
    tags_matching: str | None = None
    all_tags: bool = False
    deny: tuple[str, ...] = ()


async def audit_crates(s: Settings, request: AuditRequest, stop: GracefulStop) -> AuditReport:
    """`crates audit`: the versions asked about, against the stored advisories. Every input
    is checked before the database is opened."""
    if not (request.targets or request.lockfiles or request.repo):
        raise InputError("say what to audit: NAME@VERSION, --lockfile PATH or --repo REPO")
    denied = parse_deny(request.deny)
    packages, whole_crates = parse_targets(request.targets)
    skipped = 0
    problems: list[str] = []
    for path in request.lockfiles:
        found, others = read_lockfile(path)
        packages += found
        skipped += others
    if request.repo is not None:
        found, others, problems = await packages_of_repo(
            request.repo,
            list(request.tags),
            request.tags_matching,
            request.all_tags,
            Path(s.cache_dir),
            s.index_url,
            stop,
        )
        packages += found
        skipped += others
    try:
        database = Database(s.db, read_only=True)
    except StorageError as exc:
        raise StorageError(f"{exc}; import advisories first: stagecrawl crates vulns") from None
    packages += collected_packages(database, whole_crates)
    report = audit(database, packages, denied)
    report.skipped = skipped
    report.problems = problems + report.problems
    return report


async def backfill_licenses(
    s: Settings, recompute_all: bool, stop: GracefulStop
) -> tuple[BackfillReport, AiBackfillReport | None]:
    """`crates licenses backfill`: the license columns from the stored LICENSE (no network);
    with an AI classifier URL, LICENSE_AI for every row still NULL."""
    database = Database(s.db)
    report = await asyncio.to_thread(backfill, database, recompute_all)
    ai_report: AiBackfillReport | None = None
    if s.ai_license_url:
        lanes = Lanes([Lane("ai", s.ai_license_url, Rate(s.ai_rate))])
        async with build_fetcher(s, lanes) as fetcher:
            ai_client = AiLicenseClient(fetcher, s.ai_license_url)
            ai_report = await backfill_ai(database, ai_client, stop, s.concurrency)
    return report, ai_report


def check_licenses(
    s: Settings, allow: list[str], deny: list[str], exceptions: list[str]
) -> LicenseCheck:
    """`crates licenses check` over every collected version."""
    if not allow:
        raise InputError("give the allowed licenses: --allow MIT,Apache-2.0,…")
    policy = parse_policy(allow, deny, exceptions)
    return check_database(Database(s.db, read_only=True), policy)
