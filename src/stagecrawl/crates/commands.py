"""`stagecrawl crates …` commands and `stagecrawl status`."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table
from sqlalchemy import func, select

from stagecrawl.cli import (
    EXIT_INTERRUPTED,
    EXIT_PARTIAL,
    DbOption,
    app,
    console,
    crates_app,
    guarded,
    run,
    state,
)
from stagecrawl.crates.audit import (
    AuditReport,
    Package,
    audit,
    packages_of_repo,
    packages_of_targets,
    parse_deny,
    read_lockfile,
)
from stagecrawl.crates.client import CratesClient
from stagecrawl.crates.config import (
    DEFAULT_API_URL,
    DEFAULT_INDEX_URL,
    CratesConfig,
    read_seeds_file,
    split_env_seeds,
)
from stagecrawl.crates.dbdump import DEFAULT_DUMP_URL, load_dump
from stagecrawl.crates.licenses import (
    AiLicenseClient,
    LicenseCheck,
    Policy,
    backfill,
    check_database,
    import_reference,
)
from stagecrawl.crates.lock import (
    LOCKFILE,
    GitRepo,
    LockedPackage,
    TagReport,
    cargo_home,
    lock_at_tag,
    parse_lockfile,
    register_lock,
    select_tags,
)
from stagecrawl.crates.names import validate_name
from stagecrawl.crates.osv import DEFAULT_OSV_URL, ImportReport, import_advisories, read_advisories
from stagecrawl.crates.queue import COLLECTED, NOT_FOUND, SKIPPED, STATE_NAMES, utcnow
from stagecrawl.crates.refresh import refresh
from stagecrawl.crates.report_formats import audit_cyclonedx, audit_json, audit_sarif
from stagecrawl.crates.worker import (
    Collector,
    CollectSettings,
    CollectSummary,
    SeedReport,
    seed_crates,
)
from stagecrawl.engine.fetcher import Fetcher, FetchSettings, require_contact
from stagecrawl.engine.progress import ProgressReporter, summary_table
from stagecrawl.engine.redis_limiter import RedisLimiter
from stagecrawl.errors import InputError
from stagecrawl.storage.db import DEFAULT_DB_URL, Database

IndexUrl = Annotated[
    str, typer.Option("--index-url", envvar="STAGECRAWL_INDEX_URL", help="Sparse index root.")
]
ApiUrl = Annotated[
    str, typer.Option("--api-url", envvar="STAGECRAWL_API_URL", help="crates.io API root.")
]
Contact = Annotated[
    str | None,
    typer.Option(
        "--contact",
        envvar="STAGECRAWL_CONTACT",
        help="Email or URL sent in the User-Agent; required against the real crates.io.",
    ),
]
ApiRate = Annotated[float, typer.Option("--api-rate", help="API requests per second.")]
IndexRate = Annotated[float, typer.Option("--index-rate", help="Index requests per second.")]
Names = Annotated[list[str] | None, typer.Argument(help="Crate names.", show_default=False)]
SeedFile = Annotated[
    Path | None, typer.Option("--file", help="Seeds file: one name per line, # comments.")
]
Limit = Annotated[int | None, typer.Option("--limit", help="Collect at most N events.")]
SkipExisting = Annotated[
    bool,
    typer.Option(
        "--skip-existing/--no-skip-existing",
        help="Mark events already in VERSION as skipped (2) instead of fetching them again.",
    ),
]
Concurrency = Annotated[int, typer.Option("--concurrency", help="Crates processed at once.")]
Resync = Annotated[bool, typer.Option("--resync", help="Collect finished events again.")]
AiLicenseUrl = Annotated[
    str | None,
    typer.Option(
        "--ai-license-url",
        envvar="STAGECRAWL_AI_LICENSE_URL",
        help="Optional AI license classifier (POST); off when unset.",
    ),
]
AiTimeout = Annotated[float, typer.Option("--ai-timeout", help="Seconds per AI call.")]
RedisUrl = Annotated[
    str | None,
    typer.Option(
        "--redis-url",
        envvar="STAGECRAWL_REDIS_URL",
        help="Redis for one rate limit shared by every worker.",
    ),
]
LeaseSeconds = Annotated[
    float, typer.Option("--lease-seconds", help="How long a claim is held before others retake it.")
]


def _config(
    index_url: str,
    api_url: str,
    contact: str | None,
    api_rate: float,
    index_rate: float,
    redis_url: str | None = None,
) -> CratesConfig:
    config = CratesConfig.from_environment(
        index_url=index_url,
        api_url=api_url,
        api_rate=api_rate,
        index_rate=index_rate,
        contact=contact,
        redis_url=redis_url,
    )
    config.validate()
    return config


def _gather_names(names: list[str] | None, seeds_file: Path | None) -> list[str]:
    collected = list(names or [])
    if seeds_file is not None:
        collected += read_seeds_file(seeds_file)
    collected += split_env_seeds(os.environ.get("STAGECRAWL_SEED_CRATES"))
    if not collected:
        raise InputError("no crate names given (arguments, --file or STAGECRAWL_SEED_CRATES)")
    for name in collected:
        validate_name(name)
    return collected


def _print_seed_report(report: SeedReport) -> None:
    counts = report.counts
    rows = {
        "crates found": len(report.crates),
        "versions seen": sum(report.crates.values()),
        "new events": counts.new,
        "merged events": counts.merged,
        "requeued (resync)": counts.requeued,
        "not in the index": ", ".join(report.not_found) or 0,
    }
    for name, reason in report.failed.items():
        rows[f"failed: {name}"] = reason
    console.print(summary_table("seed", rows))


def _print_collect_summary(summary: CollectSummary, collector: Collector) -> None:
    fetcher = collector.client.fetcher
    rows: dict[str, object] = {
        "crates written": summary.crates,
        "collected": summary.outcomes[COLLECTED],
        "skipped (already in VERSION)": summary.outcomes[SKIPPED],
        "not found": summary.outcomes[NOT_FOUND],
        "yanked (collected, flagged)": summary.yanked,
        "failed (on the retry ladder)": summary.failed,
    }
    for origin, count in sorted(fetcher.stats.requests.items()):
        rows[f"requests {origin}"] = count
    rows["429s seen"] = sum(fetcher.stats.rate_limited.values())
    if collector.ai is not None:
        rows["AI license calls"] = collector.ai.calls
        rows["AI license warnings"] = collector.ai.warnings
    if summary.lost_leases:
        rows["crates lost to another worker"] = summary.lost_leases
    if summary.interrupted:
        rows["returned to the queue"] = summary.released
    rows["wall time"] = f"{summary.wall_seconds:.1f}s"
    console.print(summary_table("collect", rows))


async def _seed(config: CratesConfig, db: Database, names: list[str], resync: bool) -> int:
    async with config.make_fetcher() as fetcher:
        client = CratesClient(fetcher, config.index_url, config.api_url)
        report = await seed_crates(db, client, names, resync)
    _print_seed_report(report)
    return EXIT_PARTIAL if report.not_found or report.failed else 0


async def _collect(
    config: CratesConfig,
    db: Database,
    settings: CollectSettings,
    names: list[str] | None = None,
    resync: bool = False,
    ai: AiLicenseClient | None = None,
) -> int:
    async with config.make_fetcher() as fetcher:
        if isinstance(fetcher.limiter, RedisLimiter):
            await fetcher.limiter.check()
        client = CratesClient(fetcher, config.index_url, config.api_url)
        seed_code = 0
        if names:
            report = await seed_crates(db, client, names, resync)
            _print_seed_report(report)
            seed_code = EXIT_PARTIAL if report.not_found or report.failed else 0
        with ProgressReporter("collecting", console=console, quiet=state["quiet"]) as progress:
            collector = Collector(db, client, settings, progress, ai=ai)
            try:
                summary = await collector.run()
            finally:
                if ai is not None:
                    await ai.aclose()
        _print_collect_summary(summary, collector)
    if summary.interrupted:
        return EXIT_INTERRUPTED
    if summary.failed or summary.outcomes[NOT_FOUND] or seed_code:
        return EXIT_PARTIAL
    return 0


@crates_app.command("seed")
def seed_command(
    names: Names = None,
    seeds_file: SeedFile = None,
    resync: Resync = False,
    db: DbOption = DEFAULT_DB_URL,
    index_url: IndexUrl = DEFAULT_INDEX_URL,
    api_url: ApiUrl = DEFAULT_API_URL,
    contact: Contact = None,
    api_rate: ApiRate = 1.0,
    index_rate: IndexRate = 10.0,
) -> None:
    """Register every version of each crate (from the sparse index) in the LIST table."""

    async def body() -> int:
        config = _config(index_url, api_url, contact, api_rate, index_rate)
        wanted = _gather_names(names, seeds_file)
        return await _seed(config, Database(db), wanted, resync)

    raise typer.Exit(run(body))


@crates_app.command("collect")
def collect_command(
    limit: Limit = None,
    skip_existing: SkipExisting = True,
    concurrency: Concurrency = 8,
    db: DbOption = DEFAULT_DB_URL,
    index_url: IndexUrl = DEFAULT_INDEX_URL,
    api_url: ApiUrl = DEFAULT_API_URL,
    contact: Contact = None,
    api_rate: ApiRate = 1.0,
    index_rate: IndexRate = 10.0,
    ai_license_url: AiLicenseUrl = None,
    ai_timeout: AiTimeout = 10.0,
    redis_url: RedisUrl = None,
    lease_seconds: LeaseSeconds = 900.0,
) -> None:
    """Collect pending LIST events into VERSION and PRODUCT until none is left."""

    async def body() -> int:
        config = _config(index_url, api_url, contact, api_rate, index_rate, redis_url)
        settings = CollectSettings(
            concurrency=concurrency,
            skip_existing=skip_existing,
            limit=limit,
            lease_seconds=lease_seconds,
        )
        ai = AiLicenseClient(ai_license_url, ai_timeout) if ai_license_url else None
        return await _collect(config, Database(db), settings, ai=ai)

    raise typer.Exit(run(body))


@crates_app.command("crawl")
def crawl_command(
    names: Names = None,
    seeds_file: SeedFile = None,
    resync: Resync = False,
    skip_existing: SkipExisting = True,
    concurrency: Concurrency = 8,
    db: DbOption = DEFAULT_DB_URL,
    index_url: IndexUrl = DEFAULT_INDEX_URL,
    api_url: ApiUrl = DEFAULT_API_URL,
    contact: Contact = None,
    api_rate: ApiRate = 1.0,
    index_rate: IndexRate = 10.0,
    ai_license_url: AiLicenseUrl = None,
    ai_timeout: AiTimeout = 10.0,
    redis_url: RedisUrl = None,
) -> None:
    """Seed and collect in one command: every version of each named crate into the database."""

    async def body() -> int:
        config = _config(index_url, api_url, contact, api_rate, index_rate, redis_url)
        wanted = _gather_names(names, seeds_file)
        settings = CollectSettings(concurrency=concurrency, skip_existing=skip_existing)
        ai = AiLicenseClient(ai_license_url, ai_timeout) if ai_license_url else None
        return await _collect(config, Database(db), settings, wanted, resync, ai)

    raise typer.Exit(run(body))


def print_status(url: str) -> None:
    db = Database(url)
    table = db.list
    with db.engine.connect() as conn:
        by_state = conn.execute(
            select(table.c.PROCESSED, func.count()).group_by(table.c.PROCESSED)
        ).all()
        by_source = conn.execute(
            select(table.c.SOURCE, func.count()).group_by(table.c.SOURCE)
        ).all()
        resync = conn.execute(select(func.count()).where(table.c.RESYNC.is_(True))).scalar_one()
        versions = conn.execute(select(func.count()).select_from(db.version)).scalar_one()
        products = conn.execute(select(func.count()).select_from(db.product)).scalar_one()
    out = Table(title=f"LIST in {db.safe_url}", title_justify="left")
    out.add_column("PROCESSED", justify="right")
    out.add_column("meaning")
    out.add_column("events", justify="right")
    for processed, count in sorted(by_state):
        out.add_row(str(processed), STATE_NAMES.get(processed, "?"), str(count))
    console.print(out)
    sources = {"events by SOURCE": "", **{f"  {s}": n for s, n in sorted(by_source)}}
    console.print(
        summary_table(
            "totals",
            {**sources, "RESYNC asked": resync, "VERSION rows": versions, "PRODUCT rows": products},
        )
    )
    print_workers(db)


def print_workers(db: Database) -> None:
    """Live workers: heartbeat within the last minute, their leases and rates."""
    now = utcnow()
    worker, events = db.worker, db.list
    with db.engine.connect() as conn:
        rows = conn.execute(
            select(worker)
            .where(worker.c.HEARTBEAT >= now - timedelta(minutes=1))
            .order_by(worker.c.STARTED)
        ).all()
        leases: dict[str, int] = dict(
            conn.execute(
                select(events.c.CLAIMED_BY, func.count())
                .where(events.c.CLAIMED_UNTIL >= now)
                .group_by(events.c.CLAIMED_BY)
            ).all()
        )
    if not rows:
        console.print("no live workers")
        return
    table = Table(title="live workers", title_justify="left")
    for column in (
        "worker",
        "since",
        "leased events",
        "events done",
        "events/s",
        "requests",
        "shared limit",
    ):
        table.add_column(column)
    for row in rows:
        seconds = max(1.0, (row.HEARTBEAT - row.STARTED).total_seconds())
        table.add_row(
            escape(row.WORKER_ID),
            str(row.STARTED),
            str(leases.get(row.WORKER_ID, 0)),
            str(row.EVENTS_DONE),
            f"{row.EVENTS_DONE / seconds:.1f}",
            str(row.REQUESTS),
            "redis" if row.SHARED_LIMIT else "own bucket",
        )
    console.print(table)


@crates_app.command("lock")
def lock_command(
    repo: Annotated[
        str | None, typer.Argument(help="Git URL or local path of a Rust repository.")
    ] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="A tag to resolve.")] = None,
    tags_matching: Annotated[
        str | None, typer.Option("--tags-matching", help="Glob over the repository's tags.")
    ] = None,
    all_tags: Annotated[bool, typer.Option("--all-tags", help="Every tag.")] = False,
    pinned_only: Annotated[
        bool, typer.Option("--pinned-only", help="Only the versions the locks pin.")
    ] = False,
    lockfile: Annotated[
        Path | None, typer.Option("--lockfile", help="A Cargo.lock you already have.")
    ] = None,
    label: Annotated[
        str | None, typer.Option("--label", help="REF_TAGS label for --lockfile.")
    ] = None,
    cache_dir: Annotated[
        Path,
        typer.Option("--cache-dir", envvar="STAGECRAWL_CACHE", help="Bare clones, CARGO_HOME."),
    ] = Path(".stagecrawl-cache"),
    db: DbOption = DEFAULT_DB_URL,
    index_url: IndexUrl = DEFAULT_INDEX_URL,
    api_url: ApiUrl = DEFAULT_API_URL,
    contact: Contact = None,
    api_rate: ApiRate = 1.0,
    index_rate: IndexRate = 10.0,
) -> None:
    """Register the crates a project's Cargo.lock uses, per git tag (or one lock file)."""

    async def body() -> int:
        config = _config(index_url, api_url, contact, api_rate, index_rate)
        inputs = _lock_inputs(repo, tag, tags_matching, all_tags, lockfile, label, cache_dir)
        reports: list[TagReport] = []
        database: Database | None = None
        async with config.make_fetcher() as fetcher:
            client = CratesClient(fetcher, config.index_url, config.api_url)
            home = cargo_home(cache_dir, config.index_url) if inputs.repo else None
            for tag_name in inputs.tags:
                report = TagReport(f"{inputs.label}@{tag_name}" if inputs.repo else inputs.label)
                reports.append(report)
                try:
                    if inputs.repo is not None and home is not None:
                        packages, report.kind = await asyncio.to_thread(
                            lock_at_tag, inputs.repo, tag_name, home
                        )
                    else:
                        packages, report.kind = inputs.lockfile_packages, LOCKFILE
                except InputError as exc:
                    report.error = str(exc)
                    continue
                database = database or Database(db)
                await register_lock(database, client, report, packages, pinned_only)
        _print_lock_report(reports)
        failed = any(r.error or r.not_found for r in reports)
        return EXIT_PARTIAL if failed else 0

    raise typer.Exit(run(body))


