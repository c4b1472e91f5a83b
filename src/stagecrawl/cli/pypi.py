"""`stagecrawl pypi …`: parse options, call the PyPI pipeline, render its report, exit.

Same shapes, exit codes and `--format` as `stagecrawl crates …`: 0 ok, 1 something failed or
waits (on a retry ladder, or for a host's pause: one line says when to rerun), 2 bad input or
configuration, 130/143 stopped by a signal."""

from __future__ import annotations

import asyncio
import os
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stagecrawl import components
from stagecrawl.cli.common import (
    EXIT_OK,
    EXIT_PARTIAL,
    CacheDir,
    Concurrency,
    Contact,
    Db,
    Format,
    FormatOption,
    GracePeriod,
    LeaseSeconds,
    RedisUrl,
    _opt,
    console,
    emit,
    exit_code,
    finish,
    guarded,
    print_waiting,
    progress,
    report_console,
    run,
    settings_from,
    show,
)
from stagecrawl.components import open_database
from stagecrawl.errors import InputError
from stagecrawl.pypi.names import name_problem
from stagecrawl.settings import Settings

if TYPE_CHECKING:  # the pipelines (aiohttp, SQLAlchemy, the engine) are imported where a command
    # runs them: `pypi --help` builds every command's signature and must not pay for them
    from stagecrawl.engine.shutdown import GracefulStop
    from stagecrawl.pypi.client import PyPIClient
    from stagecrawl.pypi.pipeline import CollectReport, CollectSettings, LockReport, PyPIEndpoints

app = typer.Typer(
    help="The PyPI pipeline: seed, collect, crawl, lock, audit…", no_args_is_help=True
)

IndexUrl = Annotated[str | None, _opt("pypi_index_url")]
ApiUrl = Annotated[str | None, _opt("pypi_api_url")]
IndexRate = Annotated[float | None, _opt("pypi_index_rate")]
ApiRate = Annotated[float | None, _opt("pypi_api_rate")]
FilesRate = Annotated[float | None, _opt("pypi_files_rate")]
Names = Annotated[list[str] | None, typer.Argument(help="Project names.", show_default=False)]
SeedFile = Annotated[
    Path | None, typer.Option("--file", help="Seeds file: one name per line, # comments.")
]
Limit = Annotated[int | None, typer.Option("--limit", min=1, help="Collect at most N events.")]
SkipExisting = Annotated[
    bool,
    typer.Option(
        "--skip-existing/--no-skip-existing",
        help="Mark events already in VERSION as skipped (2) instead of fetching them again.",
    ),
]
Resync = Annotated[bool, typer.Option("--resync", help="Collect finished events again.")]
SEED_ENV = "STAGECRAWL_PYPI_SEED_PACKAGES"


def read_seeds_file(path: Path) -> list[str]:
    """One project name per line, `#` comments; a bad line names the file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read seeds file {path}: {exc}") from None
    names: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        problem = name_problem(line)
        if problem:
            raise InputError(f"{path}:{number}: {problem}")
        names.append(line)
    return names


def gather_names(names: list[str] | None, seeds_file: Path | None) -> list[str]:
    from stagecrawl.pypi import pipeline

    collected = list(names or [])
    if seeds_file is not None:
        collected += read_seeds_file(seeds_file)
    collected += [n.strip() for n in os.environ.get(SEED_ENV, "").split(",") if n.strip()]
    if not collected:
        raise InputError(f"no project names given (arguments, --file or {SEED_ENV})")
    return pipeline.check_names(collected)


def endpoints(s: Settings) -> PyPIEndpoints:
    from stagecrawl.pypi.pipeline import PyPIEndpoints

    return PyPIEndpoints(
        s.pypi_index_url, s.pypi_api_url, s.pypi_index_rate, s.pypi_api_rate, s.pypi_files_rate
    )


def make_client(s: Settings) -> PyPIClient:
    """The run's client: the three lanes on the one fetcher the settings build."""
    from stagecrawl.engine.fetcher import require_contact
    from stagecrawl.pypi import pipeline
    from stagecrawl.pypi.client import PyPIClient

    require_contact(
        components.fetch_settings(s),
        "PyPI refuses generic clients and asks crawlers to say how to reach their operator",
    )
    fetcher = components.build_fetcher(s, pipeline.pypi_lanes(endpoints(s)))
    return PyPIClient(fetcher, s.pypi_index_url, s.pypi_api_url)


