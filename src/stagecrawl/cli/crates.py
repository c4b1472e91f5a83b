"""`stagecrawl crates …`: the kernel's commands (cli/registry.py), and crates.io's own:
`dbdump` (the whole registry from crates.io's database dump) and `lock --pinned-only`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from stagecrawl.cli.common import Format, emit, run, show
from stagecrawl.cli.registry import (
    Options,
    Param,
    add_lock_command,
    command,
    load,
    pick,
    registry_app,
    section_params,
    settings,
)
from stagecrawl.cli.render import public
from stagecrawl.crates.declaration import DECLARATION as CRATES
from stagecrawl.crates.declaration import DEFAULT_DUMP_URL

if TYPE_CHECKING:  # the pipeline (aiohttp, SQLAlchemy, the engine) is imported where a command
    # runs it: `crates --help` builds every command's signature and must not pay for it
    from stagecrawl.engine.shutdown import GracefulStop

# cargo resolves a tag without a committed Cargo.lock against the index (a mirror's too)
INDEX_URL = [p for p in section_params(CRATES, ()) if p.name == "index_url"]
app = registry_app(CRATES, resolve=INDEX_URL)

PINNED_ONLY = Param(
    "pinned_only",
    Annotated[
        bool,
        typer.Option(
            "--pinned-only",
            help="Only the versions the locks pin, from the lock alone (no index request);"
            " by default every version of each locked crate is registered.",
        ),
    ],
    False,
)
add_lock_command(
    app,
    CRATES,
    [PINNED_ONLY],
    expand=lambda options: not options["pinned_only"],
    lanes=("index",),
)


def dbdump(options: Options) -> None:
    s = settings(CRATES, options)
    load(CRATES)

    async def body(stop: GracefulStop) -> int:
        from stagecrawl.cli.common import progress
        from stagecrawl.crates.dbdump import run_dbdump

        fmt = options["fmt"]
        with progress("loading dump", fmt) as bar:
            report = await run_dbdump(
                s, stop, options["source"], int(options["max_gb"] * 1024**3), bar
            )
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

        emit(fmt, public(report), tables)
        return 0

    run(body, s.grace_period)


command(
    app,
    "dbdump",
    [
        Param(
            "source",
            Annotated[
                str,
                typer.Option(
                    "--source", help="URL or local path of db-dump.tar.gz.", metavar="URL|PATH"
                ),
            ],
            DEFAULT_DUMP_URL,
        ),
        Param(
            "max_gb",
            Annotated[
                float,
                typer.Option(
                    "--max-gb", min=0.001, max=1e6, help="Largest download.", metavar="GB"
                ),
            ],
            8.0,
        ),
        Param(
            "fmt", Annotated[Format, typer.Option("--format", help="table or json.")], Format.table
        ),
        *pick(CRATES, "quiet", "db", "contact"),
    ],
    dbdump,
    "Load the whole registry from crates.io's database dump (no API crawl).",
)

__all__ = ["app"]
