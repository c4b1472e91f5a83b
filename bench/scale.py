"""Scale-out, bulk load, and memory and speed at scale.

    python bench/scale.py [--crates 400] [--versions 10] [--dump-crates 20000] [--dump-versions 50]
    python bench/scale.py --only crawl [--crawl-sizes 300,3000,10000] [--baseline-src DIR]
        [--repeat 3] [--shape real|synthetic]
    python bench/scale.py --only frontier [--frontier-urls 1000000]

1. `crates collect` with 1, 2 and 4 worker processes on MariaDB against the loopback registry,
   rate limit lifted: VERSION rows/s and the ratio to one worker.
2. `crates dbdump` of a synthetic dump (default 1M versions) into SQLite: load rate and the
   loader process's peak RSS.
3. `crates crawl` into SQLite at 300, 3,000 and 10,000 crates of 30 versions, limits lifted,
   shaped like real crates by default (each crate from one of ../shared's real index files —
   dependencies, features, checksums, yanked, links, rust-version — and a real API answer):
   VERSION rows/s end to end, CPU ms per row, peak RSS (the process's own VmHWM, polled) and
   index requests per crate (the index origin's own log; 1.00 when none is asked twice);
   with --baseline-src the same runs with another source tree (e.g. main's) in the same
   session, for a ratio on the same machine load. Targets: RSS flat within 10 % and ≤ 200 MB,
   ≥ 8,000 rows/s.
4. A frontier crawl over N start URLs (default 1M) against the loopback origin: peak RSS of the
   crawling process, which registers every URL and crawls for a while, then is stopped with
   SIGINT (the stop is part of what is measured: time from the signal to the exit).
   Target: ≤ 200 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import statistics
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


SHARED = Path(__file__).resolve().parents[2] / "shared" / "fixtures"


def real_shapes() -> tuple[list[list[dict[str, object]]], dict[str, object]]:
    """The real index files in ../shared (every line of each, as crates.io serves them) and
    one real API answer: what a real-shaped registry is made of (read where it lies)."""
    index, api = SHARED / "crates-index", SHARED / "crates-api" / "dependabot-core" / "regex.json"
    if not index.is_dir() or not api.is_file():
        raise SystemExit(f"--shape real needs {index} and {api} (../shared beside the repo)")
    files = [
        [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for path in sorted(index.rglob("*"))
        if path.is_file() and path.name not in ("config.json", "SOURCE.txt")
    ]
    return [f for f in files if f], json.loads(api.read_text())


def build_real_registry(root: Path, crates: int, versions: int) -> list[str]:
    """Crates shaped like real ones: crate i takes the lines of real index file i (cycling
    through its lines, each line's dependencies, features, checksum, yanked, links and
    rust-version kept) under its own name and versions; its API answer is a real one's
    (crate fields and each version's fields) under the same names."""
    files, answer = real_shapes()
    crate_template = dict(answer["crate"])  # type: ignore[call-overload]
    version_template = dict(answer["versions"][0])  # type: ignore[index]
    names = [f"scale-{i:05d}" for i in range(crates)]
    for i, name in enumerate(names):
        lines = files[i % len(files)]
        numbers = [f"{v // 10}.{v % 10}.{i % 7}" for v in range(versions)]
        index_lines = []
        for v, vers in enumerate(numbers):
            line = {**lines[v % len(lines)], "name": name, "vers": vers}
            index_lines.append(json.dumps(line, separators=(",", ":")))
        write_crate(
            root,
            name,
            index_lines,
            {
                "crate": {**crate_template, "id": name, "name": name},
                "versions": [
                    {**version_template, "crate": name, "num": vers, "id": 1000 * i + v}
                    for v, vers in enumerate(numbers)
                ],
                "keywords": answer.get("keywords", []),  # type: ignore[union-attr]
                "categories": answer.get("categories", []),  # type: ignore[union-attr]
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


def peak_rss_mb(process: subprocess.Popen[bytes]) -> tuple[float, float]:
    """Wait for `process`; (its peak RSS in MB, its CPU seconds). The peak is its own VmHWM
    polled from /proc (wait4's ru_maxrss would count the bench parent it was forked from)."""
    peak_kb = 0
    status = Path(f"/proc/{process.pid}/status")
    while process.poll() is None:
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak_kb = max(peak_kb, int(line.split()[1]))
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return peak_kb / 1024, usage.ru_utime + usage.ru_stime


def crawl_run(
    src: str | None, root: Path, seeds: Path, index_url: str, api_url: str, db: Path
) -> tuple[float, float, float, int]:
    """One `crates crawl`; (wall s, CPU s, peak RSS MB, exit code)."""
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = src
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "stagecrawl", "-q", "crates", "crawl", "--file", str(seeds),
         "--db", f"sqlite:///{db}", "--index-url", index_url, "--api-url", api_url,
         "--index-rate", "1000000", "--api-rate", "1000000", "--api-budget", "none",
         "--format", "json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )  # fmt: skip
    peak, cpu_after = peak_rss_mb(process)
    wall = time.perf_counter() - started
    cpu = cpu_after - (before.ru_utime + before.ru_stime)
    code = process.wait()
    if code != 0 and process.stderr is not None:
        print(process.stderr.read().decode()[-2000:], file=sys.stderr)
    return wall, cpu, peak, code


def crawl_bench(
    sizes: list[int], versions: int, baseline_src: str | None, repeat: int = 1, real: bool = False
) -> Table:
    """Each size run `repeat` times per tree, the trees' order alternating between rounds (a
    drift in the machine's load hits both alike); each column is the median of the rounds."""
    trees = [("this tree", None)] + ([("baseline", baseline_src)] if baseline_src else [])
    loads = [os.getloadavg()[0]]
    table = Table()
    for column in ("tree", "crates", "VERSION rows", "wall s", "rows/s", "CPU ms/row",
                   "peak RSS MB", "index req/crate"):  # fmt: skip
        table.add_column(column, justify="right")
    rates: dict[tuple[str, int], float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        names = (build_real_registry if real else build_registry)(root, max(sizes), versions)
        with TestOrigin(root / "index") as index, TestOrigin(root / "api") as api:
            for size in sizes:
                seeds = root / f"seeds-{size}.txt"
                seeds.write_text("\n".join(names[:size]))
                runs: dict[str, list[tuple[float, float, float, int, float]]] = {}
                for round_ in range(repeat):
                    order = trees if round_ % 2 == 0 else trees[::-1]
                    for label, src in order:
                        db = root / f"crawl-{label.replace(' ', '-')}-{size}-{round_}.db"
                        asked = len(index.log)
                        wall, cpu, peak, code = crawl_run(
                            src, root, seeds, index.url + "/", api.url + "/", db
                        )
                        # from the origin's own log: 1.00 when the seeder and the collector
                        # share each crate's one index request (a seeder far ahead of the
                        # collector lets the run cache drop a file before the collector asks)
                        per_crate = (len(index.log) - asked) / size
                        runs.setdefault(label, []).append((wall, cpu, peak, code, per_crate))
                        db.unlink(missing_ok=True)
                        loads.append(os.getloadavg()[0])
                rows = size * versions
                for label, _src in trees:
                    done = runs[label]
                    wall = statistics.median(r[0] for r in done)
                    cpu = statistics.median(r[1] for r in done)
                    peak = statistics.median(r[2] for r in done)
                    failed = [r[3] for r in done if r[3] != 0]
                    per_crate = statistics.median(r[4] for r in done)
                    rates[(label, size)] = rows / wall
                    table.add_row(
                        label,
                        f"{size:,}",
                        f"{rows:,}",
                        f"{wall:.1f}",
                        f"{rows / wall:,.0f}",
                        f"{1000 * cpu / rows:.3f}",
                        f"{peak:.0f}" + (f" (exit {failed[0]})" if failed else ""),
                        f"{per_crate:.2f}",
                    )
    if baseline_src:
        for size in sizes:
            ratio = rates[("this tree", size)] / rates[("baseline", size)]
            table.add_row("ratio", f"{size:,}", "", "", f"{ratio:.2f} ×", "", "", "")
    table.title = (
        f"crates crawl into SQLite, {versions} {'real-shaped ' if real else ''}versions a"
        " crate, limits lifted; median of"
        f" {repeat} run(s) each (load average {min(loads):.1f}–{max(loads):.1f})"
    )
    return table


def frontier_child(count: int, base: str, out: str) -> None:
    """The measured process of the frontier bench: a Crawler over `count` start URLs."""
    from stagecrawl.engine.crawler import Crawler
    from stagecrawl.engine.fetcher import Fetcher, FetchSettings
    from stagecrawl.engine.frontier import Frontier
    from stagecrawl.engine.shutdown import GracefulStop
    from stagecrawl.engine.work import LoopSettings
    from stagecrawl.testing.stages import FlatStage, NullSink

    async def crawl() -> None:
        urls = (f"{base}/p.json?n={i}" for i in range(count))
        frontier = Frontier(Path(out) / "frontier.sqlite")
        stop = GracefulStop("in-flight requests")
        async with Fetcher(FetchSettings(max_connections=16)) as fetcher:
            crawler = Crawler(
                FlatStage(urls), fetcher, NullSink(), frontier,
                LoopSettings(concurrency=16, commit_batch=256, grace_period=5.0), stop=stop,
            )  # fmt: skip
            with stop.on_signals():
                summary = await crawler.run()
        frontier.close()
        print(summary.requests_done, flush=True)

    asyncio.run(crawl())


def frontier_bench(count: int, crawl_seconds: float) -> Table:
    table = Table(title=f"frontier crawl over {count:,} start URLs, stopped after the start")
    columns = (
        "start URLs",
        "s to the first request",
        "crawled",
        "peak RSS MB",
        "s from SIGINT to exit",
    )
    for column in columns:
        table.add_column(column, justify="right")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "p.json").write_bytes(b'{"ok": true}')
        with TestOrigin(Path(tmp)) as origin:
            started = time.monotonic()
            process = subprocess.Popen(
                [sys.executable, __file__, "--frontier-child", str(count), origin.url, tmp],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            peak_kb = 0
            status = Path(f"/proc/{process.pid}/status")
            # registered and crawling once the origin sees requests; then crawl a while
            crawling_since: float | None = None
            sent = 0.0
            while process.poll() is None:
                try:
                    for line in status.read_text().splitlines():
                        if line.startswith("VmHWM:"):
                            peak_kb = max(peak_kb, int(line.split()[1]))
                except (OSError, ValueError):
                    pass
                if crawling_since is None and origin.log:
                    crawling_since = time.monotonic()
                if (
                    crawling_since is not None
                    and not sent
                    and time.monotonic() - crawling_since > crawl_seconds
                ):
                    process.send_signal(signal.SIGINT)
                    sent = time.monotonic()
                time.sleep(0.05)
            took = time.monotonic() - sent if sent else float("nan")
            out = process.stdout.read().decode().strip() if process.stdout else ""
            first = f"{crawling_since - started:.2f}" if crawling_since is not None else "?"
            table.add_row(f"{count:,}", first, out or "?", f"{peak_kb / 1024:.0f}", f"{took:.2f}")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--crates", type=int, default=400)
    parser.add_argument("--versions", type=int, default=10)
    parser.add_argument("--dump-crates", type=int, default=20_000)
    parser.add_argument("--dump-versions", type=int, default=50)
    parser.add_argument("--skip-workers", action="store_true")
    parser.add_argument("--only", choices=["workers", "dump", "crawl", "frontier"])
    parser.add_argument("--crawl-sizes", default="300,3000,10000")
    parser.add_argument("--crawl-versions", type=int, default=30)
    parser.add_argument("--baseline-src", help="another src/ tree to run beside this one")
    parser.add_argument("--repeat", type=int, default=1, help="crawl runs per size and tree")
    parser.add_argument(
        "--shape",
        choices=["real", "synthetic"],
        default="real",
        help="crawl: crates shaped like ../shared's real index files and API answers, or minimal",
    )
    parser.add_argument("--frontier-urls", type=int, default=1_000_000)
    parser.add_argument("--frontier-seconds", type=float, default=10.0)
    parser.add_argument("--frontier-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.frontier_child:
        count, base, out = args.frontier_child
        frontier_child(int(count), base, out)
        return
    console = Console(width=120)  # the crawl table has eight columns
    if args.only == "crawl":
        sizes = [int(n) for n in args.crawl_sizes.split(",")]
        real = args.shape == "real"
        console.print(crawl_bench(sizes, args.crawl_versions, args.baseline_src, args.repeat, real))
        return
    if args.only == "frontier":
        console.print(frontier_bench(args.frontier_urls, args.frontier_seconds))
        return
    if not args.skip_workers and args.only in (None, "workers"):
        console.print(workers_bench(args.crates, args.versions))
    if args.only in (None, "dump"):
        console.print(dump_bench(args.dump_crates, args.dump_versions))
        print("targets: dbdump RSS < 150 MB, >= 20k versions/s on SQLite", file=sys.stderr)


if __name__ == "__main__":
    main()