def collect_settings(s: Settings, limit: int | None, skip_existing: bool) -> CollectSettings:
    from stagecrawl.pypi.pipeline import CollectSettings

    return CollectSettings(
        concurrency=s.concurrency,
        lease_seconds=s.lease_seconds,
        skip_existing=skip_existing,
        limit=limit,
        grace_period=s.grace_period,
        commit_batch=s.commit_batch,
        commit_linger=s.commit_linger,
    )


def render_collect(report: CollectReport, fmt: Format) -> None:
    emit(fmt, report.as_json(), lambda: collect_tables(report))
    # work not attempted (a host's pause): one line in every format, off the retry ladder
    print_waiting(report.waiting, sum(report.requests.values()))


def collect_tables(report: CollectReport) -> None:
    """The collect report for people (inside `emit`); the failures, one line each on stderr."""
    rows: dict[str, object] = {}
    if report.seed is not None:
        seed = report.seed
        rows |= {
            "projects seeded": len(seed.projects),
            "versions seen": sum(seed.projects.values()),
            "new events": seed.counts.new,
            "not found": ", ".join(sorted(seed.not_found)) or 0,
            "seeding failed": len(seed.failed),
        }
        if seed.waiting:
            rows["seeds not attempted (waiting for a pause)"] = len(seed.waiting)
        if seed.interrupted:
            rows["seeds returned to the queue"] = seed.released
            if seed.given_back:
                rows["  why (seeds)"] = seed.given_back
    if report.collect is not None:
        c = report.collect
        rows |= {
            "projects written": c.projects,
            "versions collected": c.outcomes[1],
            "skipped (stored)": c.outcomes[2],
            "versions not found": c.outcomes[4],
            "yanked": c.yanked,
            "dependencies unknown": c.unknown_dependencies,
            "failed (retried next run)": c.failed,
        }
        if c.waiting_events:
            rows["not attempted (waiting for a pause)"] = c.waiting_events
        if c.interrupted:
            rows["returned to the queue"] = c.released
            if c.given_back:
                rows["  why"] = c.given_back
    rows |= {f"{lane} requests": n for lane, n in sorted(report.requests.items())}
    rows |= {f"{lane} 429s": n for lane, n in sorted(report.rate_limited.items())}
    show("pypi", rows)
    if report.seed is not None:
        for name, reason in sorted(report.seed.failed.items()):
            console.print(f"seed {name}: {reason}", highlight=False, markup=False)
    if report.collect is not None:
        for name, reason in sorted(report.collect.failures.items()):
            console.print(f"collect {name}: {reason}", highlight=False, markup=False)


async def _collect(
    s: Settings,
    stop: GracefulStop,
    fmt: Format,
    names: list[str],
    resync: bool,
    limit: int | None,
    skip_existing: bool,
) -> int:
    from stagecrawl.pypi import pipeline, sca

    client = make_client(s)
    async with client.fetcher:
        database = open_database(s)  # after every check: a refused start creates nothing
        with progress("collecting", fmt) as bar:
            report = await pipeline.collect(
                database,
                client,
                collect_settings(s, limit, skip_existing),
                stop,
                names,
                resync,
                bar,
                sca.license_matcher(database),
            )
    render_collect(report, fmt)
    return exit_code(report.problems, report.interrupted, stop)


async def _seed(
    s: Settings, stop: GracefulStop, fmt: Format, names: list[str], resync: bool
) -> int:
    from stagecrawl.pypi import pipeline

    client = make_client(s)
    async with client.fetcher:
        database = open_database(s)
        report = await pipeline.seed(
            database, client, names, stop, s.concurrency, resync, s.grace_period
        )
    render_collect(report, fmt)
    return exit_code(report.problems, report.interrupted, stop)


@app.command("seed")
def seed_command(
    names: Names = None,
    seeds_file: SeedFile = None,
    resync: Resync = False,
    fmt: FormatOption = Format.table,
    db: Db = None,
    pypi_index_url: IndexUrl = None,
    pypi_api_url: ApiUrl = None,
    contact: Contact = None,
    pypi_index_rate: IndexRate = None,
    pypi_api_rate: ApiRate = None,
    pypi_files_rate: FilesRate = None,
    concurrency: Concurrency = None,
    redis_url: RedisUrl = None,
    grace_period: GracePeriod = None,
) -> None:
    """Register every version each project's Simple page lists (LIST events)."""
    options = locals()
    s = guarded(lambda: settings_from(options))
    wanted = guarded(lambda: gather_names(names, seeds_file))
    run(lambda stop: _seed(s, stop, fmt, wanted, resync), s.grace_period)


