"""Collecting projects from the look-alike: every version, yanked flags, dependencies (unknown
where unknown), licenses, display names; politely (strict lanes, no 429)."""

from __future__ import annotations

from datetime import datetime

import pytest

from stagecrawl.engine.fetcher import Fetcher, FetchSettings
from stagecrawl.engine.ratelimit import Lane, Lanes, Rate
from stagecrawl.errors import NotFound
from stagecrawl.pypi.client import PyPIClient
from stagecrawl.pypi.collect import collect_project
from stagecrawl.pypi.plugin import REGISTRY
from stagecrawl.pypi.simple import SimpleFormatError
from stagecrawl.testing.pypi_origin import PyPIOrigin, normalize, version_from_filename


def client_for(origin: PyPIOrigin, rate: float | None = None) -> PyPIClient:
    pace = Rate(rate) if rate else None
    lanes = Lanes(
        [
            Lane("index", f"{origin.url}/simple/", pace),
            Lane("api", f"{origin.url}/pypi/", pace),
            Lane("files", f"{origin.url}/files/", pace),
        ],
        default=None,
    )
    fetcher = Fetcher(FetchSettings(contact="tests@example.org", backoff_base=0.01), lanes)
    return PyPIClient(fetcher, f"{origin.url}/simple/", f"{origin.url}/")


def expected(origin: PyPIOrigin, name: str) -> dict[str, tuple[bool, bool]]:
    """An independent reading of the origin's data: version → (yanked, dependencies known)."""
    project = origin.project(name)
    result = {}
    for version in project.versions():
        files = [
            f
            for f in project.page["files"]
            if version_from_filename(project.name, f["filename"]) == version
        ]
        yanked = bool(files) and all(f.get("yanked") for f in files)
        has_metadata = any(f["filename"] in project.metadata for f in files)
        stored = project.releases.get(version)
        api_known = stored is not None and stored["info"].get("requires_dist") is not None
        result[version] = (yanked, has_metadata or api_known)
    return result


async def test_every_fixture_project_collects_as_pypi_says(pypi: PyPIOrigin) -> None:
    client = client_for(pypi)
    now = datetime(2026, 1, 1)
    async with client.fetcher:
        for name in sorted(pypi.projects):
            collected = await collect_project(client, name)
            rows = [REGISTRY.release_row(collected, v, now, None) for v in collected.versions]
            got = {r["VERSION"]: (r["YANKED"], r["DEPENDENCIES"] is not None) for r in rows}
            assert got == expected(pypi, name), name
            product = REGISTRY.project_product_row(collected, now)
            assert product["VERSION_COUNT"] == len(rows)
            assert product["PRODUCT_KEY"] == normalize(name)


async def test_details_of_known_projects(pypi: PyPIOrigin) -> None:
    client = client_for(pypi)
    now = datetime(2026, 1, 1)
    async with client.fetcher:
        black = await collect_project(client, "Black")
        rows = {
            f.release.version: REGISTRY.release_row(black, f, now, None) for f in black.versions
        }
        assert rows["21.11b0"]["YANKED"] is True
        assert (
            rows["21.11b0"]["YANKED_REASON"]
            == pypi.project("black").files_of("21.11b0")[0]["yanked"]
        )
        assert rows["19.10b0"]["DEPENDENCY_SOURCE"] == "metadata"
        assert rows["19.10b0"]["REQUIRES_PYTHON"] == ">=3.6"
        # no final release: the highest non-yanked pre-release (21.11b0 is yanked)
        assert REGISTRY.project_product_row(black, now)["LATEST_VERSION"] == "19.10b0"

        sqlalchemy = await collect_project(client, "SQLAlchemy")
        (only,) = sqlalchemy.versions
        row = REGISTRY.release_row(sqlalchemy, only, now, None)
        assert sqlalchemy.display_name == "SQLAlchemy"
        assert row["NAME"] == "SQLAlchemy" and row["PRODUCT_KEY"] == "sqlalchemy"
        assert row["DEPENDENCIES"] is None  # no metadata file, requires_dist null: unknown
        assert row["DEPENDENCY_SOURCE"] == "json-api"

        requests = await collect_project(client, "requests")
        row = REGISTRY.release_row(requests, requests.versions[0], now, None)
        assert row["LICENSE"] == "Apache 2.0"
        assert row["LICENSE_EXPRESSION"] == "Apache-2.0"  # no standardiser: the classifier
        assert row["LICENSE_SOURCE"] == "classifiers"
        assert '"name":"certifi"' in row["DEPENDENCIES"]
        assert row["EXTRAS"] == '["security","socks"]'

        discord = await collect_project(client, "discord.py")
        assert discord.display_name == "discord.py"


async def test_failures_are_typed(pypi: PyPIOrigin) -> None:
    client = client_for(pypi)
    pypi.misbehave("/simple/six/", "html")
    pypi.misbehave("/simple/attrs/", "not-json")
    async with client.fetcher:
        with pytest.raises(NotFound):
            await collect_project(client, "no-such-project")
        with pytest.raises(SimpleFormatError, match="HTML"):
            await collect_project(client, "six")
        with pytest.raises(SimpleFormatError, match="not JSON"):
            await collect_project(client, "attrs")


async def test_strict_origin_sees_no_429_at_the_lane_rates(pypi: PyPIOrigin) -> None:
    pypi.strict(index_rate=20, api_rate=20, files_rate=20)
    client = client_for(pypi, rate=20)
    async with client.fetcher:
        for name in ("requests", "toga", "ipython"):
            await collect_project(client, name)
    assert [r.status for r in pypi.log if r.status == 429] == []
    assert pypi.max_in_window("/files/*", 0.999) <= 20


async def test_collect_one_matches_pins_by_pep440_equality(pypi: PyPIOrigin) -> None:
    """The registry's unit of work (the kernel claims, skips what is stored and writes):
    rows for the versions asked, matched by PEP 440 equality; what the page lists, by that
    equality too; a missing project and an unreadable page raised for the kernel to judge."""
    from stagecrawl.kernel.registry import CollectContext
    from stagecrawl.pypi.plugin import REGISTRY
    from stagecrawl.pypi.versions import version_key

    client = client_for(pypi)
    context = CollectContext(datetime(2026, 1, 1))
    async with client.fetcher:
        result = await REGISTRY.collect_one(client, "PyYAML", ["3.13.0", "9.9"], context)
        versions, product = result.rows
        assert [r["VERSION"] for r in versions] == ["3.13"]
        assert version_key("3.13.0") in result.listed and version_key("9.9") not in result.listed
        assert product["NAME"] == "PyYAML"
        toga = await REGISTRY.collect_one(client, "toga", ["0.3.0"], context)
        assert [r["VERSION"] for r in toga.rows[0]] == ["0.3.0"]
        assert {str(k): y for k, y in toga.listed.items()} == {
            "0.3.0.dev1": False,
            "0.3.0.dev2": False,
            "0.3.0": False,
            "0.4.0": False,
        }
        with pytest.raises(NotFound):
            await REGISTRY.collect_one(client, "nope-nope", ["1"], context)
        pypi.misbehave("/simple/six/", "html")
        with pytest.raises(SimpleFormatError, match="HTML"):
            await REGISTRY.collect_one(client, "six", ["1.11.0"], context)
        seeded = await REGISTRY.seed_one(client, "Requests")
        assert seeded.name == "requests" and len(seeded.versions) == 6
        with pytest.raises(SimpleFormatError):
            await REGISTRY.seed_one(client, "six")
