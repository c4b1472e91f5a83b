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
from stagecrawl.pypi.status import status as pypi_status
from stagecrawl.queue.lists import PENDING, STATE_NAMES
from stagecrawl.queue.reads import WorkerReads, registry_reads
from stagecrawl.queue.table import utcnow
from stagecrawl.secrets import mask_url, redact_data
from stagecrawl.storage.names import RUST
from stagecrawl.storage.reads import ReadSource, SqliteFile, file_uri, sqlite_file

if TYPE_CHECKING:
    from stagecrawl.engine.shutdown import GracefulStop
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
    return _database_status(open_database(s, read_only=True))


def _database_status(source: ReadSource) -> dict[str, Any]:
    document: dict[str, Any] = {"crates": crates_status(source)}
    pypi = pypi_status(source)
    if pypi is not None:
        document["pypi"] = pypi
    return document


def crates_status(source: ReadSource) -> dict[str, Any]:
    """Asks the owners: the LIST and seed queues for their ladders, the table owners for
    totals, the worker table for who is working."""
    tables = registry_reads(RUST)
    events, seeds = tables.events, tables.seeds
    with source.reads() as r:
        by_state = events.queue.by_state(r)
        by_source = events.sources(r)
        resync = events.queue.count(r, requeue=True)
        reasons = events.queue.on_ladder(r, 20)
        seed_ladder = seeds.on_ladder(r, 50)
        pending_seeds = seeds.count(r, PENDING)
        versions = tables.versions.count(r)
        products = tables.products.count(r)
    return {
        "database": source.safe_url,
        "list": [
            {"processed": p, "meaning": STATE_NAMES.get(p, "?"), "events": n} for p, n in by_state
        ],
        "sources": by_source,
        "resync_asked": resync,
        "ladder": [{"crate": n, "processed": p, "reason": e} for n, p, e in reasons],
        "seed_ladder": [{"crate": n, "state": p, "reason": e} for n, p, e in seed_ladder],
        "seeds_pending": pending_seeds,
        "versions": versions,
        "products": products,
        "workers": live_workers(source),
        **lease_holders(source),
    }


def lease_holders(source: ReadSource) -> dict[str, Any]:
    """Who holds leases on the LIST, how many, since when, how alive (the queue package's
    view), and what waits for a pause, not attempted."""
    now = utcnow()
    events = registry_reads(RUST).events.queue
    with source.reads() as r:
        holders = WorkerReads().holders(r, events)
        waiting = events.waiting(r)
    return {
        "lease_holders": [
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
        ],
        "waiting": None
        if waiting is None
        else {
            "events": waiting.rows,
            "until": f"{waiting.until:%Y-%m-%dT%H:%M:%SZ}",
            "reason": waiting.reason,
        },
    }


def live_workers(source: ReadSource) -> list[dict[str, Any]]:
    """Workers whose heartbeat is within the last minute, their leases and rates."""
    with source.reads() as r:
        rows = WorkerReads().live(r)
        leases = registry_reads(RUST).events.queue.leases(r)
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
    return result


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
    out_console = report_console()  # the report goes to stdout (cli/common.py's emit)
    crates = document.get("crates")
    if crates is not None:
        out = Table(title=f"LIST in {escape(crates['database'])}", title_justify="left")
        out.add_column("PROCESSED", justify="right")
        out.add_column("meaning")
        out.add_column("events", justify="right")
        for row in crates["list"]:
            out.add_row(str(row["processed"]), row["meaning"], str(row["events"]))
        print_table(out)
        if crates["ladder"]:
            ladder = Table(title="retry ladder (next run)", title_justify="left")
            for column in ("crate", "PROCESSED", "last reason"):
                ladder.add_column(column)
            for row in crates["ladder"]:
                ladder.add_row(
                    escape(row["crate"]), str(row["processed"]), escape(row["reason"] or "")
                )
            print_table(ladder)
        rows: dict[str, object] = {"events by SOURCE": ""}
        rows.update({f"  {k}": v for k, v in crates["sources"].items()})
        rows["RESYNC asked"] = crates["resync_asked"]
        rows["seeds pending"] = crates["seeds_pending"]
        for seed in crates["seed_ladder"]:
            rows[f"seed ladder: {seed['crate']}"] = seed["reason"] or ""
        rows["VERSION rows"] = crates["versions"]
        rows["PRODUCT rows"] = crates["products"]
        print_table(summary_table("totals", rows))
        if not crates["workers"]:
            out_console.print("no live workers")
        else:
            table = Table(title="live workers", title_justify="left")
            columns = ("worker", "since", "leased events", "events done", "events/s", "requests")
            for column in (*columns, "shared limit"):
                table.add_column(column)
            for w in crates["workers"]:
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
        if crates.get("lease_holders"):
            held = Table(title="leases held (who, how many, since when)", title_justify="left")
            for column in ("worker", "leased events", "since (UTC)", "heartbeat", "state"):
                held.add_column(column)
            for h in crates["lease_holders"]:
                ago = h["heartbeat_seconds_ago"]
                held.add_row(
                    escape(h["worker"]),
                    str(h["leased_events"]),
                    h["since"] or "",
                    "no worker row" if ago is None else f"{ago} s ago",
                    "dead: reclaimable now" if h["reclaimable"] else "live",
                )
            print_table(held)
        if crates.get("waiting"):
            w = crates["waiting"]
            out_console.print(
                f"{w['events']} event(s) not attempted, waiting: {escape(w['reason'])}"
            )
    pypi = document.get("pypi")
    if pypi is not None:
        rows = {f"LIST {r['processed']} {r['meaning']}": r["events"] for r in pypi["list"]}
        rows.update({f"events from {k}": v for k, v in pypi["sources"].items()})
        for entry in pypi["ladder"]:
            rows[f"ladder: {entry['project']}"] = entry["reason"] or ""
        rows["seeds pending"] = pypi["seeds_pending"]
        for seed in pypi["seed_ladder"]:
            rows[f"seed ladder: {seed['project']}"] = seed["reason"] or ""
        rows["VERSION rows"] = pypi["versions"]
        rows["PRODUCT rows"] = pypi["products"]
        if pypi.get("waiting"):
            w = pypi["waiting"]
            rows["not attempted, waiting"] = f"{w['items']} item(s): {w['reason']}"
        print_table(summary_table("PyPI", rows))
    aircraft = document.get("aircraft")
    if aircraft is not None:
        for name, data in aircraft["passes"].items():
            rows = {f"  {k}": v for k, v in data["states"].items()}
            for entry in data["ladder"]:
                rows[f"×{entry['attempts']} {entry['url']}"] = entry["reason"] or ""
            print_table(summary_table(f"aircraft {name} frontier", rows))


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
