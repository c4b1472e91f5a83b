"""`stagecrawl crates …` commands and `stagecrawl status`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from sqlalchemy import func, select

from stagecrawl.cli import (
    EXIT_INTERRUPTED,
    EXIT_PARTIAL,
    DbOption,
    console,
    crates_app,
    run,
    state,
)
from stagecrawl.crates.client import CratesClient
from stagecrawl.crates.config import (
    DEFAULT_API_URL,
    DEFAULT_INDEX_URL,
    CratesConfig,
    read_seeds_file,
    split_env_seeds,
)
from stagecrawl.crates.names import validate_name
from stagecrawl.crates.queue import COLLECTED, NOT_FOUND, SKIPPED, STATE_NAMES
from stagecrawl.crates.worker import (
    Collector,
    CollectSettings,
    CollectSummary,
    SeedReport,
    seed_crates,
)
from stagecrawl.engine.progress import ProgressReporter, summary_table
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


def _config(
    index_url: str, api_url: str, contact: str | None, api_rate: float, index_rate: float
) -> CratesConfig:
    config = CratesConfig(index_url, api_url, api_rate, index_rate, contact)
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
) -> int:
    async with config.make_fetcher() as fetcher:
        client = CratesClient(fetcher, config.index_url, config.api_url)
        seed_code = 0
        if names:
            report = await seed_crates(db, client, names, resync)
            _print_seed_report(report)
            seed_code = EXIT_PARTIAL if report.not_found or report.failed else 0
        with ProgressReporter("collecting", console=console, quiet=state["quiet"]) as progress:
            collector = Collector(db, client, settings, progress)
            summary = await collector.run()
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
) -> None:
    """Collect pending LIST events into VERSION and PRODUCT until none is left."""

    async def body() -> int:
        config = _config(index_url, api_url, contact, api_rate, index_rate)
        settings = CollectSettings(
            concurrency=concurrency, skip_existing=skip_existing, limit=limit
        )
        return await _collect(config, Database(db), settings)

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
) -> None:
    """Seed and collect in one command: every version of each named crate into the database."""

    async def body() -> int:
        config = _config(index_url, api_url, contact, api_rate, index_rate)
        wanted = _gather_names(names, seeds_file)
        settings = CollectSettings(concurrency=concurrency, skip_existing=skip_existing)
        return await _collect(config, Database(db), settings, wanted, resync)

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