@app.command("collect")
def collect_command(
    limit: Limit = None,
    skip_existing: SkipExisting = True,
    fmt: FormatOption = Format.table,
    db: Db = None,
    pypi_index_url: IndexUrl = None,
    pypi_api_url: ApiUrl = None,
    contact: Contact = None,
    pypi_index_rate: IndexRate = None,
    pypi_api_rate: ApiRate = None,
    pypi_files_rate: FilesRate = None,
    concurrency: Concurrency = None,
    redis_url: RedisUrl = None,
    lease_seconds: LeaseSeconds = None,
    grace_period: GracePeriod = None,
) -> None:
    """Collect pending events into VERSION and PRODUCT (and any seeds still queued)."""
    options = locals()
    s = guarded(lambda: settings_from(options))
    run(lambda stop: _collect(s, stop, fmt, [], False, limit, skip_existing), s.grace_period)


@app.command("crawl")
def crawl_command(
    names: Names = None,
    seeds_file: SeedFile = None,
    resync: Resync = False,
    limit: Limit = None,
    skip_existing: SkipExisting = True,
    fmt: FormatOption = Format.table,
    db: Db = None,
    pypi_index_url: IndexUrl = None,
    pypi_api_url: ApiUrl = None,
    contact: Contact = None,
    pypi_index_rate: IndexRate = None,
    pypi_api_rate: ApiRate = None,
    pypi_files_rate: FilesRate = None,
    concurrency: Concurrency = None,
    redis_url: RedisUrl = None,
    lease_seconds: LeaseSeconds = None,
    grace_period: GracePeriod = None,
) -> None:
    """Seed and collect in one command: collecting starts with the first project seeded."""
    options = locals()
    s = guarded(lambda: settings_from(options))
    wanted = guarded(lambda: gather_names(names, seeds_file))
    run(lambda stop: _collect(s, stop, fmt, wanted, resync, limit, skip_existing), s.grace_period)


def render_lock(report: LockReport, fmt: Format) -> None:
    def tables() -> None:
        for entry in report.inputs:
            rows: dict[str, Any] = {
                "lock": entry.kind or "-",
                "pins": entry.pins,
                "new events": entry.new_events,
                "unpinned (not guessed)": len(entry.unpinned),
                "skipped (not from an index)": len(entry.skipped),
            }
            if entry.error:
                rows["error"] = entry.error
            show(entry.label, rows)
            for line in entry.unpinned:
                console.print(f"unpinned {line}", highlight=False, markup=False)

    emit(fmt, report.as_json(), tables)


async def _lock(
    s: Settings,
    stop: GracefulStop,
    fmt: Format,
    repo: str | None,
    tags: list[str],
    pattern: str | None,
    all_tags: bool,
    lockfile: Path | None,
) -> int:
    from stagecrawl.pypi import pipeline

    found = await pipeline.lock_files(
        repo, tags, pattern, all_tags, lockfile, Path(s.cache_dir), stop
    )
    database = open_database(s)  # the inputs were read: a bad one creates nothing
    report = pipeline.register_locks(database, found)
    render_lock(report, fmt)
    return exit_code(report.problems, report.interrupted, stop)


@app.command("lock")
def lock_command(
    repo: Annotated[
        str | None, typer.Argument(help="Git URL or local path of a Python repository.")
    ] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="A tag to read.")] = None,
    tags_matching: Annotated[
        str | None, typer.Option("--tags-matching", help="Glob over the repository's tags.")
    ] = None,
    all_tags: Annotated[bool, typer.Option("--all-tags", help="Every tag.")] = False,
    lockfile: Annotated[
        Path | None,
        typer.Option(
            "--lockfile",
            help="requirements.txt, poetry.lock, uv.lock or pylock.toml you already have.",
        ),
    ] = None,
    fmt: FormatOption = Format.table,
    cache_dir: CacheDir = None,
    db: Db = None,
) -> None:
    """Register the pins of a project's lock files (at each tag): no resolver, pins only."""
    options = locals()
    s = guarded(lambda: settings_from(options))
    run(
        lambda stop: _lock(s, stop, fmt, repo, tag or [], tags_matching, all_tags, lockfile),
        s.grace_period,
    )


# -- SCA: vulns, audit, licenses check ------------------------------------------------------

DEFAULT_OSV_URL = "https://osv-vulnerabilities.storage.googleapis.com/PyPI/all.zip"
AUDIT_FORMATS = ("table", "json", "sarif", "cyclonedx", "markdown")


async def _osv_source(s: Settings, source: str, limit: int, stop: GracefulStop) -> bytes | Path:
    """A URL is fetched on the download lane (into memory up to `limit`); a path is checked."""
    if source.startswith(("http://", "https://")):
        async with components.download_fetcher(s, source, limit) as fetcher:
            return (await stop.cancelling(fetcher.get(source, lane="download"))).content
    path = Path(source)
    if not path.exists():
        raise InputError(f"OSV source {source} does not exist")
    if path.is_file() and path.stat().st_size > limit:
        raise InputError(f"OSV source {source} is larger than {limit} bytes")
    return path


