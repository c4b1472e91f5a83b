"""`stagecrawl crates …`: parse options, call the pipeline, render its report, exit."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from stagecrawl.cli.common import (
    EXIT_PARTIAL,
    AiLicenseUrl,
    AiRate,
    ApiBudget,
    ApiBurst,
    ApiRate,
    ApiUrl,
    CacheDir,
    Concurrency,
    Contact,
    Db,
    Format,
    FormatOption,
    GracePeriod,
    IndexBudget,
    IndexBurst,
    IndexRate,
    IndexUrl,
    LeaseSeconds,
    RedisUrl,
    console,
    emit,
    exit_code,
    guarded,
    print_table,
    print_waiting,
    progress,
    run,
    settings_from,
    show,
)
from stagecrawl.cli.crates_sca import licenses_import
from stagecrawl.cli.crates_sca import public as _public
from stagecrawl.cli.crates_sca import register as register_sca_commands
from stagecrawl.crates.config import (
    read_seeds_file,
    split_env_seeds,
)
from stagecrawl.crates.names import validate_name
from stagecrawl.crates.sources import DEFAULT_DUMP_URL
from stagecrawl.errors import InputError

if TYPE_CHECKING:  # the pipeline (aiohttp, SQLAlchemy, the engine) is imported where a command
    # runs it: `crates --help` builds every command's signature and must not pay for it
    from stagecrawl.crates import pipeline
    from stagecrawl.engine.shutdown import GracefulStop
    from stagecrawl.settings import Settings

app = typer.Typer(
    help="The crates.io pipeline: seed, collect, crawl, lock, audit…", no_args_is_help=True
)

Names = Annotated[list[str] | None, typer.Argument(help="Crate names.", show_default=False)]
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


def _gather_names(names: list[str] | None, seeds_file: Path | None) -> list[str]:
    collected = [validate_name(n) for n in names or []]
    if seeds_file is not None:
        collected += read_seeds_file(seeds_file)
    collected += split_env_seeds(os.environ.get("STAGECRAWL_SEED_CRATES"))
    if not collected:
        raise InputError("no crate names given (arguments, --file or STAGECRAWL_SEED_CRATES)")
    return collected


MAX_REASON_LINES = 20  # per kind; `stagecrawl status` lists every event on a ladder


def render_collect(report: pipeline.CollectReport, fmt: Format, waiting: bool = True) -> None:
    from stagecrawl.crates.queue import COLLECTED, NOT_FOUND, SKIPPED

    def tables() -> None:
        seed = report.seed
        if seed is not None and (seed.crates or seed.not_found or seed.failed):
            rows: dict[str, object] = {
                "crates found": len(seed.crates),
                "versions seen": sum(seed.crates.values()),
                "new events": seed.counts.new,
                "merged events": seed.counts.merged,
                "requeued (resync)": seed.counts.requeued,
                "not in the index": ", ".join(sorted(seed.not_found)) or 0,
                "on the seed ladder (failed)": len(seed.failed),
            }
            if seed.interrupted:
                rows["returned to the seed queue"] = seed.released
                if seed.given_back:
                    rows["  why"] = seed.given_back
            show("seed", rows)
        summary = report.collect
        if summary is not None:
            rows = {
                "crates written": summary.crates,
                "collected": summary.outcomes[COLLECTED],
                "skipped (already in VERSION)": summary.outcomes[SKIPPED],
                "not found": summary.outcomes[NOT_FOUND],
                "yanked (collected, flagged)": summary.yanked,
                "failed (on the retry ladder)": summary.failed,
            }
            if summary.waiting_events:
                rows["not attempted (waiting for a pause)"] = summary.waiting_events
            if summary.lost_leases:
                rows["crates lost to another worker"] = summary.lost_leases
            if summary.interrupted:
                rows["returned to the queue"] = summary.released
                if summary.given_back:
                    rows["  why"] = summary.given_back
        else:
            rows = {}
        problems = _index_problems(report)
        if problems:
            rows["index lines skipped (unreadable)"] = sum(map(len, problems.values()))
        for lane, count in sorted(report.requests.items()):
            rows[f"requests ({lane} lane)"] = count
        rows["429s seen"] = sum(report.rate_limited.values())
        if report.ai_calls is not None:
            rows["AI license calls"] = report.ai_calls
            rows["AI license failures (redo: licenses backfill)"] = report.ai_warnings
        if summary is not None:
            rows["wall time"] = f"{summary.wall_seconds:.1f}s"
        show("collect" if summary is not None else "seed traffic", rows)

    emit(fmt, report.as_json(), tables)
    print_reasons(report, waiting)


def _index_problems(report: pipeline.CollectReport) -> dict[str, list[str]]:
    problems: dict[str, list[str]] = {}
    if report.seed is not None:
        problems.update(report.seed.index_problems)
    if report.collect is not None:
        problems.update(report.collect.index_problems)
    return problems


def print_reasons(report: pipeline.CollectReport, waiting: bool = True) -> None:
    """Why something failed, one whole line per crate on stderr (never a wrapped table cell),
    in either format: what a user reads first when the exit code is not 0; then the waiting
    line, unless the caller prints its own (`waiting=False`: refresh says what waits in all)."""
    lines: list[tuple[str, str]] = []
    seed = report.seed
    if seed is not None:
        lines += [
            ("failed", f"{name}: {reason} (on the seed ladder: the next crawl or collect retries)")
            for name, reason in sorted(seed.failed.items())
        ][:MAX_REASON_LINES]
        if len(seed.failed) > MAX_REASON_LINES:
            lines.append(("failed", f"… and {len(seed.failed) - MAX_REASON_LINES} more seeds"))
    summary = report.collect
    if summary is not None:
        lines += [
            ("failed", f"{name}: {reason} (on the retry ladder)")
            for name, reason in sorted(summary.failures.items())
        ][:MAX_REASON_LINES]
        if len(summary.failures) > MAX_REASON_LINES:
            left = len(summary.failures) - MAX_REASON_LINES
            lines.append(("failed", f"… and {left} more (stagecrawl status lists them)"))
    for crate, problems in sorted(_index_problems(report).items())[:MAX_REASON_LINES]:
        more = f" (+{len(problems) - 10} more)" if len(problems) > 10 else ""
        shown = "; ".join(problems[:10])
        lines.append(("skipped", f"{crate}: unreadable index lines: {shown}{more}"))
    for kind, line in lines:
        colour = "bold red" if kind == "failed" else "yellow"
        console.print(f"[{colour}]{kind}:[/] {escape(line)}", highlight=False, soft_wrap=True)
    if waiting:  # work not attempted: one line, off the retry ladder
        print_waiting(report.waiting, sum(report.requests.values()))


async def _crawl(
    s: Settings,
    stop: GracefulStop,
    fmt: Format,
    names: list[str],
    resync: bool,
    limit: int | None,
    skip_existing: bool,
) -> int:
    from stagecrawl.crates import pipeline

    with progress("collecting", fmt) as bar:
        report = await pipeline.run_collect(s, stop, names, resync, limit, skip_existing, bar)
    render_collect(report, fmt)
    return exit_code(report.problems, report.interrupted, stop)


@app.command("seed")
def seed_command(
    names: Names = None,
    seeds_file: SeedFile = None,
    resync: Resync = False,
    fmt: FormatOption = Format.table,
    db: Db = None,
    index_url: IndexUrl = None,
    api_url: ApiUrl = None,
    contact: Contact = None,
    index_rate: IndexRate = None,
    index_burst: IndexBurst = None,
    index_budget: IndexBudget = None,
    concurrency: Concurrency = None,
    redis_url: RedisUrl = None,
    grace_period: GracePeriod = None,
) -> None:
    """Register every version of each crate (from the sparse index) in the LIST table."""
    options = locals()
    s = guarded(lambda: settings_from(options))
    wanted = guarded(lambda: _gather_names(names, seeds_file))
    from stagecrawl.crates import pipeline

    async def body(stop: GracefulStop) -> int:
        with progress("seeding", fmt) as bar:
            report = await pipeline.run_seed(s, wanted, stop, resync, bar)
        render_collect(report, fmt)
        return exit_code(report.problems, report.interrupted, stop)

    run(body, s.grace_period)


@app.command("collect")
def collect_command(
    limit: Limit = None,
    skip_existing: SkipExisting = True,
    fmt: FormatOption = Format.table,
    db: Db = None,
    index_url: IndexUrl = None,
    api_url: ApiUrl = None,
    contact: Contact = None,
    api_rate: ApiRate = None,
    index_rate: IndexRate = None,
    api_burst: ApiBurst = None,
    index_burst: IndexBurst = None,
    api_budget: ApiBudget = None,
    index_budget: IndexBudget = None,
    concurrency: Concurrency = None,
    ai_license_url: AiLicenseUrl = None,
    ai_rate: AiRate = None,
    redis_url: RedisUrl = None,
    lease_seconds: LeaseSeconds = None,
    grace_period: GracePeriod = None,
) -> None:
    """Collect pending LIST events (and queued seeds) into VERSION and PRODUCT."""
    options = locals()
    s = guarded(lambda: settings_from(options))
    run(lambda stop: _crawl(s, stop, fmt, [], False, limit, skip_existing), s.grace_period)


@app.command("crawl")
def crawl_command(
    names: Names = None,
    seeds_file: SeedFile = None,
    resync: Resync = False,
    limit: Limit = None,
    skip_existing: SkipExisting = True,
    fmt: FormatOption = Format.table,
    db: Db = None,
    index_url: IndexUrl = None,
    api_url: ApiUrl = None,
    contact: Contact = None,
    api_rate: ApiRate = None,
    index_rate: IndexRate = None,
    api_burst: ApiBurst = None,
    index_burst: IndexBurst = None,
    api_budget: ApiBudget = None,
    index_budget: IndexBudget = None,
    concurrency: Concurrency = None,
    ai_license_url: AiLicenseUrl = None,
    ai_rate: AiRate = None,
    redis_url: RedisUrl = None,
    lease_seconds: LeaseSeconds = None,
    grace_period: GracePeriod = None,
) -> None:
    """Seed and collect in one command: collecting starts with the first crate seeded."""
    options = locals()
    s = guarded(lambda: settings_from(options))
    wanted = guarded(lambda: _gather_names(names, seeds_file))
    run(lambda stop: _crawl(s, stop, fmt, wanted, resync, limit, skip_existing), s.grace_period)


@app.command("lock")
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
        bool,
        typer.Option(
            "--pinned-only",
            help="Only the versions the locks pin, from the lock alone (no index request).",
        ),
    ] = False,
    lockfile: Annotated[
        Path | None, typer.Option("--lockfile", help="A Cargo.lock you already have.")
    ] = None,
    label: Annotated[
        str | None, typer.Option("--label", help="REF_TAGS label for --lockfile.")
    ] = None,
    fmt: FormatOption = Format.table,
    cache_dir: CacheDir = None,
    db: Db = None,
    index_url: IndexUrl = None,
    api_url: ApiUrl = None,
    contact: Contact = None,
    index_rate: IndexRate = None,
) -> None:
    """Register the crates a project's Cargo.lock uses, per git tag (or one lock file)."""
    options = locals()
    s = guarded(lambda: settings_from(options))
    from stagecrawl.crates import pipeline

    async def body(stop: GracefulStop) -> int:
        report = await pipeline.run_lock(
            s, stop, repo, tag or [], tags_matching, all_tags, lockfile, label, pinned_only
        )
        render_lock(report, fmt)
        return exit_code(report.problems, report.interrupted, stop)

    run(body, s.grace_period)


