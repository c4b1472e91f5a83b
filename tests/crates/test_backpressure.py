"""A crawl's seeder asks the index no further ahead of the collector than a bound: each index
file it fetched waits in memory until the collector has used it, so a seeder far ahead held
memory growing with the crawl and, past the run cache's bound, had files dropped and asked for
again. With the API slow, the index origin sees its requests keep step with the API's."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import func, select

from stagecrawl.crates.plugin import REGISTRY
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.kernel.collecting import CollectSettings
from stagecrawl.kernel.phases import collect
from stagecrawl.settings import Settings
from stagecrawl.storage.db import Database
from stagecrawl.testing.origin import TestOrigin
from stagecrawl.testing.registry import index_line, write_crate
from tests.crates.kernel import crates_client, rust

CRATES = [f"ahead-{i:02d}" for i in range(60)]
VERSIONS = 30


def build(root: Path) -> None:
    for name in CRATES:
        numbers = [f"0.{v}.0" for v in range(VERSIONS)]
        write_crate(
            root,
            name,
            [index_line(name, v) for v in numbers],
            {
                "crate": {"name": name, "description": "ahead"},
                "versions": [{"num": v, "license": "MIT"} for v in numbers],
            },
        )


async def test_the_seeder_keeps_step_with_a_slow_collector(tmp_path: Path) -> None:
    build(tmp_path / "registry")
    db = Database(f"sqlite:///{tmp_path / 'ahead.db'}")
    # One crate at a time, one per commit: the collector holds 4 crates at most, and the
    # seeder may be 64 events a crate it can hold ahead (256 events: 9 crates of 30).
    settings = CollectSettings(concurrency=1, commit_batch=1)
    with (
        TestOrigin(tmp_path / "registry" / "index") as index,
        TestOrigin(tmp_path / "registry" / "api") as api,
    ):
        api.rule("/*", stall=0.05)  # the collector waits on the API; the index answers at once
        s = Settings.resolve(
            {
                "crates.index_url": index.url + "/",
                "crates.api_url": api.url + "/",
                "crates.index_rate": 100_000.0,
                "crates.api_rate": 100_000.0,
                "crates.api_budget": "none",
            },
            {},
        )
        async with crates_client(s) as client:
            report = await collect(db, REGISTRY, client, settings, GracefulStop(), CRATES)
        index_times = [r.time for r in index.log]
        api_times = [r.time for r in api.log]
    with db.engine.connect() as conn:
        stored = conn.execute(select(func.count()).select_from(rust(db).version)).scalar_one()
    db.dispose()
    assert stored == len(CRATES) * VERSIONS and report.collect is not None
    assert report.collect.failed == 0
    assert report.requests == {"index": len(CRATES), "api": len(CRATES)}
    # When the collector asks the API about its n-th crate, the index has been asked about
    # that crate and at most a bound's worth beyond (256 events: 9 crates, and at most 2 more
    # claimed by the seeder at once); a seeder without that bound has asked about most of
    # them by then (40 to 53 crates ahead, measured).
    ahead = [sum(t < at for t in index_times) - n for n, at in enumerate(api_times, start=1)]
    assert max(ahead) <= 14, str(ahead)
