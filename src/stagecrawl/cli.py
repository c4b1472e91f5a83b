"""The `stagecrawl` command line (typer + rich)."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from sqlalchemy.exc import SQLAlchemyError

from stagecrawl import __version__
from stagecrawl.errors import ConfigError, InputError, StagecrawlError, StorageError

T = TypeVar("T")
console = Console(stderr=True)
app = typer.Typer(help="Polite, durable, staged collection of package data.", no_args_is_help=True)
crates_app = typer.Typer(help="The crates.io pipeline: seed, collect, crawl.", no_args_is_help=True)
app.add_typer(crates_app, name="crates")

EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

DbOption = Annotated[
    str,
    typer.Option(
        "--db",
        envvar="STAGECRAWL_DB",
        help="Database URL (sqlite, mysql+pymysql, postgresql+psycopg).",
    ),
]


def fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    # Messages quote user input (file names, TOML fragments): never read them as markup.
    console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def guarded(body: Callable[[], T]) -> T:
    """Run a command body; stagecrawl errors become one line and exit code 2."""
    try:
        return body()
    except (ConfigError, InputError, StorageError) as exc:
        raise fail(str(exc)) from None
    except StagecrawlError as exc:
        raise fail(str(exc), EXIT_PARTIAL) from None
    except SQLAlchemyError as exc:
        # A database that fails mid-run (disk full, connection lost): one line, and every
        # crate already written stays written (each is one transaction).
        reason = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        raise fail(f"database error: {reason}") from None
    except OSError as exc:
        raise fail(f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": ")) from None


def run(coro_factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    return guarded(lambda: asyncio.run(coro_factory()))


@app.callback()
def main_options(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Warnings and errors only.")] = False,
    version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False,
) -> None:
    if version:
        print(f"stagecrawl {__version__}")
        raise typer.Exit(0)
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
    state["quiet"] = quiet


state: dict[str, Any] = {"quiet": False}


@app.command()
def status(db: DbOption = "sqlite:///stagecrawl.db") -> None:
    """LIST counts per PROCESSED state and per SOURCE, and the VERSION/PRODUCT totals."""
    from stagecrawl.crates.commands import print_status

    guarded(lambda: print_status(db))


@app.command()
def demo(
    out: Annotated[Path, typer.Option("--out", help="Where the demo writes.")] = Path(
        "stagecrawl-demo"
    ),
) -> None:
    """Try stagecrawl offline: the whole crates pipeline against a bundled 127.0.0.1 mirror."""
    from stagecrawl.demo import run_demo

    raise typer.Exit(run(lambda: run_demo(out, console, state["quiet"])))


aircraft_app = typer.Typer(help="Aircraft data from Wikidata (CC0).", no_args_is_help=True)
app.add_typer(aircraft_app, name="aircraft")


@aircraft_app.command("crawl")
def aircraft_crawl(
    out: Annotated[Path, typer.Option("--out", help="Folder of the three JSON stores.")],
    stage: Annotated[
        str, typer.Option("--stage", help="manufacturers, models, specs or all.")
    ] = "all",
    refresh: Annotated[bool, typer.Option("--refresh", help="Fetch stored entities again.")] = (
        False
    ),
    sparql_url: Annotated[str, typer.Option("--sparql-url")] = "https://query.wikidata.org/sparql",
    api_url: Annotated[str, typer.Option("--api-url")] = "https://www.wikidata.org/w/api.php",
    contact: Annotated[str | None, typer.Option("--contact", envvar="STAGECRAWL_CONTACT")] = None,
    batch: Annotated[int, typer.Option("--batch", help="Ids per query / request.")] = 50,
) -> None:
    """Manufacturers → models → specifications, each pass into its own JSON store."""
    from stagecrawl.aircraft.run import PASSES, AircraftConfig, run_aircraft

    if stage not in (*PASSES, "all"):
        raise fail(f"--stage must be one of {', '.join(PASSES)} or all, not {stage!r}")
    config = AircraftConfig(out, sparql_url, api_url, contact, refresh, batch)
    raise typer.Exit(run(lambda: run_aircraft(config, stage, console, state["quiet"])))


@aircraft_app.command("export")
def aircraft_export(
    out: Annotated[Path, typer.Option("--out", help="Folder holding specs.json.")],
    format: Annotated[str, typer.Option("--format", help="csv")] = "csv",
) -> None:
    """A flat table of the specifications, for a spreadsheet."""
    from stagecrawl.aircraft.run import export_csv

    if format != "csv":
        raise fail(f"--format must be csv, not {format!r}")
    target = guarded(lambda: export_csv(out))
    console.print(f"wrote {target}")


def main() -> None:
    app()


# Importing registers the crates commands on crates_app.
from stagecrawl.crates import commands as _crates_commands  # noqa: E402,F401
