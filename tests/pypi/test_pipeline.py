"""Seed, collect and crawl PyPI projects into VERSION and PRODUCT through the core queue."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select
from stagecrawl.pypi.pipeline import CollectSettings, PyPIEndpoints

from stagecrawl.engine.fetcher import FetchSettings
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.errors import InputError
from stagecrawl.pypi import pipeline, tables
from stagecrawl.storage.db import Database
from stagecrawl.testing.pypi_origin import PyPIOrigin
from tests.pypi.test_collect import expected

FAST = 200.0


def endpoints(origin: PyPIOrigin, rate: float = FAST) -> PyPIEndpoints:
    return PyPIEndpoints(f"{origin.url}/simple/", f"{origin.url}/", rate, rate, rate)


def client(origin: PyPIOrigin, rate: float = FAST) -> pipeline.PyPIClient:
    return pipeline.build_client(
        endpoints(origin, rate), FetchSettings(contact="tests@example.org", backoff_base=0.01)
    )


def rows(db: Database, table: str) -> list[dict[str, object]]:
    t = getattr(tables.tables(db), table)
    with db.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(select(t))]


async def test_crawl_every_fixture_project(pypi: PyPIOrigin, db_url: str) -> None:
    db = Database(db_url)
    names = sorted(p.display_name for p in pypi.projects.values())
    c = client(pypi)
    async with c.fetcher:
        report = await pipeline.collect(
            db, c, CollectSettings(concurrency=4), GracefulStop("t"), names=names
        )
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
    # one Simple request per project: the seed's page is the collector's
    assert report.requests["index"] == len(names)
    listed = rows(db, "list")
    assert {r["PROCESSED"] for r in listed} == {1}
    assert {(r["CRATE_NAME"], r["VERSION"]) for r in listed if r["YANKED"]} == {
        ("black", "21.11b0"),
        ("isodate", "0.7.0"),
        ("yanked", "0.0.0"),
    }


async def test_not_found_and_unreadable_pages_wait_on_the_ladder(
    pypi: PyPIOrigin, tmp_path: Path
) -> None:
    db = Database(f"sqlite:///{tmp_path / 'p.db'}")
    pypi.misbehave("/simple/six/", "html")
    c = client(pypi)
    async with c.fetcher:
        report = await pipeline.collect(
            db,
            c,
            CollectSettings(),
            GracefulStop("t"),
            names=["six", "ghost-project", "attrs"],
        )
    assert report.seed is not None
    assert report.seed.not_found == ["ghost-project"]
    assert "HTML" in report.seed.failed["six"]
    assert {r["PRODUCT_KEY"] for r in rows(db, "version")} == {"attrs"}
    seeds = {r["CRATE_NAME"]: r for r in rows(db, "seed")}
    assert seeds["six"]["STATE"] == 30 and "HTML" in str(seeds["six"]["LAST_ERROR"])
    pypi.clear_misbehaviour()
    c = client(pypi)
    async with c.fetcher:
        again = await pipeline.collect(db, c, CollectSettings(), GracefulStop("t"))
    assert again.seed is not None and again.seed.projects == {"six": 1}
    assert {r["PRODUCT_KEY"] for r in rows(db, "version")} == {"attrs", "six"}


async def test_lock_pins_then_collect(pypi: PyPIOrigin, tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'p.db'}")
    lock = tmp_path / "requirements.txt"
    lock.write_text("requests==2.18.0\nPyYAML==3.13.0\nsix==9.9.9\nflask>=1\n")
    inputs = await pipeline.lock_files(None, [], None, False, lock, tmp_path, GracefulStop("t"))
    report = pipeline.register_locks(db, inputs)
    assert report.as_json()["new_events"] == 3
    assert report.inputs[0].unpinned == ["line 4: flask>=1"]
    c = client(pypi)
    async with c.fetcher:
        done = await pipeline.collect(db, c, CollectSettings(), GracefulStop("t"))
    assert done.collect is not None and done.collect.outcomes[4] == 1  # six 9.9.9: not found
    assert {(r["PRODUCT_KEY"], r["VERSION"]) for r in rows(db, "version")} == {
        ("requests", "2.18.0"),
        ("pyyaml", "3.13"),
    }
    # Another lock spells the stored release otherwise (`3.13.00` is `3.13`, PEP 440
    # equality): its event is skipped as stored, and nothing is sent for it.
    other = tmp_path / "other.txt"
    other.write_text("PyYAML==3.13.00\n")
    inputs = await pipeline.lock_files(None, [], None, False, other, tmp_path, GracefulStop("t"))
    assert pipeline.register_locks(db, inputs).as_json()["new_events"] == 1
    sent = len(pypi.log)
    c = client(pypi)
    async with c.fetcher:
        again = await pipeline.collect(db, c, CollectSettings(), GracefulStop("t"))
    assert again.collect is not None and again.collect.outcomes[pipeline.SKIPPED] == 1
    assert [r.path for r in pypi.log[sent:] if "yaml" in r.path.lower()] == []


def test_bad_names_are_refused_before_anything_is_queued(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'p.db'}")
    with pytest.raises(InputError, match="not a valid project name"):
        pipeline.add_seeds(db, ["requests", "bad name"])
    assert rows(db, "seed") == []