@dataclass
class _LockInputs:
    label: str
    tags: list[str]
    repo: GitRepo | None = None
    lockfile_packages: list[LockedPackage] = field(default_factory=list)


def _lock_inputs(
    repo: str | None,
    tags: list[str] | None,
    pattern: str | None,
    all_tags: bool,
    lockfile: Path | None,
    label: str | None,
    cache_dir: Path,
) -> _LockInputs:
    """Check every input before anything is registered: a bad one changes nothing."""
    if (repo is None) == (lockfile is None):
        raise InputError("give either a repository or --lockfile PATH")
    if lockfile is not None:
        try:
            text = lockfile.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read {lockfile}: {exc}") from None
        packages = parse_lockfile(text, str(lockfile))
        name = label or lockfile.resolve().parent.name or "lockfile"
        return _LockInputs(name, [""], lockfile_packages=packages)
    assert repo is not None
    if not (tags or pattern or all_tags):
        raise InputError("say which tags: --tag T (repeatable), --tags-matching GLOB or --all-tags")
    git = GitRepo(repo, cache_dir)
    git.sync()
    chosen = select_tags(git.tags(), tags or [], pattern, all_tags)
    if not chosen:
        raise InputError(f"no tag of {repo} matches {pattern!r}")
    return _LockInputs(label or git.label, chosen, repo=git)


