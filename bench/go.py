"""Go modules: pace against the policy floor, CPU a row against crates, memory at 10 x the size.

    python bench/go.py [--only pace|cpu] [--modules 10] [--versions 8] [--scale 1]
                       [--sizes 100,1000] [--rows-versions 30]

1. pace: `go crawl` against the strict one-host look-alike (stagecrawl.testing.go_origin: a
   token bucket per lane, burst 2) at the default lane rates (proxy 8/s, index 1/s) times
   `--scale`. From the origin's own log: requests and 429s per lane, the floor the busiest lane
   sets (its requests ÷ its rate), the crawl's network wall and process wall against it.
2. cpu: `crates crawl` and `go crawl` in the same run, limits lifted, into SQLite, at each size
   (units of `--rows-versions` versions): VERSION rows, CPU ms a row of the crawling process,
   the Go/crates ratio, and the peak RSS (VmHWM, polled). Real shapes: each crate version has
   four dependencies and features; each Go version's go.mod is prometheus v0.303.1's (its
   requires, from ../shared/fixtures/go/proxy) when the fixtures are there, else 30 requires.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from stagecrawl.testing.go_origin import GoOrigin
from stagecrawl.testing.origin import TestOrigin
from stagecrawl.testing.registry import index_line, write_crate

RATES = {"proxy": 8.0, "index": 1.0}
SHARED = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "go"
REAL_MOD = SHARED / "proxy/github.com/prometheus/prometheus/@v/v0.303.1.mod"


def go_mod(path: str) -> str:
    if REAL_MOD.exists():
        return REAL_MOD.read_text().replace("github.com/prometheus/prometheus", path, 1)
    requires = "".join(f"\texample.com/dep{i} v1.{i}.0\n" for i in range(30))
    return f"module {path}\n\ngo 1.23.0\n\nrequire (\n{requires})\n"


def go_world(origin: GoOrigin, modules: int, versions: int) -> list[str]:
    names = [f"example.com/bench/Mod{i:05d}" for i in range(modules)]
    for name in names:
        text = go_mod(name)
        for v in range(versions):
            origin.module(name).add(f"v0.{v}.0", text, "2025-01-01T00:00:00Z")
    return names


def run(args: list[str]) -> tuple[float, float, float, int]:
    """One CLI run: (wall s, CPU s, peak RSS MB, exit code) of the child alone."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "stagecrawl", "-q", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
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
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if process.returncode != 0 and process.stderr is not None:
        print(process.stderr.read().decode()[-2000:], file=sys.stderr)
    return wall, cpu, peak_kb / 1024, process.returncode


def pace(modules: int, versions: int, scale: float) -> list[Table]:
    rates = {lane: rate * scale for lane, rate in RATES.items()}
    origin = GoOrigin()
    names = go_world(origin, modules, versions)
    origin.strict(proxy=rates["proxy"], index=rates["index"])
    with origin, tempfile.TemporaryDirectory() as tmp:
        wall, _cpu, _rss, code = run([
            "go", "crawl", *names, "--db", f"sqlite:///{Path(tmp) / 'pace.db'}",
            "--proxy-url", origin.proxy_url, "--index-url", origin.index_url,
            "--proxy-rate", str(rates["proxy"]), "--index-rate", str(rates["index"]),
            "--contact", "bench@example.org", "--concurrency", "16",
        ])  # fmt: skip
    lanes = Table(
        title=f"go crawl: {modules} modules × {versions} versions, strict lanes (exit {code})"
    )
    for column in ("lane", "rate /s", "requests", "429s", "lane floor s"):
        lanes.add_column(column, justify="right")
    floors = {}
    for lane, rate in rates.items():
        seen = [r for r in origin.log if origin.lane_of(r.path) == lane]
        served = [r for r in seen if r.status != 429]
        floors[lane] = max(0, len(served) - 1) / rate
        lanes.add_row(lane, f"{rate:g}", str(len(served)), str(len(seen) - len(served)),
                      f"{floors[lane]:.2f}")  # fmt: skip
    times = [r.time for r in origin.log]
    network, floor = max(times) - min(times), max(floors.values())
    summary = Table(title="wall against the floor of the lane rates")
    for column in ("floor s", "network wall s", "ratio", "process wall s", "ratio"):
        summary.add_column(column, justify="right")
    summary.add_row(f"{floor:.2f}", f"{network:.2f}", f"{network / floor:.3f}", f"{wall:.2f}",
                    f"{wall / floor:.3f}")  # fmt: skip
    return [lanes, summary]


