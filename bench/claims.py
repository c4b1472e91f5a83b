"""The durable queue's cost as the LIST fills and is processed (issue 20), on SQLite, MariaDB
and PostgreSQL in one run.

    python bench/claims.py [--backends sqlite,mariadb,postgres] [--events 1000000]
                           [--events-server 200000] [--chunks 5000,50000]
                           [--groups 32] [--runs 5]

Per backend, on an empty LIST:
- register: N events (50 versions per package, names in order) through
  `EventList.register`, one transaction per chunk, each timed: the median chunk of the first
  and of the last tenth of the fill, and their ratio (goal: ≈ 1, the cost of a chunk does not
  grow with the table); once per `--chunks` size (default: the former 5,000 and
  REGISTER_CHUNK), each into an empty LIST;
- first claim at 0 % processed (on the last fill): `SqlQueue.claim` of `--groups` packages
  (the run's default read-ahead) by a new worker, without `after` (the first claim of a
  run), then released; median of `--runs` fresh workers;
- first claim at 99 % processed: the same once the first 99 % of the packages (in name order,
  so the pending ones are the last) are finished (PROCESSED 1); goal: ≤ 1.5 × the claim at
  0 %;
- later claim at 99 %: the same with `after` (a worker's later claims), for comparison.

The servers get `--events-server` events (fewer: a fill of 1M takes minutes there). URLs:
STAGECRAWL_TEST_MARIADB_URL and STAGECRAWL_TEST_POSTGRES_URL, else the local test_sql
databases. After the 99 % update the servers' statistics are refreshed (PostgreSQL VACUUM
ANALYZE, MariaDB ANALYZE TABLE), as their background maintenance would; SQLite is left as
stagecrawl leaves it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table
from sqlalchemy import text, update

from stagecrawl.crates.plugin import REGISTRY as CRATES
from stagecrawl.queue import events as queue_events
from stagecrawl.queue.events import COLLECTED, NewEvent
from stagecrawl.storage.db import Database

rust = CRATES.tables
event_list = CRATES.event_list

BACKENDS = {
    "sqlite": "",  # a file in the run's temporary folder
    "mariadb": os.environ.get(
        "STAGECRAWL_TEST_MARIADB_URL", "mysql+pymysql://root@127.0.0.1:3306/test_sql"
    ),
    "postgres": os.environ.get(
        "STAGECRAWL_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test_sql"
    ),
}
VERSIONS = 50  # events per package

Row = tuple[str, ...]


def fresh(url: str) -> Database:
    """The backend with stagecrawl's tables, empty."""
    db = Database(url)
    db.metadata.drop_all(db.engine)
    db.dispose()
    return Database(url)


def package(i: int) -> str:
    return f"clm-{i // VERSIONS:06d}"


def fill(db: Database, count: int, chunk: int, say: Callable[[str], None]) -> list[float]:
    """Register `count` events, `chunk` per transaction (one `register` call each); seconds
    per chunk."""
    queue_events.REGISTER_CHUNK = chunk  # register's own chunking: one transaction per call
    events = event_list(db)
    seconds: list[float] = []
    for start in range(0, count, chunk):
        batch = [
            NewEvent(package(i), f"{(i % VERSIONS) // 10}.{i % 10}.0", "seed")
            for i in range(start, min(count, start + chunk))
        ]
        began = time.perf_counter()
        counts = events.register(batch)
        seconds.append(time.perf_counter() - began)
        assert counts.new == len(batch), counts
        if (start // chunk) % max(1, count // chunk // 5) == 0:
            say(f"  {start + len(batch):,} events, last chunk {seconds[-1] * 1000:.0f} ms")
    return seconds


def first_claims(db: Database, groups: int, runs: int, after: str | None = None) -> float:
    """Median seconds of a claim of `groups` packages by `runs` new workers (each released)."""
    queue = event_list(db).queue
    times: list[float] = []
    for run in range(runs):
        worker = f"bench-{run}-{time.monotonic_ns()}"
        began = time.perf_counter()
        rows = queue.claim(worker, groups, 300.0, after=after)
        times.append(time.perf_counter() - began)
        assert rows, "nothing claimed"
        queue.release(worker, [r.id for r in rows])
    return statistics.median(times)


def finish_most(db: Database, count: int, share: float) -> str:
    """Mark the first `share` of the packages collected; the first pending package's name."""
    packages = (count + VERSIONS - 1) // VERSIONS
    cutoff = package(int(packages * share) * VERSIONS)
    table = rust(db).list
    with db.engine.begin() as conn:
        conn.execute(update(table).where(table.c.CRATE_NAME < cutoff).values(PROCESSED=COLLECTED))
    if db.dialect == "postgresql":
        with db.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT")
            conn.execute(text(f'VACUUM ANALYZE "{table.name}"'))
    elif db.dialect in ("mysql", "mariadb"):
        with db.engine.connect() as conn:
            conn.execute(text(f"ANALYZE TABLE `{table.name}`")).all()
    return cutoff


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


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f}"