def _print_lock_report(reports: list[TagReport]) -> None:
    table = Table(title="lock", title_justify="left")
    for column in ("input", "lock", "packages", "external crates", "new events", "problem"):
        table.add_column(column, justify="left" if column in ("input", "problem") else "right")
    for r in reports:
        problem = r.error or (f"not in the index: {', '.join(r.not_found)}" if r.not_found else "")
        cells = (r.label, r.kind, str(r.packages), str(r.external), str(r.new_events), problem)
        table.add_row(*(escape(cell) for cell in cells))
    console.print(table)
    failed = [r for r in reports if r.error]
    for r in failed:
        console.print(
            f"[bold red]failed:[/] {escape(r.error or '')}", highlight=False, soft_wrap=True
        )
    console.print(
        summary_table(
            "lock totals",
            {
                "inputs": len(reports),
                "unique crates": len(frozenset().union(*(r.crates for r in reports))),
                "new events": sum(r.new_events for r in reports),
                "inputs failed": len(failed),
            },
        )
    )


licenses_app = typer.Typer(help="License standardisation.", no_args_is_help=True)
crates_app.add_typer(licenses_app, name="licenses")


@licenses_app.command("backfill")
def licenses_backfill(
    recompute_all: Annotated[
        bool, typer.Option("--all", help="Recompute every row, not only those lacking them.")
    ] = False,
    db: DbOption = DEFAULT_DB_URL,
) -> None:
    """Fill STANDARD_LICENSE and LICENSE_IDS from the stored LICENSE (no network)."""

    def body() -> int:
        report = backfill(Database(db), recompute_all)
        rows: dict[str, object] = {
            "rows": report.rows,
            "matched": report.matched,
            "unmatched": report.unmatched,
            "no license (license-file)": report.no_license,
        }
        for text, count in report.common_unmatched:
            rows[f"  unmatched: {text}"] = count
        console.print(summary_table("licenses backfill", rows))
        return 0

    raise typer.Exit(guarded(body))


