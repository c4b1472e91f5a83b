"""`pypi refresh`: conditional GETs; new versions become events, yanks and their reversal
flip VERSION and LIST, PRODUCT follows (latest version, ETag, serial)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from sqlalchemy import select

from stagecrawl.storage.db import Database
from stagecrawl.testing.pypi_origin import PyPIOrigin
from tests.cli import stagecrawl
from tests.pypi.kernel import client, collect, refresh, tables
from tests.pypi.test_pipeline import rows

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
    async with client(pypi) as c:
        await collect(db, c, NAMES)
    product = {r["PRODUCT_KEY"]: r for r in rows(db, "product")}
    assert product["requests"]["ETAG"] and product["requests"]["LAST_SERIAL"]

    before = len(pypi.requests_to("/simple/*"))
    async with client(pypi) as c:
        quiet = await refresh(db, c)
    # the root listing's serials say nothing moved: nothing more is asked
    assert (quiet.checked, quiet.changed) == (0, [])
    assert [r.path for r in pypi.requests_to("/simple/*")[before:]] == ["/simple/"]

    pypi.yank("requests", "2.19.0", "broken")
    add_release(pypi, "six", "1.12.0")
    async with client(pypi) as c:
        changed = await refresh(db, c)
        # only the two projects whose serial moved are asked (toga's did not)
        assert (changed.checked, changed.changed, changed.new_events) == (2, ["requests", "six"], 1)
        assert changed.yanked_changes == 1
        await collect(db, c)
    version = {(r["PRODUCT_KEY"], r["VERSION"]): r for r in rows(db, "version")}
    assert version[("requests", "2.19.0")]["YANKED"]
    assert ("six", "1.12.0") in version
    assert version[("six", "1.12.0")]["DEPENDENCIES"] is None  # no metadata, API: null
    listed = {(r["PROJECT_NAME"], r["VERSION"]): r for r in rows(db, "list")}
    assert listed[("requests", "2.19.0")]["YANKED"]
    product = {r["PRODUCT_KEY"]: r for r in rows(db, "product")}
    assert product["requests"]["LATEST_VERSION"] == "2.18.4"
    assert product["six"]["LATEST_VERSION"] == "1.12.0"
    assert product["six"]["VERSION_COUNT"] == 2

    pypi.yank("requests", "2.19.0", False)  # the yank reversed
    async with client(pypi) as c:
        back = await refresh(db, c, ["requests"])
    assert (back.checked, back.yanked_changes) == (1, 1)
    with db.engine.connect() as conn:
        t = tables(db).product
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
    assert document["collect"]["collected"] == 1
