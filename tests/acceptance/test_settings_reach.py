"""Every declared flag reaches the part it configures: each command runs with non-default
values, and the effect is observed where it lands — the loopback origins' own request logs
(URLs, User-Agent, requests in flight), the database, Redis, the cache folder — or, for the
knobs whose effect takes minutes to show (budgets, lease, deadlines), the `settings` section of
the `--format json` summary, which is read off the built parts (lanes, fetcher, work loops),
not off the settings object."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from aiohttp import web
from sqlalchemy import func, select

from stagecrawl.cli.commands import load
from stagecrawl.demo import make_app_repo
from stagecrawl.demo.wikidata import install
from stagecrawl.settings import BY_NAME
from stagecrawl.storage.db import Database
from stagecrawl.testing.dbdump import build_dump
from stagecrawl.testing.origin import TestOrigin
from tests.acceptance.conftest import NAMES as ALL_NAMES
from tests.acceptance.conftest import Mirror, stagecrawl
from tests.acceptance.registry import APP_PINS
from tests.crates.kernel import rust
from tests.services import REDIS_URL

CONTACT = "reach-test@example.org"
NAMES = ALL_NAMES[:6]
STALL = 0.5  # seconds each index answer takes: requests in flight show as arrivals within it
# What each command's flags are observed through in the tests below; a new flag without an
# observation fails `test_every_declared_flag_is_observed`.
CRATES_INDEX = {
    "crates.index_url",
    "crates.index_rate",
    "crates.index_burst",
    "crates.index_budget",
}
CRATES_LANES = CRATES_INDEX | {
    "crates.api_url",
    "crates.api_rate",
    "crates.api_burst",
    "crates.api_budget",
}
PYPI_LANES = {
    "pypi.index_url",
    "pypi.api_url",
    "pypi.index_rate",
    "pypi.api_rate",
    "pypi.files_rate",
}
NETWORK = {"db", "contact", "concurrency", "redis_url", "grace_period"}
COLLECTING = NETWORK | {"lease_seconds", "ai_license_url", "ai_rate"}
OBSERVED = {
    "crates seed": CRATES_LANES | NETWORK,
    "crates collect": CRATES_LANES | COLLECTING,
    "crates crawl": CRATES_LANES | COLLECTING,
    "crates lock": CRATES_INDEX | {"crates.api_url", "cache_dir", "db", "contact"},
    "crates refresh": CRATES_LANES | COLLECTING,
    "crates dbdump": {"db", "contact"},
    "crates audit": {"crates.index_url", "cache_dir", "db"},
    "crates licenses check": {"crates.index_url", "cache_dir", "db"},
    "pypi seed": PYPI_LANES | NETWORK,
    "pypi collect": PYPI_LANES | COLLECTING,
    "pypi crawl": PYPI_LANES | COLLECTING,
    "pypi refresh": PYPI_LANES | COLLECTING,
    "pypi lock": {"pypi.index_url", "pypi.api_url", "cache_dir", "db"},
    "pypi audit": {"cache_dir", "db"},
    "aircraft crawl": {"sparql_url", "entities_url", "sparql_rate", "entities_rate",
                       "aircraft_concurrency", "contact", "grace_period"},
}  # fmt: skip


def declared_settings(path: str) -> set[str]:
    """The settings a command declares as flags (read from the CLI itself), by their names in
    the table (a registry's own as `crates.index_url`)."""
    first, *rest = path.split()
    command: Any = load(first)
    for part in rest:
        command = command.commands[part]
    found = set()
    for param in command.params:
        for name in (f"{first}.{param.name}", param.name):
            setting = BY_NAME.get(name)
            if setting is not None and setting.flag in getattr(param, "opts", []):
                found.add(name)
                break
    return found


@pytest.mark.parametrize("path", sorted(OBSERVED))
def test_every_declared_flag_is_observed(path: str) -> None:
    assert declared_settings(path) == OBSERVED[path]


@pytest.fixture
def pacing_keys() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter("stagecrawl:pace:*"):
        client.delete(key)
    yield client
    for key in client.scan_iter("stagecrawl:pace:*"):
        client.delete(key)
    client.close()


@pytest.fixture
def classifier() -> Iterator[TestOrigin]:
    async def classify(request: web.Request) -> web.StreamResponse:
        return web.json_response(["MIT"])

    with TestOrigin() as origin:
        origin.handle("/classify", classify)
        yield origin


def versions(db_url: str) -> int:
    db = Database(db_url, read_only=True)
    with db.engine.connect() as conn:
        count = int(conn.execute(select(func.count()).select_from(rust(db).version)).scalar_one())
    db.dispose()
    return count


def agents(*origins: TestOrigin) -> set[str]:
    return {r.headers.get("User-Agent", "") for o in origins for r in o.log}


def in_flight(origin: TestOrigin, pattern: str = "*") -> int:
    """The most requests that were on the wire at once (each answer takes STALL seconds;
    the index's config.json aside)."""
    times = sorted(
        r.time for r in origin.requests_to(pattern) if r.path != "/config.json" and r.status
    )
    best, start = 0, 0
    for end, arrived in enumerate(times):
        while arrived - times[start] >= STALL * 0.9:
            start += 1
        best = max(best, end - start + 1)
    return best


def run_json(*args: str, env: dict[str, str] | None = None, code: int = 0) -> dict[str, Any]:
    done = stagecrawl(*args, "--format", "json", env=env)
    assert done.returncode == code, done.stderr
    assert "Traceback" not in done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    return document


ENGINE_ENV = {  # the knobs without a flag: environment only
    "STAGECRAWL_COMMIT_BATCH": "5",
    "STAGECRAWL_COMMIT_BYTES": "123456",
    "STAGECRAWL_COMMIT_LINGER": "0.25",
    "STAGECRAWL_TIMEOUT": "9",
    "STAGECRAWL_DEADLINE": "33",
    "STAGECRAWL_RETRIES": "2",
    "STAGECRAWL_MAX_RETRY_AFTER": "44",
    "STAGECRAWL_MAX_BODY_MB": "2",
}


def test_crawl_and_collect_flags_reach_their_parts(
    mirror: Mirror, classifier: TestOrigin, pacing_keys: redis.Redis, tmp_path: Path
) -> None:
    mirror.index.rule("*", stall=STALL)
    db = f"sqlite:///{tmp_path / 'reach.db'}"
    flags = [
        *mirror.urls(),
        "--db", db, "--contact", CONTACT,
        "--index-rate", "40", "--api-rate", "30", "--index-burst", "3", "--api-burst", "2",
        "--index-budget", "500/60s", "--api-budget", "400/120s",
        "--concurrency", "2", "--ai-license-url", classifier.url + "/classify",
        "--ai-rate", "25", "--redis-url", REDIS_URL, "--lease-seconds", "1234",
        "--grace-period", "7",
    ]  # fmt: skip
    report = run_json("crates", "crawl", *NAMES, *flags, env=ENGINE_ENV)
    # Where the data went, whom it asked, who it said it was.
    assert versions(db) == report["collect"]["collected"] > 0
    assert mirror.index.log and mirror.api.log and classifier.log
    assert agents(mirror.index, mirror.api, classifier) == {
        next(iter(agents(mirror.index)))
    } and CONTACT in next(iter(agents(mirror.index)))
    # Two loops side by side (seeding, collecting), two crates each at most.
    assert in_flight(mirror.index) <= 4 < len(NAMES)
    assert list(pacing_keys.scan_iter("stagecrawl:pace:*"))  # the shared limiter was used
    used = report["settings"]
    assert used["lanes"]["index"] | {"url": None} == {
        "url": None, "rate": 40.0, "burst": 3, "budgets": ["500/60s"], "token": False
    }  # fmt: skip
    assert used["lanes"]["api"]["rate"] == 30.0 and used["lanes"]["api"]["burst"] == 2
    assert used["lanes"]["api"]["budgets"] == ["400/120s"]
    assert used["lanes"]["ai"]["rate"] == 25.0
    assert used["limiter"] == "redis"
    assert used["fetch"] | {"user_agent": None} == {
        "timeout": 9.0, "deadline": 33.0, "retries": 2, "max_retry_after": 44.0,
        "max_body_bytes": 2 * 2**20, "user_agent": None,
    }  # fmt: skip
    assert used["loops"]["collect"] == {
        "concurrency": 2, "commit_batch": 5, "commit_bytes": 123456, "commit_linger": 0.25,
        "grace_period": 7.0,
    }  # fmt: skip
    assert used["lease_seconds"] == 1234.0

    # collect: the same flags, on a queue made collectable again.
    mirror.index.log.clear()
    assert stagecrawl(
        "crates", "seed", *NAMES, "--resync", "--db", db, *mirror.urls()
    ).returncode in (0, 1)
    mirror.index.log.clear()
    collected = run_json("crates", "collect", "--no-skip-existing", *flags, env=ENGINE_ENV)
    assert collected["collect"]["collected"] == report["collect"]["collected"]
    assert 1 < in_flight(mirror.index) <= 2  # collect alone: its two workers
    assert collected["settings"] == used | {"loops": used["loops"]}


def test_seed_concurrency_and_refresh_concurrency_are_used(mirror: Mirror, tmp_path: Path) -> None:
    """The flags that used to be accepted and ignored (seed ran with 8, refresh with 16)."""
    mirror.index.rule("*", stall=STALL)
    db = f"sqlite:///{tmp_path / 'seed.db'}"
    flags = ["--db", db, *mirror.urls(), "--contact", CONTACT, "--index-rate", "50",
             "--index-burst", "4"]  # fmt: skip
    report = run_json(
        "crates", "seed", *NAMES, *flags, "--concurrency", "1", "--grace-period", "3",
        "--index-budget", "900/90s", "--redis-url", REDIS_URL, "--api-rate", "6",
        "--api-burst", "3", "--api-budget", "60/6s",
    )  # fmt: skip
    assert in_flight(mirror.index) == 1  # config.json aside: one crate at a time
    assert versions(db) == 0 and report["seed"]["new_events"] > 0
    seed_loop = report["settings"]["loops"]["seed"]
    assert (seed_loop["concurrency"], seed_loop["grace_period"]) == (1, 3.0)
    assert report["settings"]["lanes"]["index"]["rate"] == 50.0
    assert report["settings"]["lanes"]["index"]["burst"] == 4
    assert report["settings"]["lanes"]["index"]["budgets"] == ["900/90s"]
    assert report["settings"]["lanes"]["api"] | {"url": None} == {
        "url": None, "rate": 6.0, "burst": 3, "budgets": ["60/6s"], "token": False
    }  # fmt: skip
    assert report["settings"]["limiter"] == "redis"
    assert CONTACT in next(iter(agents(mirror.index)))
    mirror.index.log.clear()
    run_json("crates", "seed", *NAMES, *flags, "--concurrency", "3")
    assert in_flight(mirror.index) == 3  # the flag, not a constant

    collected = stagecrawl("crates", "collect", "--db", db, *mirror.urls(), "--api-rate", "50")
    assert collected.returncode == 0, collected.stderr
    for concurrency in (1, 3):
        mirror.index.log.clear()
        refreshed = run_json(
            "crates", "refresh", "--no-collect", *flags, "--concurrency", str(concurrency),
            "--redis-url", REDIS_URL, "--grace-period", "2", "--api-rate", "7",
            "--api-burst", "5", "--api-budget", "70/7s", "--index-budget", "none",
            "--lease-seconds", "77",
        )  # fmt: skip
        assert refreshed["refresh"]["checked"] == len(NAMES)
        assert in_flight(mirror.index) == concurrency
        assert CONTACT in next(iter(agents(mirror.index)))
        used = refreshed["settings"]
        assert used["lanes"]["index"] | {"url": None} == {
            "url": None, "rate": 50.0, "burst": 4, "budgets": [], "token": False
        }  # fmt: skip
        assert used["lanes"]["api"] | {"url": None} == {
            "url": None, "rate": 7.0, "burst": 5, "budgets": ["70/7s"], "token": False
        }  # fmt: skip
        assert used["limiter"] == "redis" and used["loops"]["refresh"]["grace_period"] == 2.0
    # A new version makes refresh collect, with the collect knobs it was given.
    index_file = mirror.root / "index" / "2" / "cc"
    last = json.loads(index_file.read_text().splitlines()[-1])
    with index_file.open("a") as lines:
        lines.write(json.dumps(last | {"vers": "99.0.0", "cksum": "0" * 64}) + "\n")
    refreshed = run_json(
        "crates", "refresh", *flags, "--concurrency", "2", "--lease-seconds", "77",
        "--api-rate", "9",
    )  # fmt: skip
    assert refreshed["refresh"]["new_events"] == 1 and refreshed["collect"]["collected"] == 1
    assert refreshed["settings"]["lease_seconds"] == 77.0
    assert refreshed["settings"]["loops"]["collect"]["concurrency"] == 2
    assert refreshed["settings"]["lanes"]["api"]["rate"] == 9.0


def test_lock_flags(mirror: Mirror, tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "app"
    make_app_repo(repo, APP_PINS)
    cache = tmp_path / "my-cache"
    db = f"sqlite:///{tmp_path / 'lock.db'}"
    report = run_json(
        "crates", "lock", str(repo), "--all-tags", "--cache-dir", str(cache), "--db", db,
        *mirror.urls(), "--contact", CONTACT, "--index-rate", "60",
    )  # fmt: skip
    assert report["new_events"] > 0 and any(cache.iterdir())  # the clone went there
    assert mirror.index.log and CONTACT in next(iter(agents(mirror.index)))
    found = Database(db, read_only=True)
    with found.engine.connect() as conn:
        events = conn.execute(select(func.count()).select_from(rust(found).list)).scalar_one()
    assert events == report["new_events"]


def test_dbdump_flags(tmp_path: Path) -> None:
    dump = tmp_path / "served" / "db-dump.tar.gz"
    dump.parent.mkdir()
    build_dump(dump, crates=3, versions_per=2)
    db = f"sqlite:///{tmp_path / 'dump.db'}"
    with TestOrigin(dump.parent) as origin:
        report = run_json(
            "crates", "dbdump", "--source", origin.url + "/db-dump.tar.gz", "--db", db,
            "--contact", CONTACT,
        )  # fmt: skip
        assert CONTACT in next(iter(agents(origin)))
    assert versions(db) == report["versions"] == 6


def test_aircraft_flags(tmp_path: Path) -> None:
    with TestOrigin() as wikidata:
        install(wikidata)
        wikidata.rule("/w/api.php", stall=STALL)
        report = run_json(
            "aircraft", "crawl", "--out", str(tmp_path / "air"),
            "--sparql-url", wikidata.url + "/sparql", "--entities-url", wikidata.url + "/w/api.php",
            "--sparql-rate", "20", "--entities-rate", "30", "--concurrency", "3",
            "--contact", CONTACT, "--grace-period", "4", "--batch", "1",
        )  # fmt: skip
        assert report["requests"]
        assert wikidata.requests_to("/sparql") and wikidata.requests_to("/w/api.php")
        assert CONTACT in next(iter(agents(wikidata)))
        assert in_flight(wikidata, "/w/api.php") == 3
    used = report["settings"]
    assert used["lanes"]["sparql"]["rate"] == 20.0 and used["lanes"]["entities"]["rate"] == 30.0
    assert used["loops"]["crawl"]["concurrency"] == 3
    assert used["loops"]["crawl"]["grace_period"] == 4.0
