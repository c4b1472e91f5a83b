"""The SQL path at the speed of the database (issue 13): collect and register against a raw
upsert baseline, on SQLite, MariaDB and PostgreSQL, in one run.

    python bench/sql.py [--backends sqlite,mariadb,postgres] [--raw 20000]
                        [--crates 400] [--versions 50] [--register 1000000]
                        [--register-server 200000] [--dump 1000000]
                        [--dump-server 200000] [--no-osv] [--profile sqlite]

Per backend:
- raw: VERSION rows upserted alone, 1,000-row transactions, the statement compiled once and the
  driver's executemany on ready tuples: what the database (and its driver) itself takes.
- raw (Core): the same upserts through SQLAlchemy Core's executemany, as the issue measured.
- collect: `crates collect` through the pipeline API (as the CLI runs it: default concurrency
  and group commit) against the loopback registry (`stagecrawl.testing.origin`, in its own
  process so it does not share our GIL), rates and the API budget lifted; VERSION rows per
  second of collect wall time (seeding runs before, untimed).
- collect / raw, for both baselines: the goal is ≥ 0.5 and ≥ 5,000 rows/s on SQLite and
  MariaDB.
- register: N LIST events through `queue.register` on an empty LIST (1M on SQLite by
  default, goal ≤ 60 s; `--register-server` on the servers, named in the table).

- dbdump: `crates dbdump` of a synthetic dump, the loader in its own process: versions/s and
  its peak RSS (goal on SQLite: ≥ 20,000 versions/s under 150 MB); bench/bulk.py's
  `dbdump_rate`.
- OSV import: the RustSec fixture zip into fresh tables, advisories/s (median of 3);
  bench/bulk.py's `osv_rate` (which also prints the raw executemany baseline of both).

`--profile BACKEND` runs that backend's collect under cProfile and prints what costs.
Measurements are gathered as `rows: list[tuple[str, ...]]` (one per backend and measure), so
other measurements (bench/bulk.py's dbdump and OSV import) can be appended to the same table.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import bulk  # bench/bulk.py beside this file (the script's folder is on sys.path)
from rich.console import Console
from rich.table import Table
from sqlalchemy import text

from stagecrawl.crates.plugin import REGISTRY as CRATES
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.kernel.collecting import CollectSettings
from stagecrawl.kernel.phases import collect as kernel_collect
from stagecrawl.kernel.phases import registry_fetcher, seed
from stagecrawl.queue import SqlQueue
from stagecrawl.queue.events import COLLECTED, NewEvent
from stagecrawl.settings import Settings
from stagecrawl.storage.bulk import upsert_statement
from stagecrawl.storage.db import Database, dumps
from stagecrawl.storage.owners import VersionTable
from stagecrawl.testing.registry import index_line, write_crate

rust = CRATES.tables

BACKENDS = {
    "sqlite": "",  # a file in the run's temporary folder
    "mariadb": "mysql+pymysql://root@127.0.0.1:3306/test_sql",
    "postgres": "postgresql+psycopg://postgres@127.0.0.1:5432/test_sql",
}
LIFTED = 1_000_000.0  # requests per second: no limit in practice
SERDE = {
    "name": "serde",
    "req": "^1",
    "features": [],
    "optional": False,
    "default_features": True,
    "target": None,
    "kind": "normal",
}

# (backend, measure, count, seconds, rows/s, note): the table's rows, as text.
Row = tuple[str, str, str, str, str, str]


def fresh(url: str) -> Database:
    """The backend with stagecrawl's tables, empty."""
    db = Database(url)
    db.metadata.drop_all(db.engine)
    db.dispose()
    return Database(url)