@licenses_app.command("check")
def licenses_check(
    allow: Annotated[
        list[str] | None, typer.Option("--allow", help="Allowed SPDX ids (comma-separated).")
    ] = None,
    deny: Annotated[
        list[str] | None, typer.Option("--deny", help="Denied SPDX ids; deny wins over allow.")
    ] = None,
    exception: Annotated[
        list[str] | None,
        typer.Option("--exception", help="CRATE=LICENSE: allowed for that crate only."),
    ] = None,
    output: Annotated[str, typer.Option("--format", help="table or json (to stdout).")] = "table",
    db: DbOption = DEFAULT_DB_URL,
) -> None:
    """Every collected version whose license the policy cannot satisfy (cargo-deny's
    semantics); exit 1 when any."""

    def body() -> int:
        if output not in ("table", "json"):
            raise InputError("--format must be table or json")
        if not allow:
            raise InputError("give the allowed licenses: --allow MIT,Apache-2.0,…")
        policy = Policy.parse(allow, deny or [], exception or [])
        result = check_database(Database(db), policy)
        if output == "json":
            document = {
                "versions_checked": result.rows,
                "violations": [
                    {
                        "crate": v.crate,
                        "version": v.version,
                        "license": v.license,
                        "expression": v.expression,
                        "reason": v.reason,
                    }
                    for v in result.violations
                ],
            }
            sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
        else:
            _print_violations(result)
        return 1 if result.violations else 0

    raise typer.Exit(guarded(body))