def render_lock(report: pipeline.LockReport, fmt: Format) -> None:
    def tables() -> None:
        table = Table(title="lock", title_justify="left")
        for column in ("input", "lock", "packages", "external crates", "new events", "problem"):
            table.add_column(column, justify="left" if column in ("input", "problem") else "right")
        for r in report.tags:
            problem = r.error or (
                f"not in the index: {', '.join(r.not_found)}" if r.not_found else ""
            )
            cells = (r.label, r.kind, str(r.packages), str(r.external), str(r.new_events), problem)
            table.add_row(*(escape(cell) for cell in cells))
        print_table(table)
        failed = [r for r in report.tags if r.error]
        for r in failed:
            console.print(
                f"[bold red]failed:[/] {escape(r.error or '')}", highlight=False, soft_wrap=True
            )
        for r in report.tags:
            for name, reason in sorted((r.index_failed or {}).items())[:MAX_REASON_LINES]:
                line = (
                    f"{r.label}: {name}: {reason} (its pinned versions are registered;"
                    " collect asks the index again)"
                )
                console.print(
                    f"[yellow]index failed:[/] {escape(line)}", highlight=False, soft_wrap=True
                )
        document = report.as_json()
        show(
            "lock totals",
            {
                "inputs": len(report.tags),
                "unique crates": document["unique_crates"],
                "new events": document["new_events"],
                "inputs failed": len(failed),
            },
        )

    emit(fmt, report.as_json(), tables)


