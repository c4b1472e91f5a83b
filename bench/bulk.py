"""Bulk loaders at the speed of the database: `crates dbdump` and the OSV import (issue 13).

    python bench/bulk.py [--versions 1000000] [--osv-runs 3] [--before-src DIR]
                         [--mariadb URL] [--postgres URL] [--skip-mariadb] [--skip-postgres]

For SQLite, MariaDB and PostgreSQL, in one run:
- `crates dbdump` of a synthetic dump (50 versions a crate) into a fresh database, run as a
  subprocess so its peak RSS is its own: versions/s and peak RSS MB; with `--before-src` (a
  `src` folder of an older stagecrawl) the same load by that code, for a before/after;
- the baseline: the same VERSION rows, read back, sent by a plain driver executemany (upsert,
  2,000 rows a call, 20,000 a transaction) into a scratch copy of the table — what the
  database itself costs; the loader's ratio to it;
- the OSV import of the RustSec fixture zip (median of 3, each into fresh VULN tables, with
  PRODUCT and 20 collected VERSION rows for every crate the advisories name, so V1 and HIT are
  filled): advisories/s, and the same rows (RAW, V1, HIT) by plain executemany as baseline.

`dbdump_rate` and `osv_rate` are importable (no side effects at import). They drop and
recreate stagecrawl's tables in the database they are given: give them a bench database.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from sqlalchemy import MetaData, select
from sqlalchemy import Table as SqlTable
from sqlalchemy.engine import Connection

from stagecrawl.crates.plugin import REGISTRY as CRATES
from stagecrawl.kernel.sca import store_records
from stagecrawl.sca.osv_import import ImportReport
from stagecrawl.sca.osv_read import read_advisories
from stagecrawl.storage.db import Database

rust = CRATES.tables  # the crates registry's tables

SHARED = Path(os.environ.get("STAGECRAWL_TEST_SHARED", Path(__file__).parents[2] / "shared"))
OSV_ZIP = SHARED / "fixtures" / "osv" / "rustsec-osv-all.zip"
MARIADB = "mysql+pymysql://root@127.0.0.1:3306/test"
POSTGRES = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
VERSIONS_PER_CRATE = 50
COLLECTED_PER_CRATE = 20
WRITE_BATCH, COMMIT_ROWS = 2000, 20_000
SRC = Path(__file__).resolve().parents[1] / "src"


def fresh(url: str) -> Database:
    """`url` with stagecrawl's tables dropped and created again (a SQLite file is removed)."""
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        return Database(url)
    db = Database(url)
    db.metadata.drop_all(db.engine)
    db.create_all()
    return db


