"""What every command shares: options from the settings table, output, errors, exit codes.

Output contract: a command's report goes to stdout whatever its format (exactly one JSON
document with `--format json`; tables for people otherwise, whole lines when stdout is not a
terminal; `-q` prints no table when the command succeeds); progress, logs, warnings and errors
go to stderr. An error is always one line on stderr, secrets masked, with the exit code below
(docs/operations.md):

    0 ok · 1 some work failed or is left on a retry ladder · 2 bad input or configuration ·
    130 interrupted by SIGINT · 143 stopped by SIGTERM
"""

from __future__ import annotations

import gc
import io
import json
import logging
import shutil
import sys
import traceback
from collections.abc import Callable, Coroutine, Mapping
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TextIO, TypeVar, cast

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from stagecrawl.errors import (
    ConfigError,
    InputError,
    LimiterUnavailable,
    StagecrawlError,
    StorageError,
)
from stagecrawl.secrets import RedactingFilter, RedactingFormatter, RedactingStream, redact
from stagecrawl.settings import BY_NAME, DEFAULTS, Settings

if TYPE_CHECKING:  # imported where used: `--help` and `status` must not pay for asyncio, the
    # engine or a database driver (issue 20's start-up budget; bench/startup.py measures it)
    from rich.table import Table

    from stagecrawl.engine.progress import ProgressReporter
    from stagecrawl.engine.shutdown import GracefulStop
    from stagecrawl.pauses import Waiting

T = TypeVar("T")
EXIT_OK, EXIT_PARTIAL, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143

# Progress, logs, warnings, errors; every secret the run was given is masked on the way out,
# whatever printed it (a table cell quoting a driver's error included).
console = Console(file=cast(TextIO, RedactingStream(sys.stderr)))
state: dict[str, Any] = {"quiet": False, "verbose": False}

# Off a terminal (a pipe, a file) Rich draws to 80 columns and cuts what does not fit; a report
# there is drawn this wide instead, so every line is whole (a table is as wide as its content).
REPORT_WIDTH = 100_000
_report: Console | None = None  # the report's console while `emit` draws its tables
_held: list[str] = []  # a quiet command's report: printed only if the command fails


class Format(StrEnum):
    table = "table"
    json = "json"


def _help(name: str) -> str:
    setting = BY_NAME[name]
    env = f" [env {setting.env}]" if setting.env else ""
    default = "" if setting.default is None else f" [default: {setting.default}]"
    allowed = f" [{setting.allowed()}]" if setting.allowed() else ""
    return f"{setting.help}.{default}{allowed}{env}"


def metavar(name: str) -> str:
    """How a setting's value reads in help (`RATE`, `N`, `URL`), not its Python type."""
    setting = BY_NAME[name]
    if setting.check in ("url", "redis-url", "db-url"):
        return "URL"
    if setting.check == "budgets":
        return "BUDGETS"
    if setting.kind is int:
        return "N"
    if setting.kind is float:
        return "RATE" if name.endswith("_rate") else "SECONDS"
    return "TEXT"


def _opt(name: str) -> Any:
    setting = BY_NAME[name]
    assert setting.flag
    return typer.Option(setting.flag, help=_help(name), show_default=False, metavar=metavar(name))


def setting_option(name: str) -> Any:
    """The option of a setting (the core's `concurrency`, a section's `pypi.index_url`), as
    an `Annotated` type whose default is None ("not given": the settings table tells a flag
    from the environment from the default)."""
    kind = BY_NAME[name].kind
    return Annotated[kind | None, _opt(name)]


# Every option that maps to a core setting defaults to None ("not given").
Db = Annotated[str | None, _opt("db")]
Contact = Annotated[str | None, _opt("contact")]
Concurrency = Annotated[int | None, _opt("concurrency")]
AircraftConcurrency = Annotated[int | None, _opt("aircraft_concurrency")]
RedisUrl = Annotated[str | None, _opt("redis_url")]
LeaseSeconds = Annotated[float | None, _opt("lease_seconds")]
GracePeriod = Annotated[float | None, _opt("grace_period")]
AiLicenseUrl = Annotated[str | None, _opt("ai_license_url")]
AiRate = Annotated[float | None, _opt("ai_rate")]
CacheDir = Annotated[str | None, _opt("cache_dir")]
SparqlUrl = Annotated[str | None, _opt("sparql_url")]
EntitiesUrl = Annotated[str | None, _opt("entities_url")]
SparqlRate = Annotated[float | None, _opt("sparql_rate")]
EntitiesRate = Annotated[float | None, _opt("entities_rate")]
FormatOption = Annotated[
    Format,
    typer.Option(
        "--format", help="The report on stdout: table (for people) or json (one document)."
    ),
]
Quiet = Annotated[
    bool,
    typer.Option(
        "--quiet", "-q", help="Warnings and errors only; no report table when all went well."
    ),
]


