"""A crawl at default rates against a strict registry never draws a 429, whether the index and
the API live on two hosts or on one (a self-hosted or proxy registry), and collects everything.

The registry enforces token buckets per path prefix as real ones do (burst 5 on the index,
2 on the API). Time runs 20× faster on both sides: the client on a scaled clock, the origin's
buckets at 20× the rates, so 1 request/s is 20 real requests/s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from stagecrawl.crates.plugin import REGISTRY
from stagecrawl.engine.clock import ScaledClock
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.kernel.collecting import CollectSettings
from stagecrawl.kernel.phases import collect
from stagecrawl.settings import Settings
from stagecrawl.storage.db import Database
from stagecrawl.testing.origin import TestOrigin
from stagecrawl.testing.registry import index_line, write_crate
from tests.crates.kernel import crates_client, rust

SPEEDUP = 20.0
CRATES = [f"strict-{i:02d}" for i in range(20)]


def build(root: Path) -> int:
    versions = 0
    for n, name in enumerate(CRATES):
        numbers = [f"0.{v}.0" for v in range(1 + n % 4)]
        versions += len(numbers)
        write_crate(
            root,
            name,
            [index_line(name, v) for v in numbers],
            {
                "crate": {"name": name, "description": "strict", "downloads": 1},
                "versions": [{"num": v, "license": "MIT"} for v in numbers],
                "keywords": [],
                "categories": [],
            },
        )
    return versions


def strict(origin: TestOrigin, index: str, api: str) -> None:
    origin.rule(index, bucket_rate=10 * SPEEDUP, bucket_burst=5)
    origin.rule(api, bucket_rate=1 * SPEEDUP, bucket_burst=2)


async def crawl(db_url: str, index_url: str, api_url: str) -> Any:
    # The defaults: 1/s, 10/s, burst 1, the API budget.
    s = Settings.resolve({"crates.index_url": index_url, "crates.api_url": api_url}, {})
    db = Database(db_url)
    stop = GracefulStop()
    async with crates_client(s, ScaledClock(SPEEDUP)) as client:
        report = await collect(db, REGISTRY, client, CollectSettings(), stop, CRATES)
    with db.engine.connect() as conn:
        stored = conn.execute(select(func.count()).select_from(rust(db).version)).scalar_one()
    db.dispose()
    return report, stored


@pytest.mark.parametrize("layout", ["two hosts", "one host"])
async def test_default_rates_draw_no_429_from_a_strict_registry(
    layout: str, tmp_path: Path
) -> None:
    root = tmp_path / "registry"
    versions = build(root)
    db_url = f"sqlite:///{tmp_path / 'strict.db'}"
    if layout == "one host":
        with TestOrigin(root) as host:
            strict(host, "/index/*", "/api/*")
            report, stored = await crawl(db_url, host.url + "/index/", host.url + "/api/")
            statuses = [r.status for r in host.log]
    else:
        with TestOrigin(root / "index") as index, TestOrigin(root / "api") as api:
            strict(index, "/*", "/nothing")
            strict(api, "/nothing", "/*")
            report, stored = await crawl(db_url, index.url + "/", api.url + "/")
            statuses = [r.status for r in index.log + api.log]
    assert statuses.count(429) == 0, statuses
    assert report.rate_limited == {}
    assert stored == versions and report.collect.failed == 0
    assert report.requests == {"index": 20, "api": 20}  # one of each per crate
