"""OSV import against real RustSec records served as a zip from the loopback origin.

Expected ranges and hits below are derived by hand from each record's events (see the
comments), not by running the code under test."""

from __future__ import annotations

import copy
import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from stagecrawl.crates.osv import (
    ImportReport,
    affected_crates,
    import_advisories,
    read_advisories,
    vuln_id,
)
from stagecrawl.storage.db import Database
from stagecrawl.testing.origin import TestOrigin
from tests.cli import stagecrawl
from tests.crates.conftest import Registry
from tests.crates.test_pipeline import crawl

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "osv"
SHARED_ZIP = (
    Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "osv" / ("rustsec-osv-all.zip")
)


def record(osv_id: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{osv_id}.json").read_text())


def zip_of(records: list[dict[str, Any]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for r in records:
            archive.writestr(f"{r['id']}.json", json.dumps(r))
    return buffer.getvalue()


def all_fixtures() -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(FIXTURES.glob("RUSTSEC-*.json"))]


@pytest.mark.parametrize(
    ("osv_id", "crate", "expected_id", "expected_range"),
    [
        # introduced 0.0.0-0, fixed 0.9.0
        ("RUSTSEC-2016-0001", "openssl", "CVE-2016-10931", "(,0.9.0)"),
        # 0.0.0-0→0.9.18, then 0.10.0→0.10.2
        ("RUSTSEC-2017-0002", "hyper", "CVE-2017-18587", "(,0.9.18)|[0.10.0,0.10.2)"),
        (
            "RUSTSEC-2018-0003",
            "smallvec",
            "CVE-2018-20991",
            "[0.3.2,0.3.4)|[0.4.0-0,0.4.5)|[0.5.0-0,0.5.1)|[0.6.0-0,0.6.3)",
        ),
        ("RUSTSEC-2021-0003", "smallvec", "CVE-2021-25900", "[0.6.3,0.6.14)|[1.0.0,1.6.1)"),
        # no aliases at all: the RUSTSEC id
        ("RUSTSEC-2020-0159", "chrono", "RUSTSEC-2020-0159", "(,0.4.20)"),
        # only a GHSA alias: still the RUSTSEC id
        ("RUSTSEC-2022-0022", "hyper", "RUSTSEC-2022-0022", "(,0.14.12)"),
    ],
)
def test_vuln_id_and_range_of_real_records(
    osv_id: str, crate: str, expected_id: str, expected_range: str
) -> None:
    advisory = record(osv_id)
    assert vuln_id(advisory) == expected_id
    [affected] = affected_crates(advisory)
    assert (affected.product_key, affected.range_text()) == (crate, expected_range)


def test_last_affected_open_end_versions_list_and_merged_entries() -> None:
    advisory = {
        "id": "GHSA-xxxx-yyyy-zzzz",
        "aliases": ["CVE-2099-0001"],
        "affected": [
            {
                "package": {"ecosystem": "crates.io", "name": "Demo"},
                "ranges": [
                    {
                        "type": "SEMVER",
                        "events": [{"introduced": "1.0.0"}, {"last_affected": "1.2.0"}],
                    }
                ],
            },
            {
                "package": {"ecosystem": "crates.io", "name": "demo"},
                "ranges": [{"type": "SEMVER", "events": [{"introduced": "2.0.0"}]}],
            },
            {
                "package": {"ecosystem": "crates.io", "name": "listed"},
                "versions": ["0.1.0", "0.1.1"],
            },
            {
                "package": {"ecosystem": "PyPI", "name": "demo"},
                "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}]}],
            },
        ],
    }
    by_crate = {a.product_key: a for a in affected_crates(advisory)}
    assert set(by_crate) == {"demo", "listed"}
    assert by_crate["demo"].range_text() == "[1.0.0,1.2.0]|[2.0.0,)"
    assert by_crate["listed"].range_text() == "[0.1.0,0.1.0]|[0.1.1,0.1.1]"
    assert by_crate["demo"].hits("1.2.0") and not by_crate["demo"].hits("1.2.1")
    assert by_crate["demo"].hits("7.0.0") and not by_crate["demo"].hits("1.0.0-rc.1")
    assert by_crate["listed"].hits("0.1.1") and not by_crate["listed"].hits("0.1.2")


def hits(db: Database) -> dict[str, set[str]]:
    with db.engine.connect() as conn:
        rows = conn.execute(
            select(db.vuln_hit.c.VERSION, db.vuln_hit.c.VULN_ID).where(
                db.vuln_hit.c.PRODUCT_KEY == "smallvec"
            )
        )
        result: dict[str, set[str]] = {}
        for version, vid in rows:
            result.setdefault(version, set()).add(vid)
        return result


def table(db: Database, t: Any) -> list[dict[str, Any]]:
    with db.engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(select(t))]


async def test_import_scope_hits_reimport_and_withdrawal(db_url: str, registry: Registry) -> None:
    db = Database(db_url)
    await crawl(db, registry, ["smallvec", "tar"])
    records = all_fixtures()

    report = ImportReport()
    import_advisories(db, read_advisories(zip_of(records), report.read), "collected", report)
    assert report.advisories == len(records)
    raw = table(db, db.vuln_raw)
    assert {r["PRODUCT_KEY"] for r in raw} == {"smallvec", "tar"}  # scope: collected only
    # smallvec versions hand-checked against each advisory's events:
    #  RUSTSEC-2018-0018 CVE-2018-25023 (,0.6.13)
    #  RUSTSEC-2018-0003 CVE-2018-20991 …|[0.6.0-0,0.6.3)
    #  RUSTSEC-2019-0009 CVE-2019-15551 [0.6.5,0.6.10)
    #  RUSTSEC-2019-0012 CVE-2019-15554 [0.6.3,0.6.10)
    #  RUSTSEC-2021-0003 CVE-2021-25900 [0.6.3,0.6.14)|[1.0.0,1.6.1)
    assert hits(db) == {
        "0.6.0-alpha": {"CVE-2018-25023", "CVE-2018-20991"},  # 0.6.0-0 < 0.6.0-alpha
        "0.6.2": {"CVE-2018-25023", "CVE-2018-20991"},
        "0.6.9": {"CVE-2018-25023", "CVE-2019-15551", "CVE-2019-15554", "CVE-2021-25900"},
        "0.6.13": {"CVE-2021-25900"},
        "1.0.0": {"CVE-2021-25900"},
        "1.6.0": {"CVE-2021-25900"},
    }
    v1 = {(r["PRODUCT_KEY"], r["VULN_ID"]): r for r in table(db, db.vuln_v1)}
    assert v1[("tar", "CVE-2018-20990")]["VULN_RANGE"] == "(,0.4.16)"
    assert v1[("tar", "CVE-2018-20990")]["MAPPED_TYPE"] == "RE"
    assert all(vid.startswith("CVE-") for _, vid in v1)

    again = ImportReport()
    import_advisories(db, read_advisories(zip_of(records), again.read), "collected", again)
    assert again.raw_written == 0 and again.unchanged == report.in_scope
    assert {(r["PRODUCT_KEY"], r["VULN_ID"]): r for r in table(db, db.vuln_v1)} == v1

    withdrawn = copy.deepcopy(record("RUSTSEC-2021-0003"))
    withdrawn["modified"] = "2030-01-01T00:00:00Z"
    withdrawn["withdrawn"] = "2030-01-01T00:00:00Z"
    newer = ImportReport()
    import_advisories(db, read_advisories(zip_of([withdrawn]), newer.read), "collected", newer)
    assert newer.raw_written == 1 and newer.withdrawn == 1
    assert ("smallvec", "CVE-2021-25900") not in {
        (r["PRODUCT_KEY"], r["VULN_ID"]) for r in table(db, db.vuln_v1)
    }
    assert "1.0.0" not in hits(db)
    raw_row = next(r for r in table(db, db.vuln_raw) if r["OSV_ID"] == "RUSTSEC-2021-0003")
    assert raw_row["WITHDRAWN"] is not None

    every = ImportReport()
    import_advisories(db, read_advisories(zip_of(records), every.read), "all", every)
    crates = {r["PRODUCT_KEY"] for r in table(db, db.vuln_raw)}
    assert {"openssl", "hyper", "chrono", "time"} - crates == {"time"}  # no time record here
    assert ("openssl", "RUSTSEC-2023-0022") not in {
        (r["PRODUCT_KEY"], r["VULN_ID"]) for r in table(db, db.vuln_v1)
    }  # GHSA-only advisory: RAW, not V1


def test_size_limits_and_junk_entries() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("big.json", json.dumps({"id": "X", "details": "x" * 5000}))
        archive.writestr("junk.json", "{not json")
        archive.writestr("ok.json", json.dumps(record("RUSTSEC-2016-0001")))
    report = ImportReport()
    got = list(read_advisories(buffer.getvalue(), report.read, max_entry=4000))
    assert [r["id"] for r in got] == ["RUSTSEC-2016-0001"]
    assert (report.read.skipped_too_large, report.read.skipped_invalid) == (1, 1)


def test_cli_vulns_from_the_loopback_origin_then_audit(
    registry: Registry, origin: TestOrigin, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'v.db'}"
    run = stagecrawl
    urls = ["--index-url", registry.index.url + "/", "--api-url", registry.api.url + "/"]
    assert run("crates", "crawl", "tar", "--db", db, *urls).returncode == 0
    origin.add("crates.io/all.zip", zip_of(all_fixtures()))
    done = run("crates", "vulns", "--source", origin.url + "/crates.io/all.zip", "--db", db)
    assert done.returncode == 0, done.stderr
    audit = run("crates", "audit", "tar@0.4.44", "--db", db)
    assert audit.returncode == 0
    # 0.4.44 < 0.4.45 (RUSTSEC-2026-0067/0068) but ≥ 0.4.36 and ≥ 0.4.16
    assert "CVE-2026-33056" in audit.stderr and "CVE-2026-33055" in audit.stderr
    assert "CVE-2021-38511" not in audit.stderr
    clean = run("crates", "audit", "tar@0.4.45", "--db", db)
    assert "no known advisory" in clean.stderr
    origin.add("big.zip", b"x" * (1024 * 1024 + 1))
    too_big = run(
        "crates", "vulns", "--source", origin.url + "/big.zip", "--max-archive-mb", "1", "--db", db
    )
    assert too_big.returncode == 1 and "body larger than 1048576 bytes" in too_big.stderr


@pytest.mark.skipif(not SHARED_ZIP.exists(), reason="../shared fixtures not beside the project")
def test_the_whole_rustsec_database_imports(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'all.db'}")
    report = ImportReport()
    import_advisories(db, read_advisories(SHARED_ZIP, report.read), "all", report)
    assert report.advisories == 1206 and report.read.skipped_invalid == 0
    assert report.withdrawn == 13
