"""`pypi refresh`: conditional GETs; new versions become events, yanks and their reversal
flip VERSION and LIST, PRODUCT follows (latest version, ETag, serial)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from sqlalchemy import select
from stagecrawl.pypi.pipeline import CollectSettings
from stagecrawl.pypi.refresh import refresh

from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.pypi import pipeline, tables
from stagecrawl.storage.db import Database
from stagecrawl.testing.pypi_origin import PyPIOrigin
from tests.cli import stagecrawl
from tests.pypi.test_pipeline import client, rows

NAMES = ["requests", "six", "toga"]


def add_release(origin: PyPIOrigin, name: str, version: str) -> None:
    project = origin.project(name)
    old = project.versions()[-1]
    for f in [f for f in project.page["files"] if old in f["filename"]]:
        new = copy.deepcopy(f)
        new["filename"] = f["filename"].replace(old, version)
        new["url"] = f["url"].replace(old, version)
        new["core-metadata"] = new["data-dist-info-metadata"] = False
        project.page["files"].append(new)
    project.page["versions"].append(version)
    project.last_serial += 1


async def test_refresh_flips_yanks_and_registers_new_versions(
    pypi: PyPIOrigin, tmp_path: Path
) -> None:
    db = Database(f"sqlite:///{tmp_path / 'r.db'}")
    c = client(pypi)
    async with c.fetcher:
        await pipeline.collect(db, c, CollectSettings(), GracefulStop("t"), names=NAMES)
    product = {r["PRODUCT_KEY"]: r for r in rows(db, "product")}
    assert product["requests"]["ETAG"] and product["requests"]["LAST_SERIAL"]

    before = len(pypi.requests_to("/simple/*"))
    c = client(pypi)
    async with c.fetcher:
        quiet = await refresh(db, c, [], GracefulStop("t"))
    assert (quiet.checked, quiet.unchanged, quiet.changed) == (3, 3, 0)
    assert [r.status for r in pypi.requests_to("/simple/*")[before:]] == [304, 304, 304]

    pypi.yank("requests", "2.19.0", "broken")
    add_release(pypi, "six", "1.12.0")
    c = client(pypi)
    async with c.fetcher:
        changed = await refresh(db, c, [], GracefulStop("t"))
        assert (changed.unchanged, changed.changed, changed.new_events) == (1, 2, 1)
        assert changed.yank_flips == 1
        await pipeline.collect(db, c, CollectSettings(), GracefulStop("t"))
    version = {(r["PRODUCT_KEY"], r["VERSION"]): r for r in rows(db, "version")}
    assert version[("requests", "2.19.0")]["YANKED"]
    assert ("six", "1.12.0") in version
    assert version[("six", "1.12.0")]["DEPENDENCIES"] is None  # no metadata, API: null
    listed = {(r["CRATE_NAME"], r["VERSION"]): r for r in rows(db, "list")}
    assert listed[("requests", "2.19.0")]["YANKED"]
    product = {r["PRODUCT_KEY"]: r for r in rows(db, "product")}
    assert product["requests"]["LATEST_VERSION"] == "2.18.4"
    assert product["six"]["LATEST_VERSION"] == "1.12.0"
    assert product["six"]["VERSION_COUNT"] == 2

    pypi.yank("requests", "2.19.0", False)  # the yank reversed
    c = client(pypi)
    async with c.fetcher:
        back = await refresh(db, c, ["requests"], GracefulStop("t"))
    assert (back.checked, back.yank_flips) == (1, 1)
    with db.engine.connect() as conn:
        t = tables.tables(db).product
        latest = conn.execute(select(t.c.LATEST_VERSION).where(t.c.PRODUCT_KEY == "requests"))
        assert latest.scalar_one() == "2.19.0"


def test_refresh_command(pypi: PyPIOrigin, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    args = [
        *("--index-url", f"{pypi.url}/simple/", "--api-url", f"{pypi.url}/"),
        *("--contact", "t@example.org", "--db", url),
    ]
    assert stagecrawl("pypi", "crawl", "six", *args).returncode == 0
    add_release(pypi, "six", "1.12.0")
    done = stagecrawl("pypi", "refresh", *args, "--format", "json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["refresh"]["new_events"] == 1
    assert document["collect"]["collect"]["collected"] == 1