def settings_from(options: Mapping[str, Any], section: str = "") -> Settings:
    """Resolve the run's settings from a command's options (its `locals()`: those that are
    settings; a registry's own are named without their `section.` prefix), then the
    environment, then the defaults. The process's malloc is bounded here
    (`malloc_arenas`): every command resolves its settings before it starts a thread. A
    `-q` given after the command takes effect here too."""
    from stagecrawl.engine.memory import bound_malloc_arenas

    if options.get("quiet"):
        setup_logging(state["verbose"], True)
    flags = {}
    for key, value in options.items():
        qualified = f"{section}.{key}" if section and f"{section}.{key}" in BY_NAME else key
        if qualified in BY_NAME:
            flags[qualified] = value
    settings = Settings.resolve(flags)
    bound_malloc_arenas(settings.malloc_arenas)
    return settings


def fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    """One line on stderr (secrets masked, never read as markup); the exit to raise."""
    line = redact(" ".join(message.split()))  # one line, whatever the message held
    console.print(f"[bold red]error:[/] {escape(line)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def guarded(body: Callable[[], T]) -> T:
    """Run a command body; every failure becomes one line and its exit code."""
    try:
        return body()
    except (ConfigError, InputError, StorageError) as exc:
        raise fail(str(exc)) from None
    except LimiterUnavailable as exc:
        # The worker stops; its leases run out as designed and another worker takes over.
        raise fail(f"{exc}; stopped (leases are returned or run out)", EXIT_PARTIAL) from None
    except StagecrawlError as exc:
        raise fail(str(exc), EXIT_PARTIAL) from None
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        raise fail(f"{exc.strerror or exc}{where}") from None
    except KeyboardInterrupt:
        raise fail("interrupted", EXIT_INTERRUPTED) from None
    except typer.Exit:
        raise
    except Exception as exc:
        if _is_a(exc, "stagecrawl.engine.shutdown", "Interrupted"):
            raise fail("interrupted", EXIT_INTERRUPTED) from None
        if _is_a(exc, "sqlalchemy.exc", "SQLAlchemyError"):
            # A database that fails mid-run (disk full, connection lost): one line, and every
            # batch already written stays written (each is one transaction).
            from stagecrawl.storage.db import is_connection_loss  # loaded: a database failed

            orig = getattr(exc, "orig", None) or exc
            # A connection lost mid-run is not a bad input: what was written stays, a rerun
            # goes on (exit 1, not 2).
            code = EXIT_PARTIAL if is_connection_loss(exc) else EXIT_USAGE
            raise fail(
                f"database error: {str(orig).splitlines()[0] if str(orig) else orig!r}", code
            ) from None
        # A bug: still one line, the traceback only when asked for.
        if state["verbose"]:
            sys.stderr.write(redact(traceback.format_exc()))
        raise fail(
            f"internal error ({type(exc).__name__}: {exc}); run with -v for the traceback",
            EXIT_PARTIAL,
        ) from None


def _is_a(exc: BaseException, module: str, name: str) -> bool:
    """`isinstance` against a class of a module that may not be imported (then exc is not
    one of its instances): the check costs no import."""
    loaded = sys.modules.get(module)
    cls = getattr(loaded, name, None) if loaded is not None else None
    return isinstance(cls, type) and isinstance(exc, cls)


def run(
    body: Callable[[GracefulStop], Coroutine[Any, Any, int]], grace: float = DEFAULTS.grace_period
) -> NoReturn:
    """Run an async command body under SIGINT/SIGTERM handling and exit with its code. A
    stopped phase finishes what it holds within its grace period and reports; should it not,
    it is cancelled `grace` + 2 s after the signal, so every stop is bounded. A stopped run
    exits 130 (SIGINT) or 143 (SIGTERM)."""
    import asyncio
    import contextlib

    from stagecrawl.engine.memory import quiet_collector
    from stagecrawl.engine.shutdown import GracefulStop, Interrupted, Unsent, signals_held

    quiet_collector()

    async def main() -> int:
        stop = GracefulStop(grace_period=grace)
        with stop.on_signals():
            task = asyncio.ensure_future(body(stop))
            signalled = asyncio.ensure_future(stop.event.wait())
            await asyncio.wait({task, signalled}, return_when=asyncio.FIRST_COMPLETED)
            signalled.cancel()
            if not task.done():
                await asyncio.wait({task}, timeout=grace + 2.0)
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Interrupted, Unsent):
                    await task
                console.print(
                    f"stopped after the grace period ({grace:g}s); what was written stays",
                    highlight=False,
                )
                return stop.exit_code
            try:
                code = task.result()
            except (Interrupted, Unsent):  # Unsent: stopped while waiting to send (no loop)
                return stop.exit_code
        return stop.exit_code if stop.requested else code

    try:
        with signals_held():  # until main's on_signals: no raise inside the loop's making
            code = guarded(lambda: asyncio.run(main()))
    except typer.Exit as stopped:
        release_report(stopped.exit_code)
        raise
    release_report(code)
    # The process ends here: spare it the interpreter's last collection of every object (it
    # took seconds on a busy machine, between a stop's summary and the exit).
    gc.freeze()
    raise typer.Exit(code)


