"""`stagecrawl aircraft …`: manufacturers → models → specifications from Wikidata."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from stagecrawl.aircraft.run import PASSES, AircraftConfig, AircraftReport, export_csv, run_aircraft
from stagecrawl.cli.common import (
    Concurrency,
    Contact,
    EntitiesRate,
    EntitiesUrl,
    Format,
    FormatOption,
    GracePeriod,
    SparqlRate,
    SparqlUrl,
    console,
    emit,
    exit_code,
    fail,
    guarded,
    progress,
    run,
    settings_from,
    show,
)
from stagecrawl.engine.fetcher import FetchSettings
from stagecrawl.engine.shutdown import GracefulStop

app = typer.Typer(help="Aircraft data from Wikidata (CC0).", no_args_is_help=True)


@app.command("crawl")
def aircraft_crawl(
    out: Annotated[Path, typer.Option("--out", help="Folder of the three JSON stores.")],
    stage: Annotated[
        str, typer.Option("--stage", help="manufacturers, models, specs or all.")
    ] = "all",
    refresh: Annotated[bool, typer.Option("--refresh", help="Fetch stored entities again.")] = (
        False
    ),
    batch: Annotated[int, typer.Option("--batch", min=1, help="Ids per query / request.")] = 50,
    fmt: FormatOption = Format.table,
    sparql_url: SparqlUrl = None,
    entities_url: EntitiesUrl = None,
    sparql_rate: SparqlRate = None,
    entities_rate: EntitiesRate = None,
    concurrency: Concurrency = None,
    contact: Contact = None,
    grace_period: GracePeriod = None,
) -> None:
    """Manufacturers → models → specs, each pass into its own JSON store; failed requests
    stay on the retry ladder and are tried again by the next run."""
    if stage not in (*PASSES, "all"):
        raise fail(f"--stage must be one of {', '.join(PASSES)} or all, not {stage!r}")
    options = locals()
    s = guarded(lambda: settings_from(options))
    # Wikimedia asks for at most a few concurrent requests: 2 unless asked otherwise.
    workers = s.concurrency if s.sources["concurrency"] != "default" else 2
    config = AircraftConfig(
        out,
        s.sparql_url,
        s.entities_url,
        s.contact,
        refresh,
        batch,
        sparql_rate=s.sparql_rate,
        api_rate=s.entities_rate,
        concurrency=workers,
        grace_period=s.grace_period,
        fetch=FetchSettings(
            timeout=s.timeout,
            deadline=s.deadline,
            retries=s.retries,
            max_retry_after=s.max_retry_after,
            max_body_bytes=int(s.max_body_mb * 2**20),
        ),
    )
    guarded(config.validate)

    async def body(stop: GracefulStop) -> int:
        report = await run_aircraft(config, stage, stop, lambda title: progress(title, fmt))
        render(report, fmt)
        return exit_code(report.problems, report.interrupted, stop)

    run(body, s.grace_period)


def render(report: AircraftReport, fmt: Format) -> None:
    def tables() -> None:
        for name, summary in report.passes.items():
            rows = {f"{name} stored": report.stored.get(name, 0), **summary.as_rows()}
            show(f"aircraft {name}", rows)

    emit(fmt, report.as_json(), tables)


@app.command("export")
def aircraft_export(
    out: Annotated[Path, typer.Option("--out", help="Folder holding specs.json.")],
    format: Annotated[str, typer.Option("--format", help="csv")] = "csv",
) -> None:
    """A flat table of the specifications, for a spreadsheet."""
    if format != "csv":
        raise fail(f"--format must be csv, not {format!r}")
    target = guarded(lambda: export_csv(out))
    console.print(f"wrote {target}")