@app.command("vulns")
def vulns_command(
    source: Annotated[
        str,
        typer.Option(
            "--source", help="URL or local path of the OSV PyPI dump (zip, folder, .json)."
        ),
    ] = DEFAULT_OSV_URL,
    scope: Annotated[
        str, typer.Option("--scope", help="collected: projects in PRODUCT; all: every project.")
    ] = "collected",
    max_archive_mb: Annotated[int, typer.Option("--max-archive-mb", min=1)] = 512,
    max_entry_kb: Annotated[int, typer.Option("--max-entry-kb", min=1)] = 4096,
    fmt: FormatOption = Format.table,
    db: Db = None,
    contact: Contact = None,
) -> None:
    """Import OSV advisories for PyPI into the PYPI VULN tables and match collected versions."""
    options = locals()
    s = guarded(lambda: settings_from(options))
    from stagecrawl.pypi import sca

    async def body(stop: GracefulStop) -> int:
        if scope not in sca.SCOPES:
            raise InputError(f"--scope must be 'collected' or 'all', not {scope!r}")
        data = await _osv_source(s, source, max_archive_mb * 1024 * 1024, stop)
        database = open_database(s)
        report = await asyncio.to_thread(sca.import_osv, database, data, scope, max_entry_kb * 1024)

        def tables() -> None:
            show(
                "pypi vulns",
                {
                    "advisories read": report.advisories,
                    "duplicates merged into PYSEC": report.duplicates_merged,
                    "entries skipped (too large)": report.read.skipped_too_large,
                    "entries skipped (not OSV JSON)": report.read.skipped_invalid,
                    "malformed (skipped, reported)": len(report.problems),
                    "unreadable parts (kept, warned)": len(report.warnings),
                    "advisory × project pairs (RAW)": report.pairs,
                    f"pairs in scope for V1 ({scope})": report.in_scope,
                    "RAW rows written": report.raw_written,
                    "V1 rows (CVE)": report.v1_rows,
                    "withdrawn": report.withdrawn,
                    "collected versions hit": report.hits,
                },
            )

        emit(fmt, asdict(report), tables)
        # a part that cannot be read is a warning (the record is kept; an audit says it could
        # not evaluate it fully); a record skipped whole fails the run
        for warning in report.warnings:
            console.print(f"warning: {warning}", highlight=False, markup=False, soft_wrap=True)
        return EXIT_PARTIAL if report.problems else EXIT_OK

    run(body, s.grace_period)


@app.command("audit")
def audit_command(
    targets: Annotated[
        list[str] | None, typer.Argument(help="NAME==VERSION pins.", show_default=False)
    ] = None,
    lockfile: Annotated[
        list[Path] | None,
        typer.Option("--lockfile", help="requirements.txt, poetry.lock, uv.lock, pylock.toml."),
    ] = None,
    output: Annotated[
        str, typer.Option("--format", help="table, json, sarif, cyclonedx or markdown (stdout).")
    ] = "table",
    deny: Annotated[
        list[str] | None,
        typer.Option("--deny", help="Fail on informational advisories too: warnings, or a kind."),
    ] = None,
    repo: Annotated[
        str | None, typer.Option("--repo", help="A git repository whose tags hold lock files.")
    ] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="A tag of --repo.")] = None,
    tags_matching: Annotated[
        str | None, typer.Option("--tags-matching", help="Glob over --repo's tags.")
    ] = None,
    all_tags: Annotated[bool, typer.Option("--all-tags", help="Every tag of --repo.")] = False,
    cache_dir: CacheDir = None,
    db: Db = None,
) -> None:
    """Which stored PyPI advisories hit these pins — collected or not (run `pypi vulns`
    first). Exit 1 when a vulnerability hits or a pin could not be audited. Read-only."""
    options = locals()
    s = guarded(lambda: settings_from(options))
    from stagecrawl.cli.crates_sca import audit_text
    from stagecrawl.cli.sca_render import deliver
    from stagecrawl.pypi import pipeline, sca

    async def body(stop: GracefulStop) -> int:
        if output not in AUDIT_FORMATS:
            raise InputError(f"--format must be one of {', '.join(AUDIT_FORMATS)}")
        tagged = (
            await pipeline.lock_files(
                repo, tag or [], tags_matching, all_tags, None, Path(s.cache_dir), stop
            )
            if repo
            else []
        )
        inputs = sca.audit_inputs(targets or [], lockfile or [], tagged)
        report = await asyncio.to_thread(sca.audit_pypi, s.db, inputs, deny or [])
        # the writers every registry's audit shares (headers on every table)
        deliver(audit_text(report, output), None, report.exit_code)
        return report.exit_code

    run(body, s.grace_period)