def progress(title: str, fmt: Format = Format.table) -> ProgressReporter:
    from stagecrawl.engine.progress import ProgressReporter

    return ProgressReporter(title, console=console, quiet=state["quiet"])


def emit(fmt: Format, document: Mapping[str, Any], tables: Callable[[], None]) -> None:
    """The command's result on stdout: one JSON document, or the tables for people that
    `tables` prints through `show` and `report_console()`. With -q the tables are held back and
    printed only if the command fails (`release_report`)."""
    global _report
    if fmt is Format.json:
        text = json.dumps(document, indent=2, sort_keys=False, default=str)
        sys.stdout.write(redact(text) + "\n")
        sys.stdout.flush()
        return
    if _report is not None:  # a report inside a report (refresh's collect): same console
        tables()
        return
    held = io.StringIO() if state["quiet"] else None
    _report = _new_report_console(held)
    try:
        tables()
    finally:
        _report = None
    if held is not None:
        _held.append(held.getvalue())


def report_console() -> Console:
    """Where a command's report prints: stdout (the console `emit` set up for its tables)."""
    return _report if _report is not None else _new_report_console(None)


def _new_report_console(held: io.StringIO | None) -> Console:
    to_terminal = sys.stdout.isatty()
    target: TextIO = held if held is not None else cast(TextIO, RedactingStream(sys.stdout))
    return Console(
        file=target,
        width=shutil.get_terminal_size().columns if to_terminal else REPORT_WIDTH,
        force_terminal=True if to_terminal else None,
    )


def release_report(code: int) -> None:
    """A quiet command's held report goes out only when the command did not succeed."""
    text = "".join(_held)
    _held.clear()
    if text and code != EXIT_OK:
        sys.stdout.write(redact(text))
        sys.stdout.flush()


def finish(code: int) -> typer.Exit:
    """The exit of a command that runs without `run` (held report released); raise it."""
    release_report(code)
    return typer.Exit(code)


def show(title: str, rows: Mapping[str, object]) -> None:
    from stagecrawl.engine.progress import summary_table

    print_table(summary_table(title, rows))


def print_table(table: Table) -> None:
    """A table of the report. Its title goes on a line of its own, whole: as a table's title
    Rich folds it to the table's width (a long database URL over a narrow table)."""
    title = table.title
    if isinstance(title, str) and title:
        table.title = None
        style = table.title_style or "table.title"
        report_console().print(Text.from_markup(title, style=style), soft_wrap=True)
    report_console().print(table)


def waiting_line(waiting: Waiting, sent: int) -> str:
    """Work not attempted because a host asked for a pause (or our budget is spent), as one
    line: why (naming the source), until when, whether this run sent anything at all, and that
    a rerun after that time goes on. Every registry's seed, collect and refresh say it so."""
    what = "nothing sent" if sent == 0 else f"{waiting.rows} queued item(s) wait"
    return f"{waiting.reason}; {what}; rerun after that"


def print_waiting(waiting: Waiting | None, sent: int) -> None:
    """The waiting line on stderr (in every format: it explains exit 1), if anything waits."""
    if waiting is not None:
        line = escape(redact(waiting_line(waiting, sent)))
        console.print(f"[yellow]{line}[/]", highlight=False, soft_wrap=True)


def exit_code(problems: bool, interrupted: bool, stop: GracefulStop) -> int:
    if interrupted or stop.requested:
        return stop.exit_code
    return EXIT_PARTIAL if problems else EXIT_OK


def setup_logging(verbose: bool, quiet: bool) -> None:
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    # The formatter masks the whole line, a traceback attached to it included.
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter())
    logging.captureWarnings(True)  # a library's warning may quote a URL: through the mask too
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("httpx", "httpcore", "aiohttp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    state["quiet"], state["verbose"] = quiet, verbose


def existing_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise InputError(f"{what} {path} does not exist")
    return path