@app.command("refresh")
def refresh_command(
    names: Names = None,
    collect: Annotated[
        bool, typer.Option("--collect/--no-collect", help="Collect the new events after.")
    ] = True,
    fmt: FormatOption = Format.table,
    db: Db = None,
    index_url: IndexUrl = None,
    api_url: ApiUrl = None,
    contact: Contact = None,
    api_rate: ApiRate = None,
    index_rate: IndexRate = None,
    api_burst: ApiBurst = None,
    index_burst: IndexBurst = None,
    api_budget: ApiBudget = None,
    index_budget: IndexBudget = None,
    concurrency: Concurrency = None,
    redis_url: RedisUrl = None,
    lease_seconds: LeaseSeconds = None,
    grace_period: GracePeriod = None,
) -> None:
    """Re-check known crates with conditional GETs; register and collect only what changed."""
    options = locals()
    s = guarded(lambda: settings_from(options))
    wanted = guarded(lambda: [validate_name(n) for n in names or []])
    from stagecrawl.crates import pipeline

    async def body(stop: GracefulStop) -> int:
        report = await pipeline.run_refresh(
            s, stop, wanted, collect, lambda: progress("collecting", fmt)
        )
        checked, collected = report.refresh, report.collected

        def tables() -> None:
            rows: dict[str, object] = {
                "crates checked": checked.checked,
                "not modified (304)": checked.not_modified,
                "same content": checked.unchanged_body,
                "changed": ", ".join(checked.changed) or 0,
                "new events": checked.new_events,
                "yanked flags changed": checked.yanked_changes,
                "gone from the index": ", ".join(checked.gone) or 0,
            }
            rows["failed"] = len(checked.failed)
            if checked.not_asked.reasons:
                rows["not asked (waiting for a pause)"] = len(checked.not_asked.reasons)
            if checked.index_problems:
                lines = sum(map(len, checked.index_problems.values()))
                rows["index lines skipped (unreadable)"] = lines
            if checked.interrupted:
                rows["not checked (interrupted)"] = checked.not_checked
            show("refresh", rows)
            if collected is not None:
                render_collect(collected, Format.table, waiting=False)

        emit(fmt, report.as_json(), tables)
        for name, reason in sorted(checked.failed.items()):
            line = f"{name}: {reason}"
            console.print(f"[bold red]failed:[/] {escape(line)}", highlight=False, soft_wrap=True)
        for name, problems in sorted(checked.index_problems.items()):
            line = f"{name}: unreadable index lines: {'; '.join(problems[:10])}"
            console.print(f"[yellow]skipped:[/] {escape(line)}", highlight=False, soft_wrap=True)
        if collected is not None and fmt is Format.json:
            print_reasons(collected, waiting=False)
        # one line for what waits in all: the crates not asked and the events not attempted
        print_waiting(report.waiting, sum(report.requests.values()))
        return exit_code(report.problems, report.interrupted, stop)

    run(body, s.grace_period)