licenses_app = typer.Typer(
    help="License policy over collected PyPI versions.", no_args_is_help=True
)
app.add_typer(licenses_app, name="licenses")


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
        typer.Option("--exception", help="PROJECT=LICENSE: allowed for that project only."),
    ] = None,
    fmt: FormatOption = Format.table,
    db: Db = None,
) -> None:
    """Every collected version whose license the policy cannot satisfy (cargo-deny's
    semantics); exit 1 when any. Read-only."""
    options = locals()
    s = guarded(lambda: settings_from(options))
    from stagecrawl.pypi import sca

    def body() -> int:
        result = sca.check_licenses(s.db, allow or [], deny or [], exception or [])
        document = {
            "versions_checked": result.rows,
            "violations": [
                {
                    "project": v.package,
                    "version": v.version,
                    "license": v.license,
                    "expression": v.expression,
                    "reason": v.reason,
                }
                for v in result.violations
            ],
        }

        def tables() -> None:
            if result.violations:  # a header on every table
                report_console().print("project\tversion\tlicense\treason", markup=False)
            for v in result.violations:
                report_console().print(
                    f"{v.package}\t{v.version}\t{v.expression or v.license or ''}\t{v.reason}",
                    highlight=False,
                    markup=False,
                )
            report_console().print(
                f"{result.rows} versions checked, {len(result.violations)} not accepted",
                highlight=False,
            )

        emit(fmt, document, tables)
        return EXIT_PARTIAL if result.violations else EXIT_OK

    raise finish(guarded(body))


@app.command("refresh")
def refresh_command(
    names: Names = None,
    collect: Annotated[
        bool,
        typer.Option("--collect/--no-collect", help="Collect the new events afterwards."),
    ] = True,
    fmt: FormatOption = Format.table,
    db: Db = None,
    pypi_index_url: IndexUrl = None,
    pypi_api_url: ApiUrl = None,
    contact: Contact = None,
    pypi_index_rate: IndexRate = None,
    pypi_api_rate: ApiRate = None,
    pypi_files_rate: FilesRate = None,
    concurrency: Concurrency = None,
    redis_url: RedisUrl = None,
    lease_seconds: LeaseSeconds = None,
    grace_period: GracePeriod = None,
) -> None:
    """Re-check stored projects with conditional GETs (ETag): new versions become events,
    yanks (and their reversal) flip, PRODUCT's latest version and serial follow."""
    options = locals()
    s = guarded(lambda: settings_from(options))
    from stagecrawl.pypi import pipeline, sca
    from stagecrawl.pypi.refresh import refresh
    from stagecrawl.queue import Waiting

    wanted = guarded(lambda: pipeline.check_names(names or []))

    async def body(stop: GracefulStop) -> int:
        client = make_client(s)
        async with client.fetcher:
            database = open_database(s)
            report = await refresh(database, client, wanted, stop, s.concurrency)
            collected: CollectReport | None = None
            if collect and report.new_events and not stop.requested:
                collected = await pipeline.collect(
                    database,
                    client,
                    collect_settings(s, None, True),
                    stop,
                    licenses=sca.license_matcher(database),
                )
        # What waits for a pause: the projects refresh did not ask, the events collect did
        # not attempt (the latest time wins).
        waiting = Waiting.merge([report.pause, collected.waiting if collected else None])
        document: dict[str, Any] = {"refresh": report.as_json()}
        if collected is not None:
            document["collect"] = collected.as_json()
        if waiting is not None:
            document["waiting"] = waiting.as_json()

        def tables() -> None:
            brief = {k: v for k, v in report.as_json().items() if k not in ("failed", "waiting")}
            if report.not_asked.reasons:
                brief["not asked (waiting for a pause)"] = len(report.not_asked.reasons)
            show("pypi refresh", brief)
            for name, reason in sorted(report.failed.items()):
                console.print(f"refresh {name}: {reason}", highlight=False, markup=False)
            if collected is not None:
                collect_tables(collected)

        emit(fmt, document, tables)
        print_waiting(waiting, sum(client.fetcher.stats.requests.values()))
        problems = report.problems or (collected is not None and collected.problems)
        interrupted = report.interrupted or (collected is not None and collected.interrupted)
        return exit_code(problems, interrupted, stop)

    run(body, s.grace_period)