def crates_world(root: Path, crates: int, versions: int) -> list[str]:
    names = [f"bench-{i:05d}" for i in range(crates)]
    deps = [
        {"name": d, "req": "^1", "features": [], "optional": False, "default_features": True,
         "target": None, "kind": "normal"}
        for d in ("serde", "libc", "log", "cfg-if")
    ]  # fmt: skip
    for name in names:
        numbers = [f"0.{v}.0" for v in range(versions)]
        lines = [
            index_line(name, n, deps, features={"std": [], "default": ["std"]}) for n in numbers
        ]
        api = {"crate": {"name": name, "description": "bench"},
               "versions": [{"num": n, "license": "MIT", "created_at": "2024-01-01T00:00:00Z",
                             "downloads": 1, "crate_size": 1000} for n in numbers]}  # fmt: skip
        write_crate(root, name, lines, api)
    return names


def cpu(sizes: list[int], versions: int) -> Table:
    table = Table(title=f"crawl into SQLite, {versions} versions a unit, limits lifted")
    for column in ("registry", "units", "VERSION rows", "wall s", "rows/s", "CPU ms/row",
                   "go/crates CPU", "peak RSS MB"):  # fmt: skip
        table.add_column(column, justify="right")
    lifted = "1000000"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        crate_names = crates_world(root, max(sizes), versions)
        origin = GoOrigin()
        go_names = go_world(origin, max(sizes), versions)
        with TestOrigin(root / "index") as index, TestOrigin(root / "api") as api, origin:
            for size in sizes:
                rows = size * versions
                seeds = root / f"crates-{size}.txt"
                seeds.write_text("\n".join(crate_names[:size]))
                db = f"sqlite:///{root / f'c{size}.db'}"
                crates = run([
                    "crates", "crawl", "--file", str(seeds), "--db", db,
                    "--index-url", index.url + "/", "--api-url", api.url + "/",
                    "--index-rate", lifted, "--api-rate", lifted, "--api-budget", "none",
                ])  # fmt: skip
                seeds = root / f"go-{size}.txt"
                seeds.write_text("\n".join(go_names[:size]))
                db = f"sqlite:///{root / f'g{size}.db'}"
                go = run([
                    "go", "crawl", "--file", str(seeds), "--db", db,
                    "--proxy-url", origin.proxy_url, "--index-url", origin.index_url,
                    "--proxy-rate", lifted, "--contact", "bench@example.org",
                ])  # fmt: skip
                per_row = {"crates": 1000 * crates[1] / rows, "go": 1000 * go[1] / rows}
                for label, (wall, _cpu, peak, code) in (("crates", crates), ("go", go)):
                    ratio = f"{per_row['go'] / per_row['crates']:.2f}" if label == "go" else ""
                    table.add_row(label, f"{size:,}", f"{rows:,}", f"{wall:.1f}",
                                  f"{rows / wall:,.0f}", f"{per_row[label]:.3f}", ratio,
                                  f"{peak:.0f}" + (f" (exit {code})" if code else ""))  # fmt: skip
    table.caption = f"load average {os.getloadavg()[0]:.1f}"
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("pace", "cpu"))
    parser.add_argument("--modules", type=int, default=10)
    parser.add_argument("--versions", type=int, default=8)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--rows-versions", type=int, default=30)
    args = parser.parse_args()
    console = Console()
    if args.only in (None, "pace"):
        for table in pace(args.modules, args.versions, args.scale):
            console.print(table)
    if args.only in (None, "cpu"):
        sizes = [int(s) for s in args.sizes.split(",")]
        console.print(cpu(sizes, args.rows_versions))


if __name__ == "__main__":
    main()
