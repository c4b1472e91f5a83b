"""Scale-out and bulk load.

    python bench/scale.py [--crates 400] [--versions 10] [--dump-crates 20000] [--dump-versions 50]

1. `crates collect` with 1, 2 and 4 worker processes on MariaDB against the loopback registry,
   rate limit lifted: VERSION rows/s and the ratio to one worker.
2. `crates dbdump` of a synthetic dump (default 1M versions) into SQLite: load rate and the
   loader process's peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table
from sqlalchemy import create_engine, text

from stagecrawl.testing.dbdump import build_dump
from stagecrawl.testing.origin import TestOrigin
from stagecrawl.testing.registry import index_line, write_crate

MARIADB = "mysql+pymysql://root@127.0.0.1:3306/test"
TABLES = (
    "TB_COMP_LIB_RUST_LIST",
    "TB_COMP_LIB_VERSION_RUST",
    "TB_COMP_LIB_PRODUCT_RUST",
    "TB_COMP_LIB_RUST_INDEX_STATE",
    "TB_STAGECRAWL_WORKER",
)


def build_registry(root: Path, crates: int, versions: int) -> list[str]:
    names = [f"scale-{i:05d}" for i in range(crates)]
    for name in names:
        lines = [index_line(name, f"0.{v}.0") for v in range(versions)]
        write_crate(
            root,
            name,
            lines,
            {
                "crate": {"name": name, "description": "scale"},
                "versions": [{"num": f"0.{v}.0", "license": "MIT"} for v in range(versions)],
            },
        )
    return names


def reset() -> None:
    engine = create_engine(MARIADB)
    with engine.begin() as conn:
        for table in TABLES:
            conn.execute(text(f"DROP TABLE IF EXISTS `{table}`"))
    engine.dispose()


def stagecrawl(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "stagecrawl", "-q", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def workers_bench(crates: int, versions: int) -> Table:
    table = Table(title=f"collect on MariaDB: {crates} crates × {versions} versions, no limit")
    for column in ("workers", "wall s", "VERSION rows/s", "ratio to 1 worker"):
        table.add_column(column, justify="right")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        names = build_registry(root, crates, versions)
        seeds = root / "seeds.txt"
        seeds.write_text("\n".join(names))
        with TestOrigin(root / "index") as index, TestOrigin(root / "api") as api:
            common = [
                "--db",
                MARIADB,
                "--index-url",
                index.url + "/",
                "--api-url",
                api.url + "/",
                "--api-rate",
                "100000",
                "--index-rate",
                "100000",
            ]
            base = 0.0
            for count in (1, 2, 4):
                reset()
                assert stagecrawl("crates", "seed", "--file", str(seeds), *common).wait() == 0
                started = time.perf_counter()
                procs = [
                    stagecrawl(
                        "crates", "collect", *common, "--redis-url", "redis://127.0.0.1:6379/0"
                    )
                    for _ in range(count)
                ]
                codes = [p.wait() for p in procs]
                wall = time.perf_counter() - started
                assert codes == [0] * count, [p.stderr.read() for p in procs if p.stderr]
                rate = crates * versions / wall
                base = base or rate
                table.add_row(str(count), f"{wall:.2f}", f"{rate:.0f}", f"{rate / base:.2f}")
    reset()
    return table


def dump_bench(crates: int, versions: int) -> Table:
    table = Table(title=f"dbdump into SQLite: {crates * versions:,} versions")
    for column in ("versions", "build s", "load s", "versions/s", "peak RSS MB"):
        table.add_column(column, justify="right")
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "db-dump.tar.gz"
        started = time.perf_counter()
        build_dump(dump, crates, versions)
        built = time.perf_counter() - started
        started = time.perf_counter()
        loader = stagecrawl(
            "crates", "dbdump", "--source", str(dump), "--db", f"sqlite:///{Path(tmp) / 'dump.db'}"
        )
        code = loader.wait()
        load = time.perf_counter() - started
        assert code == 0, loader.stderr.read() if loader.stderr else ""
        peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        total = crates * versions
        table.add_row(
            f"{total:,}",
            f"{built:.1f}",
            f"{load:.1f}",
            f"{total / load:.0f}",
            f"{peak_kb / 1024:.0f}",
        )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--crates", type=int, default=400)
    parser.add_argument("--versions", type=int, default=10)
    parser.add_argument("--dump-crates", type=int, default=20_000)
    parser.add_argument("--dump-versions", type=int, default=50)
    parser.add_argument("--skip-workers", action="store_true")
    args = parser.parse_args()
    console = Console()
    if not args.skip_workers:
        console.print(workers_bench(args.crates, args.versions))
    console.print(dump_bench(args.dump_crates, args.dump_versions))
    print("targets: dbdump RSS < 150 MB, >= 20k versions/s on SQLite", file=sys.stderr)


if __name__ == "__main__":
    main()
