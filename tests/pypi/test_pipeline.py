"""Seed, collect and crawl PyPI projects into VERSION and PRODUCT through the core queue."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import select

from stagecrawl.errors import InputError
from stagecrawl.kernel.collecting import CollectSettings
from stagecrawl.kernel.seeding import add_seeds
from stagecrawl.queue.events import SKIPPED
from stagecrawl.storage.db import Database
from stagecrawl.testing.pypi_origin import PyPIOrigin
from tests.pypi.kernel import PYPI, client, collect, register_lockfile, tables
from tests.pypi.test_collect import expected


def rows(db: Database, table: str) -> list[dict[str, object]]:
    t = getattr(tables(db), table)
    with db.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(select(t))]


async def test_crawl_every_fixture_project(pypi: PyPIOrigin, db_url: str) -> None:
    db = Database(db_url)
    names = sorted(p.display_name for p in pypi.projects.values())
    async with client(pypi) as c:
        report = await collect(db, c, names, CollectSettings(concurrency=4))
    assert report.seed is not None and report.collect is not None
    assert not report.seed.failed and not report.seed.not_found
    assert report.collect.failed == 0
    versions = rows(db, "version")
    got: dict[str, dict[str, tuple[bool, bool]]] = {}
    for row in versions:
        got.setdefault(str(row["PRODUCT_KEY"]), {})[str(row["VERSION"])] = (
            bool(row["YANKED"]),
            row["DEPENDENCIES"] is not None,
        )
    for name in pypi.projects:
        assert got[name] == expected(pypi, name), name
    assert all(r["LANGUAGE"] == "python" and r["REPOSITORY"] == "PyPI" for r in versions)
    products = {str(r["PRODUCT_KEY"]): r for r in rows(db, "product")}
    assert set(products) == set(pypi.projects)
    assert products["pyyaml"]["NAME"] == "PyYAML"
    assert products["black"]["LATEST_VERSION"] == "19.10b0"  # 21.11b0 is yanked
    assert products["yanked"]["COMP_STATUS"] == "YANKED"
    # one Simple request per project: the seed's page is the collector's (said by the origin's
    # own log, so that a second ask and a retried attempt can be told apart)
    asked = Counter(r.path for r in pypi.requests_to("/simple/*"))
    again = {path: [r.status for r in pypi.requests_to(path)] for path, n in asked.items() if n > 1}
    assert not again, f"Simple pages asked more than once (statuses): {again}"
    assert report.requests["index"] == len(names) == len(asked)
    listed = rows(db, "list")
    assert {r["PROCESSED"] for r in listed} == {1}
    assert {(r["PROJECT_NAME"], r["VERSION"]) for r in listed if r["YANKED"]} == {
        ("black", "21.11b0"),
        ("isodate", "0.7.0"),
        ("yanked", "0.0.0"),
    }


async def test_not_found_and_unreadable_pages_wait_on_the_ladder(
    pypi: PyPIOrigin, tmp_path: Path
) -> None:
    db = Database(f"sqlite:///{tmp_path / 'p.db'}")
    pypi.misbehave("/simple/six/", "html")
    async with client(pypi) as c:
        report = await collect(db, c, ["six", "ghost-project", "attrs"])
    assert report.seed is not None
    assert report.seed.not_found == ["ghost-project"]
    assert "HTML" in report.seed.failed["six"]
    assert {r["PRODUCT_KEY"] for r in rows(db, "version")} == {"attrs"}
    seeds = {r["PROJECT_NAME"]: r for r in rows(db, "seed")}
    assert seeds["six"]["STATE"] == 30 and "HTML" in str(seeds["six"]["LAST_ERROR"])
    pypi.clear_misbehaviour()
    async with client(pypi) as c:
        again = await collect(db, c)
    assert again.seed is not None and again.seed.units == {"six": 1}
    assert {r["PRODUCT_KEY"] for r in rows(db, "version")} == {"attrs", "six"}


async def test_lock_pins_then_collect(pypi: PyPIOrigin, tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'p.db'}")
    lock = tmp_path / "requirements.txt"
    lock.write_text("requests==2.18.0\nPyYAML==3.13.0\nsix==9.9.9\nflask>=1\n")
    report = await register_lockfile(db, lock)
    assert report.new_events == 3
    [unpinned] = report.unpinned
    assert "line 4" in unpinned and "not pinned (flask>=1)" in unpinned
    async with client(pypi) as c:
        done = await collect(db, c)
    assert done.collect is not None and done.collect.outcomes[4] == 1  # six 9.9.9: not found
    assert {(r["PRODUCT_KEY"], r["VERSION"]) for r in rows(db, "version")} == {
        ("requests", "2.18.0"),
        ("pyyaml", "3.13"),
    }
    # Another lock spells the stored release otherwise (`3.13.00` is `3.13`, PEP 440
    # equality): its event is skipped as stored, and nothing is sent for it.
    other = tmp_path / "other.txt"
    other.write_text("PyYAML==3.13.00\n")
    assert (await register_lockfile(db, other)).new_events == 1
    sent = len(pypi.log)
    async with client(pypi) as c:
        again = await collect(db, c)
    assert again.collect is not None and again.collect.outcomes[SKIPPED] == 1
    assert [r.path for r in pypi.log[sent:] if "yaml" in r.path.lower()] == []


def test_bad_names_are_refused_before_anything_is_queued(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'p.db'}")
    with pytest.raises(InputError, match="not a valid project name"):
        add_seeds(db, PYPI, ["requests", "bad name"])
    assert rows(db, "seed") == []
