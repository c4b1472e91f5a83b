"""Go modules: `go crawl` against the policy floor (CPU a row and memory: bench/rows.py).

    python bench/go.py [--modules 10] [--versions 8] [--scale 1]

`go crawl` against the strict one-host look-alike (stagecrawl.testing.go_origin: a token bucket
per lane, burst 2) at the default lane rates (proxy 8/s, index 1/s) times `--scale`. From the
origin's own log: requests and 429s per lane, the floor the busiest lane sets (its requests ÷
its rate), the crawl's network wall and process wall against it.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rows import go_modules, run  # bench/rows.py: one child runner and world for every bench

from stagecrawl.testing.go_origin import GoOrigin

RATES = {"proxy": 8.0, "index": 1.0}


def pace(modules: int, versions: int, scale: float) -> list[Table]:
    rates = {lane: rate * scale for lane, rate in RATES.items()}
    origin = GoOrigin()
    names = go_modules(origin, modules, versions)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", type=int, default=10)
    parser.add_argument("--versions", type=int, default=8)
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args()
    console = Console()
    for table in pace(args.modules, args.versions, args.scale):
        console.print(table)


if __name__ == "__main__":
    main()
