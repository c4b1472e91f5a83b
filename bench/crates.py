"""crates pipeline against the loopback origin with scaled-down real limits.

    python bench/crates.py [--crates 200] [--versions 50] [--mariadb URL] [--skip-mariadb]

API limited to 20 req/s and the index to 200 req/s, both by stagecrawl and enforced by the
origin (429 past the limit); no request budget. Seeds then collects through the pipeline API
(as the CLI runs them) and prints wall time against the rate-limit floor (API requests ÷ API
rate), the 429s seen, and VERSION rows written per second, on SQLite and on MariaDB: does
stagecrawl keep to a registry's rate without losing time? (bench/sql.py lifts the rates to
measure the SQL path instead.) The MariaDB database's stagecrawl tables are dropped: give it a
bench database.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from stagecrawl.crates.plugin import REGISTRY as CRATES
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.kernel.collecting import CollectSettings
from stagecrawl.kernel.phases import collect, registry_fetcher, seed
from stagecrawl.queue.events import COLLECTED
from stagecrawl.settings import Settings
from stagecrawl.storage.db import Database
from stagecrawl.testing.origin import TestOrigin
from stagecrawl.testing.registry import index_line, write_crate

API_RATE, INDEX_RATE = 20.0, 200.0
MARIADB = "mysql+pymysql://root@127.0.0.1:3306/test"


def build(root: Path, crates: int, versions: int) -> list[str]:
    names = [f"bench-crate-{i:04d}" for i in range(crates)]
    serde = {
        "name": "serde",
        "req": "^1",
        "features": [],
        "optional": False,
        "default_features": True,
        "target": None,
        "kind": "normal",
    }
    for name in names:
        numbers = [f"{v // 10}.{v % 10}.0" for v in range(versions)]
        lines = [
            index_line(name, vers, [serde], features={"std": []}, yanked=v % 17 == 0)
            for v, vers in enumerate(numbers)
        ]
        write_crate(
            root,
            name,
            lines,
            {
                "crate": {"name": name, "description": "bench", "downloads": 1},
                "versions": [
                    {
                        "num": vers,
                        "license": "MIT",
                        "created_at": "2024-01-01T00:00:00Z",
                        "downloads": v,
                    }
                    for v, vers in enumerate(numbers)
                ],
                "keywords": [],
                "categories": [],
            },
        )
    return names


def fresh(url: str) -> Database:
    """The backend with stagecrawl's tables, empty."""
    db = Database(url)
    db.metadata.drop_all(db.engine)
    db.dispose()
    return Database(url)


async def run(
    db_url: str, names: list[str], index: TestOrigin, api: TestOrigin
) -> dict[str, float]:
    flags = {"crates.index_url": index.url + "/", "crates.api_url": api.url + "/",
             "crates.api_rate": API_RATE, "crates.index_rate": INDEX_RATE,
             "crates.api_budget": "none"}  # fmt: skip
    s = Settings.resolve(flags, {})
    db = fresh(db_url)
    stop = GracefulStop()
    async with registry_fetcher(CRATES, s) as fetcher:
        client = CRATES.client(fetcher, s)
        started = time.perf_counter()
        await seed(db, CRATES, client, names, stop)
        report = await collect(db, CRATES, client, CollectSettings(concurrency=16), stop)
        wall = time.perf_counter() - started
        rate_limited = sum(fetcher.stats.rate_limited.values())
    db.dispose()
    assert report.collect is not None
    rows = report.collect.outcomes[COLLECTED]
    return {
        "wall": wall,
        "floor": client.api_requests / API_RATE,
        "429": rate_limited,
        "rows": rows,
        "rows_per_s": rows / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--crates", type=int, default=200)
    parser.add_argument("--versions", type=int, default=50)
    parser.add_argument("--mariadb", default=MARIADB, help="a bench database (tables dropped)")
    parser.add_argument("--skip-mariadb", action="store_true")
    args = parser.parse_args()
    table = Table(
        title=f"crates: {args.crates} crates × {args.versions} versions, "
        f"API {API_RATE:.0f}/s, index {INDEX_RATE:.0f}/s"
    )
    for column in (
        "backend",
        "wall s",
        "floor s",
        "wall / floor",
        "429s",
        "VERSION rows",
        "rows/s",
    ):
        table.add_column(column, justify="right")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        names = build(root, args.crates, args.versions)
        backends = [("sqlite", f"sqlite:///{root / 'bench.db'}")]
        if not args.skip_mariadb:
            backends.append(("mariadb", args.mariadb))
        for backend, url in backends:
            with TestOrigin(root / "index") as index, TestOrigin(root / "api") as api:
                api.rule("/api/*", rate_limit=int(API_RATE), rate_window=1.0)
                index.rule("/*", rate_limit=int(INDEX_RATE), rate_window=1.0)
                r = asyncio.run(run(url, names, index, api))
            table.add_row(
                backend,
                f"{r['wall']:.2f}",
                f"{r['floor']:.2f}",
                f"{r['wall'] / r['floor']:.3f}",
                f"{r['429']:.0f}",
                f"{r['rows']:.0f}",
                f"{r['rows_per_s']:.0f}",
            )
    Console().print(table)


if __name__ == "__main__":
    main()