def measure(
    backend: str, url: str, args: argparse.Namespace, say: Callable[[str], None]
) -> list[Row]:
    count = args.events if backend == "sqlite" else args.events_server
    n = f"{count:,}"
    rows: list[Row] = []
    chunks = [int(c) for c in args.chunks.split(",")]
    baseline = 0.0
    for chunk in chunks:
        db = fresh(url)
        say(f"{backend}: register {count:,} events, {chunk:,} per chunk")
        try:
            seconds = fill(db, count, chunk, say)
        finally:
            if chunk != chunks[-1]:
                db.dispose()
        tenth = max(1, len(seconds) // 10)
        early, late = statistics.median(seconds[:tenth]), statistics.median(seconds[-tenth:])
        rate = count / sum(seconds)
        baseline = baseline or rate
        rows += [
            (backend, f"register {chunk:,}/chunk: first tenth", n, ms(early), "1.00",
             f"{rate:,.0f} events/s in all ({rate / baseline:.2f} × the first chunk size)"),
            (backend, f"register {chunk:,}/chunk: last tenth", n, ms(late),
             f"{late / early:.2f}", "× the first tenth's chunk (goal ≈ 1)"),
        ]  # fmt: skip
    try:  # the claims, on the last fill
        say(f"{backend}: claims at 0 %")
        at_zero = first_claims(db, args.groups, args.runs)
        say(f"{backend}: finishing 99 %")
        cutoff = finish_most(db, count, 0.99)
        say(f"{backend}: claims at 99 %")
        at_99 = first_claims(db, args.groups, args.runs)
        later = first_claims(db, args.groups, args.runs, after=cutoff)
    finally:
        db.dispose()
    return [
        *rows,
        (backend, "first claim at 0 %", n, ms(at_zero), "1.00",
         f"{args.groups} packages, new worker, no `after`; median of {args.runs}"),
        (backend, "first claim at 99 %", n, ms(at_99), f"{at_99 / at_zero:.2f}",
         "× the claim at 0 % (goal ≤ 1.5)"),
        (backend, "later claim at 99 %", n, ms(later), f"{later / at_zero:.2f}",
         "with `after` (a worker's later claims)"),
    ]  # fmt: skip


def table(rows: list[Row], title: str) -> Table:
    out = Table(title=title)
    for column in ("backend", "measure", "events", "ms", "ratio", "note"):
        out.add_column(
            column, justify="left" if column in ("backend", "measure", "note") else "right"
        )
    for row in rows:
        out.add_row(*row)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backends", default="sqlite,mariadb,postgres")
    parser.add_argument("--events", type=int, default=1_000_000, help="LIST events on SQLite")
    parser.add_argument("--events-server", type=int, default=200_000, help="on the servers")
    parser.add_argument(
        "--chunks",
        default=f"5000,{queue_events.REGISTER_CHUNK}",
        help="events per register transaction, one fill each (the claims use the last)",
    )
    parser.add_argument("--groups", type=int, default=32, help="packages per claim")
    parser.add_argument("--runs", type=int, default=5, help="claims per measure (median)")
    args = parser.parse_args()
    console = Console(stderr=True)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        for backend in args.backends.split(","):
            url = BACKENDS[backend] or f"sqlite:///{Path(tmp) / 'claims.db'}"
            if backend != "sqlite" and not server_reachable(url):
                rows.append((backend, "skipped", "", "", "", "server not reachable"))
                continue
            rows += measure(backend, url, args, lambda m: console.log(m))
    Console(width=160).print(table(rows, "LIST queue: register per chunk, first claim as it fills"))


if __name__ == "__main__":
    main()