def _print_violations(result: LicenseCheck) -> None:
    columns = ("crate", "version", "license", "reason")
    rows = [
        (v.crate, v.version, v.expression or v.license or "", v.reason) for v in result.violations
    ]
    if rows:
        _print_rows("licenses the policy does not accept", columns, rows)
    console.print(
        f"{result.rows} versions checked, {len(result.violations)} not accepted", highlight=False
    )


def licenses_import(
    file: Annotated[Path, typer.Argument(help="CSV or JSON: ID, NAME_SHORT, NAME, MAPPING, URL.")],
    db: DbOption = DEFAULT_DB_URL,
) -> None:
    """Load a license reference into TB_LICENSE_V2 (upsert by ID)."""

    def body() -> int:
        count = import_reference(Database(db), file)
        console.print(f"imported {count} license rows")
        return 0

    raise typer.Exit(guarded(body))


top_licenses_app = typer.Typer(help="The license reference table.", no_args_is_help=True)
top_licenses_app.command("import")(licenses_import)
app.add_typer(top_licenses_app, name="licenses")


@crates_app.command("vulns")
def vulns_command(
    source: Annotated[
        str,
        typer.Option("--source", help="URL or local path of the OSV dump (zip, folder, .json)."),
    ] = DEFAULT_OSV_URL,
    scope: Annotated[
        str, typer.Option("--scope", help="collected: crates in PRODUCT; all: every crate.")
    ] = "collected",
    max_archive_mb: Annotated[int, typer.Option("--max-archive-mb")] = 512,
    max_entry_kb: Annotated[int, typer.Option("--max-entry-kb")] = 4096,
    db: DbOption = DEFAULT_DB_URL,
    contact: Contact = None,
) -> None:
    """Import OSV advisories for crates.io into the VULN tables and match collected versions."""

    async def body() -> int:
        if scope not in ("collected", "all"):
            raise InputError(f"--scope must be 'collected' or 'all', not {scope!r}")
        archive_limit = max_archive_mb * 1024 * 1024
        data = await _osv_bytes(source, archive_limit, contact)
        database = Database(db)
        report = ImportReport()
        records = read_advisories(data, report.read, max_entry_kb * 1024)
        await asyncio.to_thread(import_advisories, database, records, scope, report)
        console.print(
            summary_table(
                "vulns",
                {
                    "advisories read": report.advisories,
                    "GHSA duplicates merged into RUSTSEC": report.duplicates_merged,
                    "entries skipped (too large)": report.read.skipped_too_large,
                    "entries skipped (not OSV JSON)": report.read.skipped_invalid,
                    "malformed (skipped, reported)": len(report.problems),
                    "informational (unmaintained, unsound…)": report.informational,
                    "advisory × crate pairs (RAW)": report.pairs,
                    f"pairs in scope for V1 ({scope})": report.in_scope,
                    "RAW rows written": report.raw_written,
                    "unchanged (not newer)": report.unchanged,
                    "V1 rows (CVE)": report.v1_rows,
                    "withdrawn": report.withdrawn,
                    "collected versions hit": report.hits,
                },
            )
        )
        if report.problems:
            console.print(
                f"[bold red]{len(report.problems)} malformed advisory parts skipped:[/] "
                + escape("; ".join(report.problems)),
                highlight=False,
                soft_wrap=True,
            )
            return EXIT_PARTIAL
        return 0

    raise typer.Exit(run(body))


