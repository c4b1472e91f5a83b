"""Several `pypi collect` workers share PyPI's LIST (MariaDB, PostgreSQL) and one Redis
limit: every event collected once, the lanes' pace held by all of them together."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy import func, select

from stagecrawl.pypi.plugin import REGISTRY as PYPI
from stagecrawl.storage.db import Database
from stagecrawl.testing.pypi_origin import PyPIOrigin, synthetic_project
from tests.cli import spawn, stagecrawl
from tests.services import MARIADB_URL, POSTGRES_URL, REDIS_URL, drop_stagecrawl_tables

NAMES = [f"work-{i:02d}" for i in range(10)]


@pytest.fixture
def shared_origin() -> Iterator[PyPIOrigin]:
    server = PyPIOrigin()
    for n, name in enumerate(NAMES):
        project = synthetic_project(name, 2 + n % 3)
        for f in project.page["files"]:  # every version through the JSON API: the api lane
            f["core-metadata"] = f["data-dist-info-metadata"] = False
        server.add_project(project)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def pacing_keys() -> Iterator[None]:
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter("stagecrawl:pace:*"):
        client.delete(key)
    yield
    for key in client.scan_iter("stagecrawl:pace:*"):
        client.delete(key)
    client.close()


@pytest.mark.parametrize("db_url", [MARIADB_URL, POSTGRES_URL], ids=["mariadb", "postgresql"])
def test_three_workers_share_the_queue_and_one_limit(
    db_url: str, shared_origin: PyPIOrigin, pacing_keys: None, tmp_path: Path
) -> None:
    drop_stagecrawl_tables(db_url)
    urls = [
        *("--index-url", f"{shared_origin.url}/simple/", "--api-url", f"{shared_origin.url}/"),
        *("--contact", "t@example.org"),
    ]
    seeded = stagecrawl("pypi", "seed", *NAMES, "--db", db_url, *urls)
    assert seeded.returncode == 0, seeded.stderr
    rate = ["--api-rate", "6", "--redis-url", REDIS_URL, "--concurrency", "2"]
    started = time.monotonic()
    workers = [spawn("pypi", "collect", "--db", db_url, *urls, *rate) for _ in range(3)]
    codes = [w.wait(300) for w in workers]
    assert codes == [0, 0, 0], [w.stderr.read() for w in workers if w.stderr]
    assert time.monotonic() - started < 300
    db = Database(db_url)
    t = PYPI.tables(db)
    with db.engine.connect() as conn:
        states = conn.execute(select(t.list.c.PROCESSED, t.list.c.CLAIMED_BY)).all()
        versions = conn.execute(select(func.count()).select_from(t.version)).scalar_one()
    db.dispose()
    assert {s.PROCESSED for s in states} == {1} and {s.CLAIMED_BY for s in states} == {None}
    assert versions == len(states) == sum(2 + n % 3 for n in range(len(NAMES)))
    # one limit for the three: the api lane never went faster than 6/s together
    assert shared_origin.max_in_window("/pypi/*", 1.0) <= 7
    drop_stagecrawl_tables(db_url)
