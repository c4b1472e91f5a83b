"""The `stagecrawl` command tree. Each command group's module (and what it imports: the
engine, aiohttp, SQLAlchemy, the pipelines) is imported only when that command runs, so
`stagecrawl --help` and `stagecrawl status` start at once (issue 20; bench/startup.py)."""

from __future__ import annotations

import importlib
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from stagecrawl import __version__
from stagecrawl.cli.common import setup_logging

# name -> (where the command or its group lives, the one-line help `--help` shows without
# importing it, and for a group of one command: that command's name). A test loads each
# entry and runs its `--help` (tests/acceptance/test_startup.py).
LAZY: dict[str, tuple[str, str] | tuple[str, str, str]] = {
    "crates": (
        "stagecrawl.cli.crates:app",
        "The crates.io pipeline: seed, collect, crawl, lock, audit…",
    ),
    "pypi": (
        "stagecrawl.cli.pypi:app",
        "The PyPI pipeline: seed, collect, crawl, lock, audit…",
    ),
    "go": (
        "stagecrawl.cli.go:app",
        "The Go modules pipeline: seed, collect, crawl, lock, audit…",
    ),
    "aircraft": ("stagecrawl.cli.aircraft:app", "Aircraft data from Wikidata (CC0)."),
    "status": (
        "stagecrawl.cli.status:status",
        "The LIST ladder and sources, the seed ladder, table totals and live workers.",
    ),
    "demo": (
        "stagecrawl.cli.status:demo",
        "Try stagecrawl offline: crates.io, PyPI and aircraft on made-up data, on 127.0.0.1.",
    ),
    "audit": (
        "stagecrawl.cli.project:audit",
        "Every lock file under a folder, each against its registry's advisories: one report.",
    ),
    "licenses": (
        "stagecrawl.cli.project:licenses_app",
        "License reference and policy across registries (check DIR, import FILE).",
    ),
    "upgrade": (
        "stagecrawl.cli.project:upgrade",
        "Bring a database an older stagecrawl made to this one's schema, in place.",
    ),
}


def load(name: str) -> Any:
    """The real click command of a lazy entry (its module imported now)."""
    where, help_text, *subcommand = LAZY[name]
    module_name, attribute = where.split(":")
    target = getattr(importlib.import_module(module_name), attribute)
    if subcommand:  # `stagecrawl licenses import`: a group holding the one command
        target, command = (
            typer.Typer(help=help_text, no_args_is_help=True, rich_markup_mode=None),
            target,
        )
        target.command(subcommand[0])(command)
    made: Any
    if isinstance(target, typer.Typer):
        made = typer.main.get_group(target)
    else:
        single = typer.Typer(rich_markup_mode=None)
        single.command(name)(target)
        made = typer.main.get_command(single)
    made.name = name
    return made


class LazyGroup(TyperGroup):
    """A group whose commands are imported when one runs; `--help` lists them from LAZY."""

    def list_commands(self, ctx: Any) -> list[str]:
        return [*self.commands, *(name for name in LAZY if name not in self.commands)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in self.commands or cmd_name not in LAZY:
            return super().get_command(ctx, cmd_name)
        # Listed in a help page: a stand-in with the short help, nothing imported.
        return TyperCommand(cmd_name, help=LAZY[cmd_name][1], short_help=LAZY[cmd_name][1])

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and args[0] in LAZY and args[0] not in self.commands:
            self.commands[args[0]] = load(args[0])
        return super().resolve_command(ctx, args)


app = typer.Typer(
    cls=LazyGroup,
    help="Polite, durable, staged collection of package data.",
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        print(f"stagecrawl {__version__}")
        raise typer.Exit(0)


@app.callback()
def main_options(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet", "-q", help="Warnings and errors only; no report table when all went well."
        ),
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    setup_logging(verbose, quiet)