async def _osv_bytes(source: str, limit: int, contact: str | None) -> bytes | Path:
    if source.startswith(("http://", "https://")):
        settings = FetchSettings(max_body_bytes=limit, timeout=120.0, contact=contact)
        async with Fetcher(settings) as fetcher:
            return (await fetcher.get(source)).content
    path = Path(source)
    if not path.exists():
        raise InputError(f"OSV source {source} does not exist")
    if path.is_file() and path.stat().st_size > limit:
        raise InputError(f"OSV source {source} is larger than {limit} bytes")
    return path


AUDIT_FORMATS = ("table", "json", "sarif", "cyclonedx")


@crates_app.command("audit")
def audit_command(
    targets: Annotated[
        list[str] | None,
        typer.Argument(help="NAME@VERSION (or NAME: its collected versions).", show_default=False),
    ] = None,
    lockfile: Annotated[
        list[Path] | None, typer.Option("--lockfile", help="A Cargo.lock (v1–v4); repeatable.")
    ] = None,
    repo: Annotated[
        str | None, typer.Option("--repo", help="Git URL or path: audit its tags' locks.")
    ] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="A tag of --repo.")] = None,
    tags_matching: Annotated[
        str | None, typer.Option("--tags-matching", help="Glob over --repo's tags.")
    ] = None,
    all_tags: Annotated[bool, typer.Option("--all-tags", help="Every tag of --repo.")] = False,
    output: Annotated[
        str, typer.Option("--format", help="table, json, sarif or cyclonedx (to stdout).")
    ] = "table",
    deny: Annotated[
        list[str] | None,
        typer.Option("--deny", help="Fail on informational advisories too: warnings, or a kind."),
    ] = None,
    cache_dir: Annotated[
        Path,
        typer.Option("--cache-dir", envvar="STAGECRAWL_CACHE", help="Bare clones, CARGO_HOME."),
    ] = Path(".stagecrawl-cache"),
    index_url: IndexUrl = DEFAULT_INDEX_URL,
    db: DbOption = DEFAULT_DB_URL,
) -> None:
    """Which stored advisories hit crate versions — any version, collected or not (run
    `crates vulns` first). Exit 1 when a vulnerability hits."""

    def body() -> int:
        if output not in AUDIT_FORMATS:
            raise InputError(f"--format must be one of {', '.join(AUDIT_FORMATS)}")
        if not (targets or lockfile or repo):
            raise InputError("say what to audit: NAME@VERSION, --lockfile PATH or --repo REPO")
        denied = parse_deny(deny or [])
        database = Database(db)
        packages: list[Package] = []
        skipped = 0
        problems: list[str] = []
        for path in lockfile or []:
            found, others = read_lockfile(path)
            packages += found
            skipped += others
        if repo is not None:
            found, others, problems = packages_of_repo(
                repo, tag or [], tags_matching, all_tags, cache_dir, index_url
            )
            packages += found
            skipped += others
        packages += packages_of_targets(database, targets or [])
        report = audit(database, packages, denied)
        report.skipped = skipped
        report.problems = problems + report.problems
        if output == "table":
            _print_audit(report)
        else:
            if output == "json":
                document = audit_json(report)
            elif output == "sarif":
                document = audit_sarif(report)
            else:
                document = audit_cyclonedx(report, str(uuid.uuid4()), utcnow())
            sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
            sys.stdout.flush()
        return report.exit_code

    raise typer.Exit(guarded(body))


