"""The kernel's acceptance behaviours where Go has its own stakes, as a user runs them (the CLI
in real processes against the look-alike): a hostile proxy (case-encoded paths, a captcha, a
broken go.mod) fails modules not the run, several workers share one LIST and one Redis limit,
identity is case-sensitive on every backend. Kill -9, SIGINT, outages, a killed worker's leases
and bad names are proved for Go with every registry (tests/acceptance/test_every_registry.py)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import create_engine, text

from stagecrawl.testing.go_origin import GoOrigin
from tests.cli import spawn, stagecrawl
from tests.services import MARIADB_URL, POSTGRES_URL, REDIS_URL, drop_stagecrawl_tables

MODULES = [f"example.com/team{i}/Mod{i:02d}" for i in range(12)]
VOLATILE = {"LAST_UPDATED", "TIMESTAMP", "CLAIMED_BY", "CLAIMED_UNTIL", "CLAIMED_AT"}
TABLES = ("TB_COMP_LIB_GOLANG_LIST", "TB_COMP_LIB_VERSION_GOLANG", "TB_COMP_LIB_PRODUCT_GOLANG")


@pytest.fixture
def origin() -> Iterator[GoOrigin]:
    server = GoOrigin()
    for n, path in enumerate(MODULES):
        for v in range(3 + n % 4):
            retract = "retract v1.0.0\n" if v else ""
            mod = f"module {path}\n\ngo 1.2{v}\n\nrequire example.com/dep v0.{n}.0\n{retract}"
            server.publish(path, f"v1.{v}.0", mod)
    server.start()
    yield server
    server.stop()


def urls(origin: GoOrigin, rate: str = "60") -> list[str]:
    return [
        *("--proxy-url", origin.proxy_url, "--index-url", origin.index_url),
        *("--proxy-rate", rate, "--contact", "tests@example.org"),
    ]


def dump(url: str) -> dict[str, list[dict[str, Any]]]:
    engine = create_engine(url)
    quote = engine.dialect.identifier_preparer.quote
    result = {}
    with engine.connect() as conn:
        for table in TABLES:
            rows = conn.execute(text(f"SELECT * FROM {quote(table)}")).mappings()
            kept = [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]
            result[table] = sorted(kept, key=repr)
    engine.dispose()
    return result


def count(db: Path, sql: str) -> int:
    connection = sqlite3.connect(db)
    try:
        return int(connection.execute(sql).fetchone()[0])
    finally:
        connection.close()


def test_hostile_origin_fails_modules_not_the_run(origin: GoOrigin, tmp_path: Path) -> None:
    db = tmp_path / "hostile.db"
    url = f"sqlite:///{db}"
    escaped = [m.lower().replace("/mod", "/!mod") for m in MODULES]
    origin.rule(f"{origin.prefix}{escaped[0]}/@v/v1.1.0.info", body=b"<html>captcha</html>")
    origin.rule(f"{origin.prefix}{escaped[1]}/@v/v1.0.0.mod", body=b"module (\n")
    origin.rule(f"{origin.prefix}{escaped[2]}/@v/list", fail_times=99, fail_status=500)
    origin.rule(f"{origin.prefix}{escaped[3]}/@v/*.info", too_many=2, retry_after="1")
    done = stagecrawl("go", "crawl", *MODULES, "--db", url, *urls(origin), "--format", "json")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    stored = count(db, "SELECT COUNT(DISTINCT PRODUCT_KEY) FROM TB_COMP_LIB_VERSION_GOLANG")
    assert stored == len(MODULES) - 3  # the 429s were waited out
    origin.clear_rules()
    rerun = stagecrawl("go", "crawl", *MODULES, "--db", url, *urls(origin))
    assert rerun.returncode == 0, rerun.stderr
    stored = count(db, "SELECT COUNT(DISTINCT PRODUCT_KEY) FROM TB_COMP_LIB_VERSION_GOLANG")
    assert stored == len(MODULES)


@pytest.fixture
def pacing_keys() -> Iterator[None]:
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter("stagecrawl:pace:*"):
        client.delete(key)
    yield
    client.close()


@pytest.mark.parametrize("db_url", [MARIADB_URL, POSTGRES_URL], ids=["mariadb", "postgresql"])
def test_three_workers_share_the_list_and_one_limit(
    db_url: str, origin: GoOrigin, pacing_keys: None
) -> None:
    drop_stagecrawl_tables(db_url)
    assert stagecrawl("go", "seed", *MODULES, "--db", db_url, *urls(origin)).returncode == 0
    rate = ["--proxy-rate", "12", "--redis-url", REDIS_URL, "--concurrency", "2"]
    origin.log.clear()
    workers = [spawn("go", "collect", "--db", db_url, *urls(origin), *rate) for _ in range(3)]
    codes = [w.wait(300) for w in workers]
    assert codes == [0, 0, 0], [w.stderr.read() for w in workers if w.stderr]
    tables = dump(db_url)
    assert {r["PROCESSED"] for r in tables["TB_COMP_LIB_GOLANG_LIST"]} == {1}
    assert len(tables["TB_COMP_LIB_VERSION_GOLANG"]) == sum(3 + n % 4 for n in range(12))
    # case-sensitive identity on the server too: the mixed-case keys came back as written
    assert {r["PRODUCT_KEY"] for r in tables["TB_COMP_LIB_PRODUCT_GOLANG"]} == set(MODULES)
    assert origin.max_in_window(f"{origin.prefix}*", 1.0) <= 13  # one limit for the three
    drop_stagecrawl_tables(db_url)


@pytest.mark.slow
def test_case_sensitive_identity_on_every_backend(db_url: str, origin: GoOrigin) -> None:
    for path in ("example.com/BurntSushi/toml", "example.com/burntsushi/toml"):
        origin.publish(path, "v1.0.0", f"module {path}\n")
    names = ["example.com/BurntSushi/toml", "example.com/burntsushi/toml"]
    done = stagecrawl("go", "crawl", *names, "--db", db_url, *urls(origin))
    assert done.returncode == 0, done.stderr
    keys = sorted(r["PRODUCT_KEY"] for r in dump(db_url)["TB_COMP_LIB_PRODUCT_GOLANG"])
    assert keys == sorted(names)
