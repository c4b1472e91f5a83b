"""A Go refresh costs what changed (issue 33): it follows the index feed from the cursor kept in
the database, asks only the stored modules the feed names, and stores the cursor only with the
work it implies, so a refresh that failed or stopped and is run again misses nothing. The feed
client keeps `since` inclusive and never steps it by a nanosecond (the real feed's tie at a page
boundary, ../shared/fixtures/go/index)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from aiohttp import web

from stagecrawl.engine.fetcher import Fetcher
from stagecrawl.engine.ratelimit import Lane, Lanes
from stagecrawl.go.client import GoClient
from stagecrawl.testing.go_origin import GoOrigin
from stagecrawl.testing.origin import TestOrigin
from tests.cli import stagecrawl
from tests.services import SHARED

INDEX = SHARED / "fixtures" / "go" / "index"
STORED = [f"example.com/stored/m{i:02d}" for i in range(40)]


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.fixture
def origin() -> Iterator[GoOrigin]:
    server = GoOrigin()
    for path in STORED:
        server.publish(path, "v1.0.0", f"module {path}\n\ngo 1.22\n", when="2024-01-01T00:00:00Z")
    server.start()
    yield server
    server.stop()


def urls(origin: GoOrigin) -> list[str]:
    return [
        *("--proxy-url", origin.proxy_url, "--index-url", origin.index_url),
        *("--proxy-rate", "100", "--index-rate", "100", "--contact", "t@example.org"),
    ]


def one(db: Path, sql: str) -> object:
    connection = sqlite3.connect(db)
    try:
        return connection.execute(sql).fetchone()[0]
    finally:
        connection.close()


def test_refresh_follows_the_feed_and_asks_only_what_changed(
    origin: GoOrigin, tmp_path: Path
) -> None:
    db = tmp_path / "r.db"
    url = f"sqlite:///{db}"
    assert stagecrawl("go", "crawl", *STORED, "--db", url, *urls(origin)).returncode == 0
    # no cursor yet: every stored module is asked once (a conditional GET: 304) and the
    # cursor starts
    first = stagecrawl("go", "refresh", "--db", url, *urls(origin), "--format", "json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["refresh"]["not_modified"] == len(STORED)
    assert one(db, "SELECT COUNT(*) FROM TB_COMP_LIB_GOLANG_INDEX_CURSOR") == 1

    # four changes, in the feed after the cursor: two new versions, a retraction by a new
    # latest, and a module nobody stored (not ours to register in this scope)
    changed = STORED[:3]
    origin.publish(changed[0], "v1.1.0", f"module {changed[0]}\n\ngo 1.22\n", when=now())
    origin.publish(changed[1], "v1.0.1-0.20260101000000-0123456789ab", None, when=now())
    origin.publish(changed[2], "v1.1.0", f"module {changed[2]}\n\nretract v1.0.0 // oops\n",
                   when=now())  # fmt: skip
    origin.publish("example.com/elsewhere", "v0.1.0", None, when=now())
    origin.log.clear()
    done = stagecrawl("go", "refresh", "--db", url, *urls(origin), "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert sorted(report["refresh"]["changed"]) == sorted(changed)
    proxy = [r for r in origin.log if r.path.startswith(origin.prefix)]
    # about what the three need (a list and a latest go.mod each; .info and .mod of the
    # three new versions), not one request per stored module
    assert len(proxy) <= 3 * 2 + 3 * 2 + 3, [r.path for r in proxy]
    assert {p for p in STORED[3:] if any(p in r.path for r in proxy)} == set()
    assert one(db, "SELECT COUNT(*) FROM TB_COMP_LIB_VERSION_GOLANG") == len(STORED) + 3
    retracted = f"SELECT RETRACTED_REASON FROM TB_COMP_LIB_VERSION_GOLANG WHERE PRODUCT_KEY = '{changed[2]}' AND VERSION = 'v1.0.0' AND YANKED = 1 AND RETRACTED = 1"  # noqa: E501
    assert one(db, retracted) == "oops"
    assert one(db, "SELECT COUNT(*) FROM TB_COMP_LIB_PRODUCT_GOLANG") == len(STORED)

    # nothing new: the feed page alone
    origin.log.clear()
    again = stagecrawl("go", "refresh", "--db", url, *urls(origin), "--format", "json")
    assert again.returncode == 0 and json.loads(again.stdout)["refresh"]["changed"] == []
    assert [r.path for r in origin.log] == ["/index"]


def test_a_failed_refresh_keeps_its_cursor_and_the_rerun_misses_nothing(
    origin: GoOrigin, tmp_path: Path
) -> None:
    db = tmp_path / "f.db"
    url = f"sqlite:///{db}"
    assert stagecrawl("go", "crawl", *STORED[:5], "--db", url, *urls(origin)).returncode == 0
    assert stagecrawl("go", "refresh", "--db", url, *urls(origin)).returncode == 0
    cursor = one(db, "SELECT SINCE FROM TB_COMP_LIB_GOLANG_INDEX_CURSOR")
    for path in STORED[:2]:
        origin.publish(path, "v1.2.0", None, when=now())
    escaped = STORED[1].replace("/m", "/m")
    origin.rule(f"{origin.prefix}{escaped}/@v/list", fail_times=99, fail_status=502)
    failed = stagecrawl("go", "refresh", "--db", url, *urls(origin))
    assert failed.returncode == 1
    assert one(db, "SELECT SINCE FROM TB_COMP_LIB_GOLANG_INDEX_CURSOR") == cursor
    origin.clear_rules()
    rerun = stagecrawl("go", "refresh", "--db", url, *urls(origin))
    assert rerun.returncode == 0, rerun.stderr
    assert one(db, "SELECT COUNT(*) FROM TB_COMP_LIB_VERSION_GOLANG WHERE VERSION = 'v1.2.0'") == 2
    assert one(db, "SELECT SINCE FROM TB_COMP_LIB_GOLANG_INDEX_CURSOR") != cursor


def test_the_feed_is_walked_with_an_inclusive_since_through_a_tie() -> None:
    if not INDEX.exists():
        pytest.skip(f"{INDEX} is absent (the shared Go fixtures are not laid beside the checkout)")
    pages = {}
    for line in (INDEX / "pages.tsv").read_text().splitlines()[1:]:
        name, request, *_ = line.split("\t")
        if name.startswith("limit100"):
            since = request.split("since=")[1].split("&")[0]
            pages[since] = (INDEX / name).read_bytes()
    asked: list[str] = []

    async def feed(request: web.Request) -> web.Response:
        asked.append(request.query["since"])
        assert request.query["limit"] == "100"
        return web.Response(body=pages.get(request.query["since"], b""))

    async def walk() -> list[tuple[str, str, str]]:
        server = TestOrigin()
        server.handle("/index", feed)
        await server.start_async()
        try:
            lanes = Lanes([Lane("index", server.url + "/index", None)])
            async with Fetcher(lanes=lanes) as fetcher:
                client = GoClient(fetcher, server.url + "/mirror/", server.url + "/index")
                client.page = 100
                first = min(pages)
                return [
                    (r.path, r.version, r.timestamp) async for p in client.feed(first) for r in p
                ]
        finally:
            await server.stop_async()

    rows = asyncio.run(walk())
    assert len(rows) == 256 == len({(p, v) for p, v, _t in rows})  # 258 served, 2 repeats
    assert ("github.com/prometheus/prometheus", "v0.40.3") in {(p, v) for p, v, _ in rows}
    # each page asked from the previous page's last Timestamp, as sent, never + 1 ns
    assert asked == sorted(pages) and asked[1] == "2022-11-24T09:14:22.92295Z"