def _print_rows(title: str, columns: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    """A table in a terminal; in a pipe or a file, tab-separated whole lines: nothing is cut
    to a terminal width."""
    if console.is_terminal:
        table = Table(title=title, title_justify="left")
        for column in columns:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*(escape(cell) for cell in row))
        console.print(table)
        return
    console.print("\t".join(columns), highlight=False, soft_wrap=True)
    for row in rows:
        console.print(escape("\t".join(row)), highlight=False, soft_wrap=True)


def _print_audit(report: AuditReport) -> None:
    as_of = report.advisories_modified or "?"
    console.print(
        f"{len(report.packages)} packages against {report.advisories_stored} stored advisories"
        f" (newest change {as_of})",
        highlight=False,
    )
    for problem in report.problems:
        console.print(f"[bold red]not audited:[/] {escape(problem)}", soft_wrap=True)
    if not report.hits:
        console.print("no advisory hits the audited versions", highlight=False)
        return
    columns = ("crate", "version", "advisory", "aliases", "kind", "patched", "summary")
    rows = [
        (
            h.package.name,
            h.package.version,
            h.advisory.osv_id,
            " ".join(h.advisory.aliases),
            h.advisory.informational or "vulnerability",
            " or ".join(h.advisory.affected.patched()) or "none",
            h.advisory.summary or "",
        )
        for h in report.hits
    ]
    _print_rows("advisories hitting the audited versions", columns, rows)
    console.print(
        f"{len(report.vulnerabilities)} vulnerabilities, {len(report.warnings)} warnings"
        " (informational)",
        highlight=False,
    )