@app.command("dbdump")
def dbdump_command(
    source: Annotated[
        str, typer.Option("--source", help="URL or local path of db-dump.tar.gz.")
    ] = DEFAULT_DUMP_URL,
    max_gb: Annotated[
        float, typer.Option("--max-gb", min=0.001, max=1e6, help="Largest download.")
    ] = 8.0,
    fmt: FormatOption = Format.table,
    db: Db = None,
    contact: Contact = None,
) -> None:
    """Load the whole registry from crates.io's database dump (no API crawl)."""
    options = locals()
    s = guarded(lambda: settings_from(options))
    from stagecrawl.crates import pipeline

    async def body(stop: GracefulStop) -> int:
        with progress("loading dump", fmt) as bar:
            report = await pipeline.run_dbdump(s, stop, source, int(max_gb * 1024**3), bar)
        rate = report.versions / report.seconds if report.seconds else 0

        def tables() -> None:
            show(
                "dbdump",
                {
                    "crates (PRODUCT)": report.crates,
                    "versions (VERSION)": report.versions,
                    "dependencies": report.dependencies,
                    "wall time": f"{report.seconds:.1f}s",
                    "versions/s": f"{rate:.0f}",
                },
            )

        emit(fmt, _public(report), tables)
        return 0

    run(body, s.grace_period)


# vulns, audit and licenses … live in cli/crates_sca.py.
register_sca_commands(app)

__all__ = ["EXIT_PARTIAL", "app", "licenses_import"]