# -- raw upsert baseline ----------------------------------------------------------------------
def version_rows(count: int, now: datetime) -> list[dict[str, Any]]:
    deps = dumps([{**SERDE, "name": "serde"}])
    return [
        {
            "LANGUAGE": "rust",
            "REPOSITORY": "Cargo",
            "PRODUCT_KEY": f"raw-{i // 50:05d}",
            "VERSION": f"{(i % 50) // 10}.{i % 10}.0",
            "NAME": f"raw-{i // 50:05d}",
            "DESCRIPTION": "bench",
            "LICENSE": "MIT",
            "STANDARD_LICENSE": '[{"id":1,"name":"MIT"}]',
            "LICENSE_IDS": "[1]",
            "LICENSE_EXPRESSION": "MIT",
            "LICENSE_AI": None,
            "DEPENDENCIES": deps,
            "FEATURES": '{"std":[]}',
            "CHECKSUM": "0" * 64,
            "YANKED": i % 17 == 0,
            "RUST_VERSION": None,
            "LINKS": None,
            "URL": f"https://crates.io/crates/raw-{i // 50:05d}",
            "SCM": '{"documentation":null,"homepage":null,"repository":null}',
            "DOWNLOADS": i,
            "RELEASE_DATE": now,
            "PROCESSED": COLLECTED,
            "LAST_UPDATED": now,
        }
        for i in range(count)
    ]


def raw_upserts(url: str, count: int) -> float:
    """Seconds for `count` VERSION upserts in 1,000-row transactions, parameters ready."""
    db = fresh(url)
    rows = version_rows(count, datetime(2024, 1, 1, 12, 0, 0))
    dialect = db.engine.dialect
    keys = [c.name for c in rust(db).version.primary_key.columns]
    columns = [k for k in rows[0] if k not in keys]
    statement = upsert_statement(dialect.name, rust(db).version, columns)
    compiled = statement.compile(dialect=dialect, column_keys=list(rows[0]))  # type: ignore[attr-defined]
    names = compiled.positiontup if compiled.positional else list(compiled.binds)
    convert = {}
    for name in names:
        process = compiled.binds[name].type.dialect_impl(dialect).bind_processor(dialect)
        if process is not None:
            convert[name] = process
    prepared: list[Any] = []
    for row in rows:
        values = {n: (convert[n](row[n]) if n in convert else row[n]) for n in names}
        prepared.append(tuple(values[n] for n in names) if compiled.positional else values)
    sql = compiled.string
    raw = db.engine.raw_connection()
    try:
        started = time.perf_counter()
        for start in range(0, count, 1000):
            cursor = raw.cursor()
            if db.is_sqlite:
                cursor.execute("BEGIN IMMEDIATE")
            cursor.executemany(sql, prepared[start : start + 1000])
            raw.commit()
            cursor.close()
        seconds = time.perf_counter() - started
    finally:
        raw.close()
        db.dispose()
    return seconds


def raw_core_upserts(url: str, count: int) -> float:
    """The same upserts as SQLAlchemy Core executes them (`conn.execute(statement, rows)`,
    parameters processed per row): how the issue measured its baseline."""
    db = fresh(url)
    rows = version_rows(count, datetime(2024, 1, 1, 12, 0, 0))
    keys = [c.name for c in rust(db).version.primary_key.columns]
    columns = [k for k in rows[0] if k not in keys]
    statement = upsert_statement(db.engine.dialect.name, rust(db).version, columns)
    try:
        started = time.perf_counter()
        for start in range(0, count, 1000):
            with db.engine.begin() as conn:
                conn.execute(statement, rows[start : start + 1000])
        seconds = time.perf_counter() - started
    finally:
        db.dispose()
    return seconds


# -- collect against the loopback registry ----------------------------------------------------
def build_registry(root: Path, crates: int, versions: int) -> list[str]:
    names = [f"sql-bench-{i:05d}" for i in range(crates)]
    for name in names:
        numbers = [f"{v // 10}.{v % 10}.0" for v in range(versions)]
        lines = [
            index_line(name, vers, [SERDE], features={"std": []}, yanked=v % 17 == 0)
            for v, vers in enumerate(numbers)
        ]
        api = {
            "crate": {"name": name, "description": "bench", "downloads": 1},
            "versions": [
                {"num": vers, "license": "MIT", "created_at": "2024-01-01T00:00:00Z"}
                for vers in numbers
            ],
            "keywords": [],
            "categories": [],
        }
        write_crate(root, name, lines, api)
    return names


