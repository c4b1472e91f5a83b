"""The `stagecrawl` command line (typer + rich): the only layer that parses options and
renders. Pipelines return report objects; this package turns them into tables or JSON and
exit codes (cli/common.py)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from stagecrawl import __version__
from stagecrawl.cli import aircraft, crates, status
from stagecrawl.cli.common import EXIT_INTERRUPTED, fail, setup_logging

app = typer.Typer(
    help="Polite, durable, staged collection of package data.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        print(f"stagecrawl {__version__}")
        raise typer.Exit(0)


@app.callback()
def main_options(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Warnings and errors only.")] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    setup_logging(verbose, quiet)


app.add_typer(crates.app, name="crates")
app.add_typer(aircraft.app, name="aircraft")
app.command("status")(status.status)
app.command("demo")(status.demo)
licenses_app = typer.Typer(help="The license reference table.", no_args_is_help=True)
licenses_app.command("import")(crates.licenses_import)
app.add_typer(licenses_app, name="licenses")


def main() -> None:
    """Run the app; a usage error (unknown option, a value out of range) is one line and exit
    2 like every other bad input, not a framed usage block."""
    try:
        code = app(standalone_mode=False)
    except Exception as exc:
        message = getattr(exc, "format_message", None)
        exit_code = getattr(exc, "exit_code", None)
        if message is None or not isinstance(exit_code, int):
            raise
        text = message()
        if type(exc).__name__ == "NoArgsIsHelpError":  # the help itself, not an error
            print(text)
        else:
            fail(text, exit_code)
        sys.exit(exit_code)
    except (KeyboardInterrupt, EOFError):
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(code if isinstance(code, int) else 0)
