"""Seed + collect against the loopback registry, on SQLite, MariaDB and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select

from stagecrawl.crates.names import event_id
from stagecrawl.crates.plugin import CrateRows
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.kernel.collecting import Collector, CollectSettings
from stagecrawl.kernel.phases import seed
from stagecrawl.kernel.seeding import SeedReport
from stagecrawl.queue.events import COLLECTED
from stagecrawl.storage.db import Database
from tests.crates.conftest import Registry
from tests.crates.kernel import CRATES, claim, crates_client, event_list, outcome, release, rust
from tests.crates.registry import INDEX, version_count


async def crawl(db: Database, registry: Registry, names: list[str], **settings: Any) -> Any:
    """Seed, then collect, as two separate runs (the streaming crawl is tested in the CLI)."""
    s = registry.settings()
    stop = GracefulStop()
    async with crates_client(s) as client:
        seeded = await seed(db, CRATES, client, names, stop) if names else None
        collector = Collector(db, CRATES, client, CollectSettings(**settings), stop=stop)
        summary = await collector.run()
    return (seeded.seed if seeded else SeedReport(CRATES.decl.words)), summary


def rows(db: Database, table: Any) -> list[dict[str, Any]]:
    with db.engine.connect() as conn:
        result = conn.execute(select(table).order_by(*table.primary_key.columns))
        return [dict(r._mapping) for r in result]


def versions(db: Database) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["PRODUCT_KEY"], r["VERSION"]): r for r in rows(db, rust(db).version)}


ALL = ["a", "cc", "syn", "serde_json", "quick-xml", "noapi", "ghost"]


async def test_collects_every_version_with_index_as_authority(
    db_url: str, registry: Registry
) -> None:
    db = Database(db_url)
    report, summary = await crawl(db, registry, ALL)
    assert report.not_found == ["ghost"]
    got = versions(db)
    assert len(got) == version_count()
    assert summary.outcomes[1] == version_count() and summary.failed == 0

    yanked = got[("cc", "1.0.1")]
    assert yanked["YANKED"] in (True, 1)  # collected and flagged, never dropped
    renamed = json.loads(got[("quick-xml", "0.31.0")]["DEPENDENCIES"])
    assert renamed == [
        {
            "name": "encoding_rs",
            "rename": "encoding",
            "req": "^0.8",
            "kind": "normal",
            "optional": True,
            "default_features": True,
            "features": [],
            "target": None,
        }
    ]
    assert got[("quick-xml", "0.31.0")]["LINKS"] == "xml"
    target = json.loads(got[("syn", "2.0.0")]["DEPENDENCIES"])[0]
    assert (target["target"], target["kind"]) == ("cfg(windows)", "build")
    assert got[("syn", "2.0.0")]["RUST_VERSION"] == "1.61"
    features = json.loads(got[("serde_json", "1.0.1")]["FEATURES"])
    assert features == {"preserve_order": ["dep:indexmap"], "std": []}  # features2 merged
    sj = got[("serde_json", "1.0.0")]
    assert sj["NAME"] == "serde_json" and sj["LICENSE"] == "MIT OR Apache-2.0"
    assert sj["CHECKSUM"] == json.loads(INDEX["serde_json"][0])["cksum"]
    assert str(sj["RELEASE_DATE"]) == "2021-01-02 03:04:05"
    assert json.loads(sj["SCM"])["repository"] == "https://example.org/serde_json"

    # The API answered 404 for noapi: collected anyway, enrichment left NULL.
    noapi = got[("noapi", "0.1.0")]
    assert noapi["DESCRIPTION"] is None and noapi["LICENSE"] is None and noapi["SCM"] is None

    products = {r["PRODUCT_KEY"]: r for r in rows(db, rust(db).product)}
    assert set(products) == {"a", "cc", "syn", "serde_json", "quick-xml", "noapi"}
    assert products["cc"]["LATEST_VERSION"] == "1.0.0"  # 1.0.1 yanked, 1.1.0-beta.1 pre
    assert products["cc"]["VERSION_COUNT"] == 3
    assert json.loads(products["syn"]["KEYWORDS"]) == ["parser"]

    # One index request and one API request per crate, whatever its version count.
    index_paths = [r.path for r in registry.index.log if r.path != "/config.json"]
    assert sorted(index_paths) == sorted(set(index_paths))
    api_paths = [r.path for r in registry.api.log]
    assert len(api_paths) == len(set(api_paths)) == 6


async def test_spellings_merge_into_one_event_and_the_real_name_is_stored(
    db_url: str, registry: Registry
) -> None:
    db = Database(db_url)
    await crawl(db, registry, ["Serde_Json", "serde-json", "QUICK_XML"])
    events = rows(db, rust(db).list)
    assert len(events) == len(INDEX["serde_json"]) + len(INDEX["quick-xml"])
    assert {e["NAME"] for e in events} == {"serde_json", "quick-xml"}
    assert {e["CRATE_NAME"] for e in events} == {"serde-json", "quick-xml"}
    ids = {e["ID"] for e in events}
    assert event_id("SERDE_JSON", "1.0.0") in ids and event_id("quick-xml", "0.31.0") in ids
    assert {k[0] for k in versions(db)} == {"serde_json", "quick-xml"}


async def test_seed_and_collect_twice_leave_identical_tables(
    db_url: str, registry: Registry
) -> None:
    db = Database(db_url)
    await crawl(db, registry, ALL)
    first = [rows(db, t) for t in (rust(db).list, rust(db).version, rust(db).product)]
    _, summary = await crawl(db, registry, ALL)
    assert [rows(db, t) for t in (rust(db).list, rust(db).version, rust(db).product)] == first
    assert sum(summary.outcomes.values()) == 0  # nothing claimable the second time


async def test_broken_index_goes_to_the_ladder_then_recovers(
    db_url: str, registry: Registry
) -> None:
    db = Database(db_url)
    s = registry.settings()
    async with crates_client(s) as client:
        await seed(db, CRATES, client, ["a", "cc"], GracefulStop())
    broken = registry.index.rule("/1/a", invalid_json=True)
    await crawl(db, registry, [])
    state = {(e["NAME"], e["VERSION"]): e for e in rows(db, rust(db).list)}
    assert state[("a", "0.1.0")]["PROCESSED"] == 30
    assert "not JSON" in state[("a", "0.1.0")]["LAST_ERROR"]
    assert state[("cc", "1.0.0")]["PROCESSED"] == 1  # the other crate is collected
    registry.index.rules.remove(broken)
    await crawl(db, registry, [])
    state = {(e["NAME"], e["VERSION"]): e for e in rows(db, rust(db).list)}
    assert state[("a", "0.1.0")]["PROCESSED"] == 1 and state[("a", "0.1.0")]["LAST_ERROR"] is None


async def test_leases_keep_workers_apart_and_a_lost_lease_writes_nothing(
    db_url: str, registry: Registry
) -> None:
    db = Database(db_url)
    await crawl(db, registry, ["a"], limit=0)  # seed only
    first = claim(db, "worker-1", 10, lease_seconds=600)
    assert len(first) == 2
    assert claim(db, "worker-2", 10, lease_seconds=600) == []  # leased: nothing for worker 2
    release(db, "worker-1", [e.id for e in first])

    stale = claim(db, "worker-1", 10, lease_seconds=-5)  # a lease that has already run out
    taken = claim(db, "worker-2", 10, lease_seconds=600)
    assert {e.id for e in taken} == {e.id for e in stale}
    outcomes = [outcome(e, COLLECTED) for e in stale]

    def write(conn: Any, kept: list[int]) -> None:
        CRATES.write(conn, db, [CrateRows([], {}, {}) for _ in kept])

    queue = event_list(db).queue
    assert queue.complete("worker-1", [outcomes], write, [[e.id for e in stale]]) == [False]
    state = rows(db, rust(db).list)
    assert {e["CLAIMED_BY"] for e in state} == {"worker-2"}
    assert {e["PROCESSED"] for e in state} == {0}