class Origin:
    """The loopback registry in its own process (serves root/index and root/api)."""

    def __init__(self, root: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stagecrawl.testing.origin", "--root", str(root)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()


async def _collect(url: str, names: list[str], origin: str) -> tuple[int, float]:
    flags = {"crates.index_url": origin + "/index/", "crates.api_url": origin + "/api/",
             "crates.api_rate": LIFTED, "crates.index_rate": LIFTED,
             "crates.api_budget": "none"}  # fmt: skip
    s = Settings.resolve(flags, {})
    db = fresh(url)
    stop = GracefulStop()
    async with registry_fetcher(CRATES, s) as fetcher:
        client = CRATES.client(fetcher, s)
        await seed(db, CRATES, client, names, stop)
        started = time.perf_counter()
        report = await kernel_collect(db, CRATES, client, CollectSettings(), stop)
        seconds = time.perf_counter() - started
    db.dispose()
    assert report.collect is not None
    return report.collect.outcomes[COLLECTED], seconds


class ThreadProfile:
    """cProfile sees only the thread it runs in; the database work runs in worker threads
    (asyncio.to_thread). Each wrapped call runs under one shared profiler, one at a time, and
    its wall time is summed by name."""

    def __init__(self) -> None:
        self.profiler = cProfile.Profile()
        self.lock = threading.Lock()
        self.wall: dict[str, list[float]] = {}

    def wrap(self, module: Any, name: str) -> None:
        original = getattr(module, name)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with self.lock:
                started = time.perf_counter()
                self.profiler.enable()
                try:
                    return original(*args, **kwargs)
                finally:
                    self.profiler.disable()
                    spent = self.wall.setdefault(name, [0, 0.0])
                    spent[0] += 1
                    spent[1] += time.perf_counter() - started

        setattr(module, name, wrapped)


def collect(url: str, names: list[str], origin: str, profile: bool) -> tuple[int, float]:
    if not profile:
        return asyncio.run(_collect(url, names, origin))
    threads = ThreadProfile()
    for module, name in (
        (SqlQueue, "complete"),
        (SqlQueue, "claim"),
        (VersionTable, "existing"),
        (SqlQueue, "next_lease_expiry"),
        (SqlQueue, "renew"),
        (SqlQueue, "pending_count"),
    ):
        threads.wrap(module, name)
    main = cProfile.Profile()
    result = main.runcall(asyncio.run, _collect(url, names, origin))
    out = io.StringIO()
    print(f"collect {result[1]:.2f} s wall; database calls (wall s, serialised):", file=out)
    for name, (calls, spent) in sorted(threads.wall.items(), key=lambda kv: -kv[1][1]):
        print(f"  {name:20} {calls:6.0f} calls {spent:7.3f} s", file=out)
    print("-- database threads --", file=out)
    pstats.Stats(threads.profiler, stream=out).sort_stats("tottime").print_stats(25)
    print("-- event loop thread --", file=out)
    pstats.Stats(main, stream=out).sort_stats("tottime").print_stats(25)
    print(out.getvalue(), file=sys.stderr)
    return result


# -- register --------------------------------------------------------------------------------
def register_events(url: str, count: int) -> float:
    events = [
        NewEvent(f"reg-{i // 50:06d}", f"{(i % 50) // 10}.{i % 10}.0", "seed", yanked=i % 17 == 0)
        for i in range(count)
    ]
    db = fresh(url)
    started = time.perf_counter()
    counts = CRATES.event_list(db).register(events)
    seconds = time.perf_counter() - started
    assert counts.new == count, counts
    db.dispose()
    return seconds


def server_reachable(url: str) -> bool:
    try:
        db = Database(url, create=False)
        with db.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        db.dispose()
        return True
    except Exception as exc:
        print(f"skipping {url}: {str(exc).splitlines()[0]}", file=sys.stderr)
        return False


def measure(args: argparse.Namespace, tmp: Path, say: Callable[[str], None]) -> list[Row]:
    rows: list[Row] = []
    names = build_registry(tmp / "registry", args.crates, args.versions)
    origin = Origin(tmp / "registry")
    try:
        for backend in args.backends.split(","):
            url = BACKENDS[backend] or f"sqlite:///{tmp / 'bench.db'}"
            if backend != "sqlite" and not server_reachable(url):
                rows.append((backend, "skipped", "", "", "", "server not reachable"))
                continue
            say(f"{backend}: raw upserts")
            seconds = raw_upserts(url, args.raw)
            raw_rate = args.raw / seconds
            rows.append(
                (backend, "raw upsert", f"{args.raw:,}", f"{seconds:.2f}", f"{raw_rate:,.0f}",
                 "1,000-row transactions, driver executemany")
            )  # fmt: skip
            seconds = raw_core_upserts(url, args.raw)
            core_rate = args.raw / seconds
            rows.append(
                (backend, "raw upsert (Core)", f"{args.raw:,}", f"{seconds:.2f}",
                 f"{core_rate:,.0f}", "the same through conn.execute(statement, rows)")
            )  # fmt: skip
            say(f"{backend}: collect")
            done, seconds = collect(url, names, origin.url, args.profile == backend)
            rate = done / seconds
            rows.append(
                (backend, "collect", f"{done:,}", f"{seconds:.2f}", f"{rate:,.0f}",
                 f"{rate / raw_rate:.2f} × raw, {rate / core_rate:.2f} × raw (Core);"
                 f" {args.crates} crates × {args.versions} versions")
            )  # fmt: skip
            count = args.register if backend == "sqlite" else args.register_server
            if count:
                say(f"{backend}: register {count:,}")
                seconds = register_events(url, count)
                rows.append(
                    (backend, "register", f"{count:,}", f"{seconds:.2f}",
                     f"{count / seconds:,.0f}",
                     "LIST events, empty LIST" + ("" if backend == "sqlite" else
                     " (fewer on the servers: --register-server)"))
                )  # fmt: skip
            count = args.dump if backend == "sqlite" else args.dump_server
            if count:
                say(f"{backend}: dbdump {count:,}")
                rate, rss = bulk.dbdump_rate(url, count)
                rows.append(
                    (backend, "dbdump", f"{count:,}", f"{count / rate:.2f}", f"{rate:,.0f}",
                     f"versions; loader peak RSS {rss:.0f} MB")
                )  # fmt: skip
            if args.osv:
                say(f"{backend}: OSV import")
                rate = bulk.osv_rate(url)
                rows.append(
                    (backend, "OSV import", "", "", f"{rate:,.0f}",
                     "advisories/s, RustSec fixture zip, median of 3")
                )  # fmt: skip
    finally:
        origin.close()
    return rows


def table(rows: list[Row], title: str) -> Table:
    out = Table(title=title)
    for column in ("backend", "measure", "rows", "seconds", "rows/s", "note"):
        out.add_column(column, justify="left" if column in ("backend", "note") else "right")
    for row in rows:
        out.add_row(*row)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backends", default="sqlite,mariadb,postgres")
    parser.add_argument("--raw", type=int, default=20_000, help="raw upsert rows")
    parser.add_argument("--crates", type=int, default=400)
    parser.add_argument("--versions", type=int, default=50)
    parser.add_argument("--register", type=int, default=1_000_000, help="events on SQLite")
    parser.add_argument("--register-server", type=int, default=200_000, help="on the servers")
    parser.add_argument("--dump", type=int, default=1_000_000, help="dbdump versions, SQLite")
    parser.add_argument("--dump-server", type=int, default=200_000, help="on the servers")
    parser.add_argument("--no-osv", dest="osv", action="store_false", help="skip OSV import")
    parser.add_argument("--profile", default="", help="cProfile this backend's collect")
    args = parser.parse_args()
    console = Console(stderr=True)
    with tempfile.TemporaryDirectory() as tmp:
        rows = measure(args, Path(tmp), lambda m: console.log(m))
    Console(width=150).print(table(rows, "SQL path: collect, register, dbdump, OSV import"))
    print(
        "goals: collect ≥ 0.5 × raw and ≥ 5,000 rows/s on SQLite and MariaDB; "
        "1M register ≤ 60 s on SQLite; dbdump ≥ 20,000 versions/s and RSS < 150 MB on SQLite",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
