"""`stagecrawl aircraft …`: manufacturers → models → specifications from Wikidata."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from stagecrawl.aircraft import MAX_BATCH, PASSES
from stagecrawl.cli.common import (
    AircraftConcurrency,
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
    print_waiting,
    progress,
    run,
    settings_from,
    show,
)

if TYPE_CHECKING:  # the pipeline (the engine, aiohttp) is imported where a command runs it
    from stagecrawl.aircraft.run import AircraftReport
    from stagecrawl.engine.shutdown import GracefulStop

app = typer.Typer(
    help="Aircraft data from Wikidata (CC0).", no_args_is_help=True, rich_markup_mode=None
)


@app.command("crawl")
def aircraft_crawl(
    out: Annotated[Path, typer.Option("--out", help="Folder of the three JSON stores.")],
    stage: Annotated[
        str, typer.Option("--stage", help="manufacturers, models, specs or all.")
    ] = "all",
    refresh: Annotated[bool, typer.Option("--refresh", help="Fetch stored entities again.")] = (
        False
    ),
    batch: Annotated[
        int,
        typer.Option(
            "--batch", min=1, max=MAX_BATCH, help=f"Ids per query / request (1–{MAX_BATCH})."
        ),
    ] = MAX_BATCH,
    fmt: FormatOption = Format.table,
    sparql_url: SparqlUrl = None,
    entities_url: EntitiesUrl = None,
    sparql_rate: SparqlRate = None,
    entities_rate: EntitiesRate = None,
    aircraft_concurrency: AircraftConcurrency = None,
    contact: Contact = None,
    grace_period: GracePeriod = None,
) -> None:
    """Manufacturers → models → specs, each pass into its own JSON store; failed requests
    stay on the retry ladder and are tried again by the next run."""
    if stage not in (*PASSES, "all"):
        raise fail(f"--stage must be one of {', '.join(PASSES)} or all, not {stage!r}")
    options = locals()
    s = guarded(lambda: settings_from(options))
    from stagecrawl.aircraft.run import AircraftConfig, run_aircraft

    config = AircraftConfig(out, s, refresh, batch)
    guarded(config.validate)

    async def body(stop: GracefulStop) -> int:
        report = await run_aircraft(config, stage, stop, lambda title: progress(title, fmt))
        render(report, fmt)
        print_waiting(report.waiting, sum(report.requests.values()))
        return exit_code(report.problems, report.interrupted, stop)

    run(body, s.grace_period)


def render(report: AircraftReport, fmt: Format) -> None:
    def tables() -> None:
        for name, summary in report.passes.items():
            rows: dict[str, object] = {f"{name} stored": report.stored.get(name, 0)}
            if name in report.nothing_to_do:
                rows["nothing to do"] = "every request done, every record stored"
            if name in report.refetched:
                rows["done again (the store had lost their records)"] = report.refetched[name]
            if name in report.refreshed:
                rows["refreshed: records the source dropped, removed"] = report.dropped[name]
            show(f"aircraft {name}", rows | summary.as_rows())
        requests: dict[str, object] = {}
        for lane in ("sparql", "entities"):
            requests[f"{lane} requests"] = report.requests.get(lane, 0)
            requests[f"{lane} 429s"] = report.rate_limited.get(lane, 0)
        requests["5xx answers"] = report.server_errors
        requests["maxlag waits"] = report.maxlag_waits
        show("aircraft requests", requests)

    emit(fmt, report.as_json(), tables)


@app.command("export")
def aircraft_export(
    out: Annotated[Path, typer.Option("--out", help="Folder holding specs.json.")],
    format: Annotated[str, typer.Option("--format", help="csv")] = "csv",
) -> None:
    """A flat table of the specifications, for a spreadsheet."""
    if format != "csv":
        raise fail(f"--format must be csv, not {format!r}")
    from stagecrawl.aircraft.run import export_csv

    target = guarded(lambda: export_csv(out))
    console.print(f"wrote {target}")