@lru_cache(maxsize=2)
def synthetic_dump(versions: int) -> Path:
    """A synthetic crates.io dump of `versions` versions, built once per process."""
    from stagecrawl.testing.dbdump import build_dump

    folder = Path(tempfile.mkdtemp(prefix="stagecrawl-bench-bulk-"))
    atexit.register(shutil.rmtree, folder, True)
    path = folder / "db-dump.tar.gz"
    build_dump(path, max(1, versions // VERSIONS_PER_CRATE), VERSIONS_PER_CRATE)
    return path


# The loader's own peak RSS: VmHWM of its own address space, written at exit. (A child's
# ru_maxrss from wait4 counts the parent's image it was forked from, which is large after a
# 1M-event register in the same bench process.)
_PEAK_WRAPPER = """
import atexit, runpy, sys
out = sys.argv.pop(1)
def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            open(out, "w").write(line.split()[1])
atexit.register(peak)
sys.argv[0] = "stagecrawl"
runpy.run_module("stagecrawl", run_name="__main__")
"""


def dbdump_rate(url: str, versions: int, src: Path | None = None) -> tuple[float, float]:
    """(versions/s, peak RSS MB) of `stagecrawl crates dbdump` loading a synthetic dump of
    `versions` versions into a fresh database at `url`, run as a subprocess (wall time,
    interpreter start included). `src`: run the loader from another `src` folder."""
    dump = synthetic_dump(versions)
    fresh(url).dispose()
    env = {**os.environ, "PYTHONPATH": str(src or SRC)}
    with tempfile.TemporaryDirectory() as scratch:
        peak_file = Path(scratch) / "peak"
        started = time.perf_counter()
        loader = subprocess.run(
            [
                *(sys.executable, "-c", _PEAK_WRAPPER, str(peak_file), "-q", "crates"),
                *("dbdump", "--source", str(dump), "--db", url),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        wall = time.perf_counter() - started
        if loader.returncode != 0:
            raise RuntimeError(f"dbdump failed: {loader.stderr}")
        peak_kb = int(peak_file.read_text())
    loaded = (versions // VERSIONS_PER_CRATE) * VERSIONS_PER_CRATE
    return loaded / wall, peak_kb / 1024


def _scratch(db: Database, table: SqlTable) -> SqlTable:
    """An empty copy of `table` (same columns, key and collations) named BENCH_<name>."""
    copy = table.to_metadata(MetaData(), name=f"BENCH_{table.name}")
    for index in list(copy.indexes):
        index.name = f"BENCH_{index.name}"
    copy.drop(db.engine, checkfirst=True)
    copy.create(db.engine)
    return copy


def _chunks(conn: Connection, table: SqlTable, size: int) -> Iterator[list[tuple[Any, ...]]]:
    result = conn.execution_options(stream_results=True, yield_per=size).execute(select(table))
    for part in result.partitions(size):
        yield [tuple(row) for row in part]


def raw_executemany_rate(db: Database, tables: list[SqlTable]) -> tuple[int, float]:
    """(rows, seconds) to write the rows of `tables`, read back (not timed), into scratch
    copies by plain driver executemany upserts: the database's own cost for these rows."""
    from stagecrawl.storage.bulk import BulkUpsert

    rows = 0
    seconds = 0.0
    # Read through a read-only handle: on SQLite it does not take the write lock.
    source = Database(db.url, read_only=True)
    for table in tables:
        scratch = _scratch(db, table)
        writer = BulkUpsert(scratch, [c.name for c in table.columns])
        with source.engine.connect() as reader, db.engine.connect() as conn:
            pending = 0
            for chunk in _chunks(reader, table, WRITE_BATCH):
                started = time.perf_counter()
                writer.execute(conn, chunk)
                pending += len(chunk)
                if pending >= COMMIT_ROWS:
                    conn.commit()
                    pending = 0
                seconds += time.perf_counter() - started
                rows += len(chunk)
            started = time.perf_counter()
            conn.commit()
            seconds += time.perf_counter() - started
        scratch.drop(db.engine)
    source.dispose()
    return rows, seconds


def _collected(db: Database) -> None:
    """PRODUCT and VERSION rows for every crate the fixture's advisories name (Core inserts:
    this runs under an older stagecrawl too, for `--before-src`)."""
    report = ImportReport()
    names = sorted(
        {
            str(entry["package"]["name"])
            for record in read_advisories(OSV_ZIP, report.read)
            for entry in record.get("affected") or []
            if isinstance(entry, dict)
            and isinstance(entry.get("package"), dict)
            and entry["package"].get("ecosystem") == "crates.io"
        }
    )
    now = datetime(2026, 1, 1)
    key = {"LANGUAGE": "rust", "REPOSITORY": "Cargo"}
    numbers = [f"{v // 5}.{v % 5}.{v % 3}" for v in range(COLLECTED_PER_CRATE)]
    with db.engine.begin() as conn:
        conn.execute(
            rust(db).product.insert(),
            [
                {**key, "PRODUCT_KEY": n.lower(), "NAME": n, "COMP_STATUS": "ACTIVE"}
                | {"VERSION_COUNT": COLLECTED_PER_CRATE, "LAST_UPDATED": now}
                for n in names
            ],
        )
        conn.execute(
            rust(db).version.insert(),
            [
                {**key, "PRODUCT_KEY": n.lower(), "VERSION": v, "NAME": n, "DEPENDENCIES": "[]"}
                | {"FEATURES": "{}", "YANKED": False, "PROCESSED": 1, "LAST_UPDATED": now}
                for n in names
                for v in numbers
            ],
        )


def _osv_once(url: str) -> tuple[int, float, Database]:
    db = fresh(url)
    _collected(db)
    report = ImportReport()
    started = time.perf_counter()
    store_records(db, CRATES, read_advisories(OSV_ZIP, report.read), "collected", report)
    return report.advisories, time.perf_counter() - started, db


def osv_rate(url: str, src: Path | None = None) -> float:
    """Advisories/s of the OSV import of the RustSec fixture zip (reading the zip included)
    into fresh VULN tables with collected versions present; median of 3. `src`: measure the
    import of another `src` folder (in a subprocess running this file)."""
    if src is not None:
        done = subprocess.run(
            [sys.executable, __file__, "--osv-rate-only", url],
            env={**os.environ, "PYTHONPATH": str(src)},
            capture_output=True,
            text=True,
            check=True,
        )
        return float(done.stdout.strip().splitlines()[-1])
    rates = []
    for _ in range(3):
        advisories, seconds, db = _osv_once(url)
        db.dispose()
        rates.append(advisories / seconds)
    return statistics.median(rates)


def _name(url: str) -> str:
    return {"sqlite": "SQLite", "mysql": "MariaDB", "postgresql": "PostgreSQL"}[
        url.split(":", 1)[0].split("+", 1)[0]
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--versions", type=int, default=1_000_000)
    parser.add_argument("--server-versions", type=int, default=200_000, help="on MariaDB/PG")
    parser.add_argument("--before-src", type=Path, help="src folder of the code to compare")
    parser.add_argument("--mariadb", default=MARIADB)
    parser.add_argument("--postgres", default=POSTGRES)
    parser.add_argument("--skip-mariadb", action="store_true")
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--osv-rate-only", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.osv_rate_only:
        print(osv_rate(args.osv_rate_only))
        return
    console = Console(width=150)
    with tempfile.TemporaryDirectory(prefix="stagecrawl-bench-bulk-") as tmp:
        urls = [f"sqlite:///{Path(tmp) / 'bulk.db'}"]
        urls += [] if args.skip_mariadb else [args.mariadb]
        urls += [] if args.skip_postgres else [args.postgres]
        dump = Table(title="crates dbdump: synthetic dump, 50 versions a crate, fresh database")
        for column in ("backend", "versions", "code", "versions/s", "peak RSS MB"):
            dump.add_column(column, justify="right")
        dump.add_column("raw executemany rows/s", justify="right")
        dump.add_column("loader ÷ raw", justify="right")
        osv = Table(title="OSV import: RustSec fixture zip, collected versions present")
        for column in ("backend", "advisories", "advisories/s (median of 3)", "code"):
            osv.add_column(column, justify="right")
        osv.add_column("raw executemany advisories/s", justify="right")
        osv.add_column("import ÷ raw", justify="right")
        for url in urls:
            versions = args.versions if url.startswith("sqlite") else args.server_versions
            name = _name(url)
            if args.before_src:
                rate, rss = dbdump_rate(url, versions, args.before_src)
                dump.add_row(name, f"{versions:,}", "before", f"{rate:,.0f}", f"{rss:.0f}", "", "")
            rate, rss = dbdump_rate(url, versions)
            db = Database(url)
            rows, seconds = raw_executemany_rate(db, [rust(db).version])
            db.dispose()
            raw = rows / seconds
            dump.add_row(
                name,
                f"{versions:,}",
                "this",
                f"{rate:,.0f}",
                f"{rss:.0f}",
                f"{raw:,.0f}",
                f"{rate / raw:.2f}",
            )
            advisories, _, db = _osv_once(url)
            tables = rust(db)
            rows, seconds = raw_executemany_rate(
                db, [tables.vuln_raw, tables.vuln_v1, tables.vuln_hit]
            )
            db.dispose()
            raw = advisories / seconds
            if args.before_src:
                rate = osv_rate(url, args.before_src)
                osv.add_row(name, f"{advisories:,}", f"{rate:,.0f}", "before", "", "")
            rate = osv_rate(url)
            osv.add_row(
                name, f"{advisories:,}", f"{rate:,.0f}", "this", f"{raw:,.0f}", f"{rate / raw:.2f}"
            )
    console.print(dump)
    console.print(osv)
    print(
        "goal: dbdump >= 20,000 versions/s on SQLite with peak RSS < 150 MB (1M versions)",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