@crates_app.command("refresh")
def refresh_command(
    names: Names = None,
    collect: Annotated[
        bool, typer.Option("--collect/--no-collect", help="Collect the new events after.")
    ] = True,
    db: DbOption = DEFAULT_DB_URL,
    index_url: IndexUrl = DEFAULT_INDEX_URL,
    api_url: ApiUrl = DEFAULT_API_URL,
    contact: Contact = None,
    api_rate: ApiRate = 1.0,
    index_rate: IndexRate = 10.0,
    redis_url: RedisUrl = None,
) -> None:
    """Re-check known crates with conditional GETs; register and collect only what changed."""

    async def body() -> int:
        config = _config(index_url, api_url, contact, api_rate, index_rate, redis_url)
        for name in names or []:
            validate_name(name)
        database = Database(db)
        async with config.make_fetcher() as fetcher:
            report = await refresh(database, fetcher, config.index_url, names)
        rows: dict[str, object] = {
            "crates checked": report.checked,
            "not modified (304)": report.not_modified,
            "same content": report.unchanged_body,
            "changed": ", ".join(report.changed) or 0,
            "new events": report.new_events,
            "yanked flags changed": report.yanked_changes,
            "gone from the index": ", ".join(report.gone) or 0,
        }
        for name, reason in report.failed.items():
            rows[f"failed: {name}"] = reason
        console.print(summary_table("refresh", rows))
        code = EXIT_PARTIAL if report.failed or report.gone else 0
        if collect and report.new_events:
            code = max(code, await _collect(config, database, CollectSettings()))
        return code

    raise typer.Exit(run(body))


@crates_app.command("dbdump")
def dbdump_command(
    source: Annotated[
        str, typer.Option("--source", help="URL or local path of db-dump.tar.gz.")
    ] = DEFAULT_DUMP_URL,
    max_gb: Annotated[float, typer.Option("--max-gb", help="Largest download accepted.")] = 8.0,
    db: DbOption = DEFAULT_DB_URL,
    contact: Contact = None,
) -> None:
    """Load the whole registry from crates.io's database dump (no API crawl)."""

    async def body() -> int:
        with tempfile.TemporaryDirectory(prefix="stagecrawl-dl-") as tmp:
            if source.startswith(("http://", "https://")):
                if "crates.io" in source:
                    require_contact(FetchSettings(contact=contact), "crates.io asks for one")
                path = Path(tmp) / "db-dump.tar.gz"
                settings = FetchSettings(contact=contact, timeout=300.0)
                async with Fetcher(settings) as fetcher:
                    await fetcher.download(source, path, int(max_gb * 1024**3))
            else:
                path = Path(source)
                if not path.is_file():
                    raise InputError(f"dump {source} does not exist")
            database = Database(db)
            with ProgressReporter("loading dump", console=console, quiet=state["quiet"]) as bar:
                report = await asyncio.to_thread(
                    load_dump, database, path, lambda _what, n: bar.update(n, None, {})
                )
        rate = report.versions / report.seconds if report.seconds else 0
        console.print(
            summary_table(
                "dbdump",
                {
                    "crates (PRODUCT)": report.crates,
                    "versions (VERSION)": report.versions,
                    "dependencies": report.dependencies,
                    "wall time": f"{report.seconds:.1f}s",
                    "versions/s": f"{rate:.0f}",
                },
            )
        )
        return 0

    raise typer.Exit(run(body))
