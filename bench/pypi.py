"""`pypi crawl` against a strict PyPI look-alike on ONE host, in real time.

    python bench/pypi.py [--projects 20] [--versions 6] [--scale 1]

The look-alike (stagecrawl.testing.pypi_origin) enforces a token bucket per lane (index, api,
files; burst 2 to absorb arrival jitter) at the crawl's own rates, times `--scale`
(the default rates: index 5/s, api 2/s, files 5/s). Half of each project's versions offer
PEP 658 core metadata (files lane), the others only the JSON API (api lane). The crawl runs as a
user runs it (the CLI, burst 1). Prints, from the origin's own log: requests and 429s per lane,
the floor the lane rates set (the busiest lane's requests ÷ its rate), the crawl's network wall
(first to last request) and the process wall (start-up included), and their ratios.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from stagecrawl.testing.pypi_origin import LANE_PATTERNS, PyPIOrigin, synthetic_project

DEFAULT_RATES = {"index": 5.0, "api": 2.0, "files": 5.0}


def build(origin: PyPIOrigin, projects: int, versions: int) -> list[str]:
    names = [f"bench-{i:03d}" for i in range(projects)]
    for name in names:
        project = synthetic_project(name, versions, requires=["six>=1.0"])
        # every second release without core metadata: its dependencies come from the JSON API
        for index, f in enumerate(project.page["files"]):
            if (index // 2) % 2 == 1:
                f["core-metadata"] = f["data-dist-info-metadata"] = False
        origin.add_project(project)
    return names


def crawl(names: list[str], db: Path, url: str, rates: dict[str, float]) -> float:
    started = time.monotonic()
    done = subprocess.run(
        [
            *(sys.executable, "-m", "stagecrawl", "-q", "pypi", "crawl", *names),
            *("--db", f"sqlite:///{db}", "--index-url", f"{url}/simple/", "--api-url", url),
            *("--contact", "bench@example.org", "--concurrency", "16"),
            *("--index-rate", str(rates["index"]), "--api-rate", str(rates["api"])),
            *("--files-rate", str(rates["files"])),
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"crawl failed ({done.returncode}): {done.stderr[-2000:]}")
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--projects", type=int, default=20)
    parser.add_argument("--versions", type=int, default=6)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every lane rate")
    args = parser.parse_args()
    rates = {lane: rate * args.scale for lane, rate in DEFAULT_RATES.items()}
    origin = PyPIOrigin()
    names = build(origin, args.projects, args.versions)
    origin.strict(rates["index"], rates["api"], rates["files"])
    with origin, tempfile.TemporaryDirectory() as tmp:
        process_wall = crawl(names, Path(tmp) / "bench.db", origin.url, rates)
    table = Table(
        title=f"pypi crawl: {args.projects} projects × {args.versions} versions, one host,"
        " strict lanes"
    )
    for column in ("lane", "rate /s", "requests", "429s", "lane floor s"):
        table.add_column(column, justify="right")
    floors = {}
    for lane, pattern in LANE_PATTERNS.items():
        served = [r for r in origin.requests_to(pattern) if r.status != 429]
        limited = [r for r in origin.requests_to(pattern) if r.status == 429]
        floors[lane] = max(0, len(served) - 1) / rates[lane]
        table.add_row(
            lane, f"{rates[lane]:g}", str(len(served)), str(len(limited)), f"{floors[lane]:.2f}"
        )
    times = [r.time for r in origin.log]
    network_wall = max(times) - min(times)
    floor = max(floors.values())
    Console().print(table)
    summary = Table(title="wall against the floor of the lane rates")
    for column in ("floor s", "network wall s", "ratio", "process wall s", "ratio"):
        summary.add_column(column, justify="right")
    summary.add_row(
        f"{floor:.2f}",
        f"{network_wall:.2f}",
        f"{network_wall / floor:.3f}",
        f"{process_wall:.2f}",
        f"{process_wall / floor:.3f}",
    )
    Console().print(summary)


if __name__ == "__main__":
    main()
