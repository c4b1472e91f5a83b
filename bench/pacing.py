"""`crates crawl` at the default rates against a strict registry, in real time.

    python bench/pacing.py [--crates 30]

The registry enforces token buckets as real ones do (index 10/s burst 5, API 1/s burst 2), once
with the index and the API on one host (a self-hosted or proxy registry) and once on two. The
crawl runs as a user runs it (the CLI, default rates, burst 1). Prints its wall time against
the API floor (crates ÷ 1 request/s, the least any polite crawl can take) and the 429s the
registry answered, read from the registry's own log.
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

from stagecrawl.testing.origin import TestOrigin
from stagecrawl.testing.registry import index_line, write_crate


def build(root: Path, crates: int) -> list[str]:
    names = [f"pace-{i:03d}" for i in range(crates)]
    for n, name in enumerate(names):
        numbers = [f"1.{v}.0" for v in range(1 + n % 5)]
        write_crate(
            root,
            name,
            [index_line(name, v) for v in numbers],
            {
                "crate": {"name": name, "description": "pace", "downloads": 1},
                "versions": [{"num": v, "license": "MIT"} for v in numbers],
                "keywords": [],
                "categories": [],
            },
        )
    return names


def crawl(names: list[str], db: Path, index_url: str, api_url: str) -> tuple[float, int]:
    started = time.monotonic()
    done = subprocess.run(
        [
            *(sys.executable, "-m", "stagecrawl", "-q", "crates", "crawl", *names),
            *("--db", f"sqlite:///{db}", "--index-url", index_url, "--api-url", api_url),
        ],
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"crawl failed: {done.stderr}")
    return wall, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--crates", type=int, default=30)
    args = parser.parse_args()
    table = Table(title=f"crates crawl, default rates, {args.crates} crates, strict registry")
    for column in ("layout", "wall s", "API floor s", "wall / floor", "429s", "requests"):
        table.add_column(column, justify="right")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "registry"
        names = build(root, args.crates)
        floor = args.crates / 1.0
        with TestOrigin(root) as host:
            host.rule("/index/*", bucket_rate=10, bucket_burst=5)
            host.rule("/api/*", bucket_rate=1, bucket_burst=2)
            wall, _ = crawl(names, Path(tmp) / "one.db", host.url + "/index/", host.url + "/api/")
            statuses = [r.status for r in host.log]
        table.add_row(
            "one host",
            f"{wall:.1f}",
            f"{floor:.0f}",
            f"{wall / floor:.3f}",
            str(statuses.count(429)),
            str(len(statuses)),
        )
        with TestOrigin(root / "index") as index, TestOrigin(root / "api") as api:
            index.rule("/*", bucket_rate=10, bucket_burst=5)
            api.rule("/*", bucket_rate=1, bucket_burst=2)
            wall, _ = crawl(names, Path(tmp) / "two.db", index.url + "/", api.url + "/")
            statuses = [r.status for r in index.log + api.log]
        table.add_row(
            "two hosts",
            f"{wall:.1f}",
            f"{floor:.0f}",
            f"{wall / floor:.3f}",
            str(statuses.count(429)),
            str(len(statuses)),
        )
    Console().print(table)


if __name__ == "__main__":
    main()
