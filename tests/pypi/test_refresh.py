"""`pypi refresh`: conditional GETs; new versions become events, yanks and their reversal
flip VERSION and LIST, PRODUCT follows (latest version, ETag, serial)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from sqlalchemy import select

from stagecrawl.storage.db import Database
from stagecrawl.testing.pypi_origin import PyPIOrigin, synthetic_project
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


def test_a_refresh_of_400_projects_with_4_changed_costs_what_changed(tmp_path: Path) -> None:
    """Issue 33: 400 stored projects, 4 changed (two new versions, a yank, a metadata change):
    the refresh reads the root listing once and asks the 4 whose serial moved — its requests
    follow the 4, not the 400 (before: one per stored project) — and stores exactly the
    changes (a rerun finds nothing)."""
    origin = PyPIOrigin()
    names = [f"held-{i:03d}" for i in range(400)]
    for name in names:
        origin.add_project(synthetic_project(name, 2))
    url = f"sqlite:///{tmp_path / 'h.db'}"
    with origin:
        args = [
            *("--index-url", f"{origin.url}/simple/", "--api-url", f"{origin.url}/"),
            *("--contact", "t@example.org", "--db", url, "--format", "json"),
            *("--index-rate", "500", "--api-rate", "500", "--files-rate", "500"),
        ]
        seeds = tmp_path / "seeds.txt"
        seeds.write_text("\n".join(names))
        crawled = stagecrawl("pypi", "crawl", "--file", str(seeds), *args)
        assert crawled.returncode == 0, crawled.stderr
        before = Database(url)
        stored = {table: rows(before, table) for table in ("version", "product")}
        before.dispose()

        add_release(origin, "held-007", "1.0.2")
        add_release(origin, "held-123", "1.0.2")
        origin.yank("held-250", "1.0.0", "broken")
        changed = origin.project("held-399")
        for f in changed.page["files"]:
            f["requires-python"] = ">=3.10"
        changed.last_serial += 1
        asked = len(origin.log)
        done = stagecrawl("pypi", "refresh", *args)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        sent = len(origin.log) - asked
        assert report["refresh"]["checked"] == 4
        assert sorted(report["refresh"]["changed"]) == [
            "held-007",
            "held-123",
            "held-250",
            "held-399",
        ]
        # the root listing, the 4 pages, and the collect of the 2 new versions (their project
        # answers and files): in proportion to the 4, where asking each stored project was 400
        assert sent <= 4 * 4 + 1, [r.path for r in origin.log[asked:]]
        assert sum(report["requests"].values()) == sent
        # the collect reads the pages the refresh found changed: each asked once, not twice
        pages = [r.path for r in origin.log[asked:] if r.path.startswith("/simple/held-")]
        assert sorted(pages) == [f"/simple/{n}/" for n in ("held-007", "held-123")] + [
            f"/simple/{n}/" for n in ("held-250", "held-399")
        ]

        again = stagecrawl("pypi", "refresh", *args)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["refresh"]["checked"] == 0
    after = Database(url)
    version = {(r["PRODUCT_KEY"], r["VERSION"]): r for r in rows(after, "version")}
    product = {r["PRODUCT_KEY"]: r for r in rows(after, "product")}
    after.dispose()
    old_version = {(r["PRODUCT_KEY"], r["VERSION"]): r for r in stored["version"]}
    assert set(version) - set(old_version) == {("held-007", "1.0.2"), ("held-123", "1.0.2")}
    assert (
        version[("held-250", "1.0.0")]["YANKED"]
        and not old_version[("held-250", "1.0.0")]["YANKED"]
    )
    untouched = [k for k in old_version if k[0] not in {"held-250"}]
    volatile = {"LAST_UPDATED"}
    for key in untouched:
        assert {c: v for c, v in version[key].items() if c not in volatile} == {
            c: v for c, v in old_version[key].items() if c not in volatile
        }, key
    old_product = {r["PRODUCT_KEY"]: r for r in stored["product"]}
    moved = {k for k in product if product[k]["LAST_SERIAL"] != old_product[k]["LAST_SERIAL"]}
    assert moved == {"held-007", "held-123", "held-250", "held-399"}
