"""`stagecrawl status` (read-only: never creates or changes anything) and `stagecrawl demo`."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from stagecrawl.cli.common import (
    Db,
    Format,
    FormatOption,
    console,
    emit,
    finish,
    guarded,
    print_table,
    report_console,
    run,
    settings_from,
)
from stagecrawl.components import open_database
from stagecrawl.engine.progress import summary_table
from stagecrawl.errors import StorageError
from stagecrawl.pauses import Waiting
from stagecrawl.queue.lists import PENDING, STATE_NAMES
from stagecrawl.queue.reads import WorkerReads, registry_reads
from stagecrawl.queue.table import utcnow
from stagecrawl.secrets import mask_url, redact_data
from stagecrawl.storage.names import SCHEMA, behind_text
from stagecrawl.storage.reads import ReadSource, SqliteFile, file_uri, sqlite_file

if TYPE_CHECKING:
    from stagecrawl.engine.shutdown import GracefulStop
    from stagecrawl.kernel.declaration import RegistryDecl
    from stagecrawl.settings import Settings


def database_status(s: Settings) -> dict[str, Any]:
    """The database's part of `status`, read-only. A plain SQLite file is read with the
    standard library (no SQLAlchemy to load: issue 20's start-up budget); any other URL, or a
    file those reads fail on (a database made by an older stagecrawl, not stagecrawl's),
    through `Database`, which names the problem as every command does."""
    path = sqlite_file(s.db)
    if path is not None:
        try:
            return _database_status(SqliteFile(s.db, path))
        except sqlite3.Error as exc:
            if "locked" in str(exc):  # its busy timeout is waited out: no second wait below
                raise StorageError(f"cannot read {mask_url(s.db)}: {exc}") from None
            # told below, as by every command (an older table, a file not stagecrawl's)
    from stagecrawl.registries import declare_tables

    declare_tables()  # the Database path knows every registry's tables by their declarations
    return _database_status(open_database(s, read_only=True))


def _database_status(source: ReadSource) -> dict[str, Any]:
    """Every declared registry's part, those whose tables exist (a database made before a
    registry was added has none of its tables: nothing to show for it)."""
    from stagecrawl.registries import DECLARATIONS

    document: dict[str, Any] = {}
    with source.reads() as r:
        present = {name.upper() for name in r.table_names()}
        stored: dict[str, int] = {}
        if SCHEMA.upper() in present:
            sql = f"SELECT {r.q('PART')}, {r.q('VERSION')} FROM {r.q(SCHEMA)}"
            stored = {str(p): int(v) for p, v in r.rows(sql)}
    behind = [
        f"{d.code} schema {stored.get(d.code, 0)}, now {d.names.schema_version}"
        for d in DECLARATIONS
        if d.names.list.upper() in present and stored.get(d.code, 0) < d.names.schema_version
    ]
    if behind:
        raise StorageError(behind_text(source.safe_url, behind))
    for decl in DECLARATIONS:
        if decl.names.list.upper() in present:
            document[decl.cli] = registry_status(source, decl)
    if not document:
        raise StorageError(f"no stagecrawl tables in {source.safe_url}: nothing collected yet")
    return document


def registry_status(source: ReadSource, decl: RegistryDecl) -> dict[str, Any]:
    """Asks the owners: the LIST and seed queues for their ladders, the table owners for
    totals, the worker table for who is working."""
    tables = registry_reads(decl.names)
    events, seeds = tables.events, tables.seeds
    unit = decl.words.unit
    with source.reads() as r:
        by_state = events.queue.by_state(r)
        by_source = events.sources(r)
        resync = events.queue.count(r, requeue=True)
        reasons = events.queue.on_ladder(r, 20)
        seed_ladder = seeds.on_ladder(r, 50)
        pending_seeds = seeds.count(r, PENDING)
        versions = tables.versions.count(r)
        products = tables.products.count(r)
        # not attempted (a host's pause): seeds and events together, as the runs report it
        waiting = Waiting.merge([seeds.waiting(r), events.queue.waiting(r)])
    return {
        "database": source.safe_url,
        "list": [
            {"processed": p, "meaning": STATE_NAMES.get(p, "?"), "events": n} for p, n in by_state
        ],
        "sources": by_source,
        "resync_asked": resync,
        "ladder": [{unit: n, "processed": p, "reason": e} for n, p, e in reasons],
        "seed_ladder": [{unit: n, "state": p, "reason": e} for n, p, e in seed_ladder],
        "seeds_pending": pending_seeds,
        "versions": versions,
        "products": products,
        **workers(source, decl),
        "lease_holders": lease_holders(source, decl),
        "waiting": None if waiting is None else waiting.as_json(),
    }


def lease_holders(source: ReadSource, decl: RegistryDecl) -> list[dict[str, Any]]:
    """Who holds leases on the LIST, how many, since when, how alive (the queue package's
    view)."""
    now = utcnow()
    events = registry_reads(decl.names).events.queue
    with source.reads() as r:
        holders = WorkerReads().holders(r, events)
    return [
        {
            "worker": h.worker,
            "leased_events": h.rows,
            "since": None if h.since is None else f"{h.since:%Y-%m-%dT%H:%M:%SZ}",
            "heartbeat_seconds_ago": None
            if h.heartbeat is None
            else max(0, int((now - h.heartbeat).total_seconds())),
            "reclaimable": h.dead(now),
            "note": h.describe(now),
        }
        for h in holders
    ]


def workers(source: ReadSource, decl: RegistryDecl) -> dict[str, Any]:
    """Workers within their own heartbeat bound (STALE_AFTER), their leases on this
    registry's LIST and rates; and those silent past it: dead (a kill -9, a lost machine),
    until the next run clears them."""
    now = utcnow()
    with source.reads() as r:
        reads = WorkerReads()
        rows = reads.live(r, now)
        silent = reads.silent(r, now)
        leases = registry_reads(decl.names).events.queue.leases(r)
    result = []
    for row in rows:
        seconds = max(1.0, (row.heartbeat - row.started).total_seconds())
        result.append(
            {
                "worker": row.worker,
                "since": str(row.started),
                "leased_events": leases.get(row.worker, 0),
                "events_done": row.events_done,
                "events_per_second": round(row.events_done / seconds, 2),
                "requests": row.requests,
                "shared_limit": row.shared_limit,
            }
        )
    dead = [
        {
            "worker": row.worker,
            "since": str(row.started),
            "heartbeat": f"{row.heartbeat:%Y-%m-%dT%H:%M:%SZ}",
            "dead_since": f"{row.dead_at:%Y-%m-%dT%H:%M:%SZ}",
            "leased_events": leases.get(row.worker, 0),
        }
        for row in silent
    ]
    return {"workers": result, "dead_workers": dead}


def aircraft_status(out: Path) -> dict[str, Any]:
    """The aircraft frontiers' states and retry ladders, read without taking their locks."""
    # the frontier's module (asyncio, its thread pool) only when an aircraft crawl is shown
    from stagecrawl.engine.frontier import STATE_NAMES as FRONTIER_STATES

    folder = out / ".stagecrawl"
    if not folder.is_dir():
        raise StorageError(f"no aircraft crawl in {out}: nothing collected yet (or a wrong path)")
    passes: dict[str, Any] = {}
    for path in sorted(folder.glob("*.frontier.sqlite")):
        name = path.name.split(".", 1)[0]
        try:
            conn = sqlite3.connect(f"{file_uri(path.resolve())}?mode=ro", uri=True)
            try:
                counts = dict(
                    conn.execute("SELECT state, COUNT(*) FROM requests GROUP BY state").fetchall()
                )
                columns = {r[1] for r in conn.execute("PRAGMA table_info(requests)")}
                attempts = "attempts" if "attempts" in columns else "0"
                ladder = conn.execute(
                    f"SELECT url, state, {attempts}, error FROM requests WHERE state IN (3, 4)"
                    " ORDER BY seq LIMIT 20"
                ).fetchall()
            finally:
                conn.close()
        except sqlite3.Error as exc:
            raise StorageError(f"cannot read {path}: {exc}") from None
        passes[name] = {
            "states": {FRONTIER_STATES.get(int(k), str(k)): int(v) for k, v in counts.items()},
            "ladder": [
                {"url": u, "state": FRONTIER_STATES.get(int(s), str(s)), "attempts": a, "reason": e}
                for u, s, a, e in ladder
            ],
        }
    return {"folder": str(out), "passes": passes}


def status(
    fmt: FormatOption = Format.table,
    db: Db = None,
    aircraft: Annotated[
        Path | None, typer.Option("--aircraft", help="Also show an aircraft output folder.")
    ] = None,
) -> None:
    """The LIST ladder and sources, the seed ladder, table totals and live workers (and an
    aircraft crawl's retry ladder with --aircraft DIR). Read-only: never creates anything."""
    options = locals()
    s = guarded(lambda: settings_from(options))

    def body() -> int:
        document: dict[str, Any] = {}
        if aircraft is None or s.sources["db"] != "default":
            document.update(database_status(s))
        if aircraft is not None:
            document["aircraft"] = aircraft_status(aircraft)
        document = redact_data(document)  # a stored reason may quote a secret
        emit(fmt, document, lambda: _tables(document))
        return 0

    raise finish(guarded(body))


def _tables(document: dict[str, Any]) -> None:
    from stagecrawl.registries import BY_CLI

    for cli, decl in BY_CLI.items():
        part = document.get(cli)
        if part is not None:
            _registry_tables(decl, part)
    aircraft = document.get("aircraft")
    if aircraft is not None:
        for name, data in aircraft["passes"].items():
            rows = {f"  {k}": v for k, v in data["states"].items()}
            for entry in data["ladder"]:
                rows[f"×{entry['attempts']} {entry['url']}"] = entry["reason"] or ""
            print_table(summary_table(f"aircraft {name} frontier", rows))


def _registry_tables(decl: RegistryDecl, part: dict[str, Any]) -> None:
    out_console = report_console()  # the report goes to stdout (cli/common.py's emit)
    unit, title = decl.words.unit, decl.title
    out = Table(title=f"{title} LIST in {escape(part['database'])}", title_justify="left")
    out.add_column("PROCESSED", justify="right")
    out.add_column("meaning")
    out.add_column("events", justify="right")
    for row in part["list"]:
        out.add_row(str(row["processed"]), row["meaning"], str(row["events"]))
    print_table(out)
    if part["ladder"]:
        ladder = Table(title=f"{title} retry ladder (next run)", title_justify="left")
        for column in (unit, "PROCESSED", "last reason"):
            ladder.add_column(column)
        for row in part["ladder"]:
            ladder.add_row(escape(row[unit]), str(row["processed"]), escape(row["reason"] or ""))
        print_table(ladder)
    rows: dict[str, object] = {"events by SOURCE": ""}
    rows.update({f"  {k}": v for k, v in part["sources"].items()})
    rows["RESYNC asked"] = part["resync_asked"]
    rows["seeds pending"] = part["seeds_pending"]
    for seed in part["seed_ladder"]:
        rows[f"seed ladder: {seed[unit]}"] = seed["reason"] or ""
    rows["VERSION rows"] = part["versions"]
    rows["PRODUCT rows"] = part["products"]
    print_table(summary_table(f"{title} totals", rows))
    if not part["workers"]:
        out_console.print("no live workers")
    else:
        table = Table(title="live workers", title_justify="left")
        columns = ("worker", "since", "leased events", "events done", "events/s", "requests")
        for column in (*columns, "shared limit"):
            table.add_column(column)
        for w in part["workers"]:
            table.add_row(
                escape(w["worker"]),
                w["since"],
                str(w["leased_events"]),
                str(w["events_done"]),
                f"{w['events_per_second']:.1f}",
                str(w["requests"]),
                "redis" if w["shared_limit"] else "own bucket",
            )
        print_table(table)
    if part.get("dead_workers"):
        dead = Table(
            title="dead workers (silent past their heartbeat bound; the next run clears them)",
            title_justify="left",
        )
        for column in ("worker", "since", "last heartbeat (UTC)", "leased events"):
            dead.add_column(column)
        for w in part["dead_workers"]:
            dead.add_row(escape(w["worker"]), w["since"], w["heartbeat"], str(w["leased_events"]))
        print_table(dead)
    if part.get("lease_holders"):
        held = Table(title="leases held (who, how many, since when)", title_justify="left")
        for column in ("worker", "leased events", "since (UTC)", "heartbeat", "state"):
            held.add_column(column)
        for h in part["lease_holders"]:
            ago = h["heartbeat_seconds_ago"]
            held.add_row(
                escape(h["worker"]),
                str(h["leased_events"]),
                h["since"] or "",
                "no worker row" if ago is None else f"{ago} s ago",
                "dead: reclaimable now" if h["reclaimable"] else "live",
            )
        print_table(held)
    if part.get("waiting"):
        w = part["waiting"]
        out_console.print(
            f"{w['items']} seed(s) and event(s) not attempted, waiting: {escape(w['reason'])}"
        )


def demo(
    out: Annotated[
        Path,
        typer.Option("--out", help="Where the demo writes: a new or empty folder, or its own."),
    ] = Path("stagecrawl-demo"),
) -> None:
    """Try stagecrawl offline: crates.io and PyPI (made-up packages and advisories) and
    aircraft against bundled 127.0.0.1 mirrors. --out must be new, empty or an earlier demo's."""
    from stagecrawl.cli.common import state
    from stagecrawl.demo import run_demo

    async def body(stop: GracefulStop) -> int:
        story = report_console()  # the demo's report: stdout (none with -q)
        story.quiet = state["quiet"]
        return await run_demo(out, story, console, state["quiet"], stop)

    run(body)
