"""OSV import against real RustSec records (read from ../shared/fixtures/osv/ at run time,
never copied here) served as a zip from the loopback origin, and against made-up records for
the rules that need no real one.

Expected ranges and hits below are derived by hand from each record's events (see the
comments), not by running the code under test."""

from __future__ import annotations

import copy
import io
import json
import zipfile
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from stagecrawl.sca.osv_import import ImportReport
from stagecrawl.sca.osv_read import read_advisories
from stagecrawl.storage.db import Database
from stagecrawl.testing.origin import TestOrigin
from tests.cli import stagecrawl
from tests.crates.conftest import Registry
from tests.crates.kernel import affected_crates, import_advisories, rust, vuln_id
from tests.crates.test_pipeline import crawl
from tests.services import needs_shared, shared_fixture, shared_path

SHARED_ZIP = shared_path("osv", "rustsec-osv-all.zip")
needs_zip = needs_shared("osv", "rustsec-osv-all.zip")
# The real records the hand-derived expectations below are about (openssl, hyper, smallvec,
# tar, chrono), of the single files in ../shared/fixtures/osv/.
REAL = [
    "RUSTSEC-2016-0001",
    "RUSTSEC-2017-0002",
    "RUSTSEC-2018-0002",
    "RUSTSEC-2018-0003",
    "RUSTSEC-2018-0018",
    "RUSTSEC-2019-0009",
    "RUSTSEC-2019-0012",
    "RUSTSEC-2020-0159",
    "RUSTSEC-2021-0003",
    "RUSTSEC-2021-0080",
    "RUSTSEC-2022-0022",
    "RUSTSEC-2023-0022",
    "RUSTSEC-2026-0067",
    "RUSTSEC-2026-0068",
]


def record(osv_id: str) -> dict[str, Any]:
    """A real RustSec record (the calling test is skipped, saying why, without ../shared)."""
    return json.loads(shared_fixture("osv", f"{osv_id}.json").read_text())


def zip_of(records: list[dict[str, Any]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for r in records:
            archive.writestr(f"{r['id']}.json", json.dumps(r))
    return buffer.getvalue()


def real_records() -> list[dict[str, Any]]:
    return [record(osv_id) for osv_id in REAL]


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
            select(rust(db).vuln_hit.c.VERSION, rust(db).vuln_hit.c.VULN_ID).where(
                rust(db).vuln_hit.c.PRODUCT_KEY == "smallvec"
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
    records = real_records()
    await crawl(db, registry, ["smallvec", "tar"])

    report = ImportReport()
    import_advisories(db, read_advisories(zip_of(records), report.read), "collected", report)
    assert report.advisories == len(records)
    raw = table(db, rust(db).vuln_raw)
    # RAW keeps every advisory (audit answers for any crate); the scope limits the CVE table.
    assert {r["PRODUCT_KEY"] for r in raw} == {"smallvec", "tar", "openssl", "hyper", "chrono"}
    assert {r["PRODUCT_KEY"] for r in table(db, rust(db).vuln_v1)} == {"smallvec", "tar"}
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
    v1 = {(r["PRODUCT_KEY"], r["VULN_ID"]): r for r in table(db, rust(db).vuln_v1)}
    assert v1[("tar", "CVE-2018-20990")]["VULN_RANGE"] == "(,0.4.16)"
    assert v1[("tar", "CVE-2018-20990")]["MAPPED_TYPE"] == "RE"
    assert all(vid.startswith("CVE-") for _, vid in v1)

    again = ImportReport()
    import_advisories(db, read_advisories(zip_of(records), again.read), "collected", again)
    assert again.raw_written == 0 and again.unchanged == report.pairs == len(raw)
    assert {(r["PRODUCT_KEY"], r["VULN_ID"]): r for r in table(db, rust(db).vuln_v1)} == v1

    withdrawn = copy.deepcopy(record("RUSTSEC-2021-0003"))
    withdrawn["modified"] = "2030-01-01T00:00:00Z"
    withdrawn["withdrawn"] = "2030-01-01T00:00:00Z"
    newer = ImportReport()
    import_advisories(db, read_advisories(zip_of([withdrawn]), newer.read), "collected", newer)
    assert newer.raw_written == 1 and newer.withdrawn == 1
    assert ("smallvec", "CVE-2021-25900") not in {
        (r["PRODUCT_KEY"], r["VULN_ID"]) for r in table(db, rust(db).vuln_v1)
    }
    assert "1.0.0" not in hits(db)
    raw_row = next(r for r in table(db, rust(db).vuln_raw) if r["OSV_ID"] == "RUSTSEC-2021-0003")
    assert raw_row["WITHDRAWN"] is not None

    every = ImportReport()
    import_advisories(db, read_advisories(zip_of(records), every.read), "all", every)
    crates = {r["PRODUCT_KEY"] for r in table(db, rust(db).vuln_raw)}
    assert {"openssl", "hyper", "chrono", "time"} - crates == {"time"}  # no time record here
    assert ("openssl", "RUSTSEC-2023-0022") not in {
        (r["PRODUCT_KEY"], r["VULN_ID"]) for r in table(db, rust(db).vuln_v1)
    }  # GHSA-only advisory: RAW, not V1


def test_size_limits_and_junk_entries() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("big.json", json.dumps({"id": "X", "details": "x" * 9000}))
        archive.writestr("junk.json", "{not json")
        # nested deeper than the JSON decoder recurses: junk too, not the end of the import
        archive.writestr("deep.json", "[" * 3000 + "]" * 3000)
        archive.writestr("ok.json", json.dumps(one_range({"introduced": "0"})))
    report = ImportReport()
    got = list(read_advisories(buffer.getvalue(), report.read, max_entry=8000))
    assert [r["id"] for r in got] == ["RUSTSEC-2099-0001"]
    assert (report.read.skipped_too_large, report.read.skipped_invalid) == (1, 2)


def test_cli_vulns_from_the_loopback_origin_then_audit(
    registry: Registry, origin: TestOrigin, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'v.db'}"
    run = stagecrawl
    urls = ["--index-url", registry.index.url + "/", "--api-url", registry.api.url + "/"]
    assert run("crates", "crawl", "tar", "--db", db, *urls).returncode == 0
    origin.add("crates.io/all.zip", zip_of(real_records()))
    done = run("crates", "vulns", "--source", origin.url + "/crates.io/all.zip", "--db", db)
    assert done.returncode == 0, done.stderr
    audit = run("crates", "audit", "tar@0.4.44", "--db", db)
    assert audit.returncode == 1  # vulnerabilities hit
    # 0.4.44 < 0.4.45 (RUSTSEC-2026-0067/0068) but ≥ 0.4.36 and ≥ 0.4.16
    assert "CVE-2026-33056" in audit.stdout and "CVE-2026-33055" in audit.stdout
    assert "CVE-2021-38511" not in audit.stdout
    clean = run("crates", "audit", "tar@0.4.45", "--db", db)
    assert clean.returncode == 0 and "no advisory hits" in clean.stdout
    origin.add("big.zip", b"x" * (1024 * 1024 + 1))
    too_big = run(
        "crates", "vulns", "--source", origin.url + "/big.zip", "--max-archive-mb", "1", "--db", db
    )
    assert too_big.returncode == 1 and "body larger than 1048576 bytes" in too_big.stderr


@needs_zip
def test_the_whole_rustsec_database_imports(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'all.db'}")
    report = ImportReport()
    import_advisories(db, read_advisories(SHARED_ZIP, report.read), "all", report)
    assert report.advisories == 1206 and report.read.skipped_invalid == 0
    assert report.withdrawn == 13


# --- OSV edge rules, each its own case -------------------------------------------------------


def one_range(*events: dict[str, str], crate: str = "demo") -> dict[str, Any]:
    return {
        "id": "RUSTSEC-2099-0001",
        "modified": "2099-01-01T00:00:00Z",
        "affected": [
            {
                "package": {"ecosystem": "crates.io", "name": crate},
                "ranges": [{"type": "SEMVER", "events": list(events)}],
            }
        ],
    }


def test_events_are_sorted_before_ranges_are_built() -> None:
    # fixed listed before introduced: the schema sorts events, so this is [1.0.0,1.5.0)
    [affected] = affected_crates(one_range({"fixed": "1.5.0"}, {"introduced": "1.0.0"}))
    assert affected.range_text() == "[1.0.0,1.5.0)"
    assert affected.hits("1.4.9") and not affected.hits("1.5.0") and not affected.hits("2.0.0")
    # two pairs listed out of order
    [two] = affected_crates(
        one_range(
            {"introduced": "2.0.0"}, {"fixed": "1.2.0"}, {"introduced": "1.0.0"}, {"fixed": "2.1.0"}
        )
    )
    assert two.range_text() == "[1.0.0,1.2.0)|[2.0.0,2.1.0)"


def test_introduced_zero_and_zero_point_zero_point_zero() -> None:
    [zero] = affected_crates(one_range({"introduced": "0"}, {"fixed": "1.0.0"}))
    assert zero.range_text() == "(,1.0.0)" and zero.hits("0.0.0-alpha")
    [release] = affected_crates(one_range({"introduced": "0.0.0"}, {"fixed": "1.0.0"}))
    assert release.range_text() == "[0.0.0,1.0.0)"
    assert not release.hits("0.0.0-alpha") and release.hits("0.0.0") and release.hits("0.9.0")


def test_last_affected_is_inclusive_and_limit_caps_the_range() -> None:
    [last] = affected_crates(one_range({"introduced": "1.0.0"}, {"last_affected": "1.2.0"}))
    assert last.hits("1.2.0") and not last.hits("1.2.1") and not last.hits("1.2.1-rc.1")
    assert last.patched() == [">1.2.0"]
    [limited] = affected_crates(one_range({"introduced": "1.0.0"}, {"limit": "1.3.0"}))
    assert limited.range_text() == "[1.0.0,1.3.0)"
    assert limited.hits("1.2.9") and not limited.hits("1.3.0")


def test_a_malformed_range_is_reported_and_the_others_still_count() -> None:
    advisory = one_range({"introduced": "2.0.0"}, {"fixed": "2.1.0"})
    advisory["affected"][0]["ranges"] += [
        {"type": "SEMVER", "events": [{"introduced": "1.0"}, {"fixed": "1.5.0"}]},
        {"type": "SEMVER", "events": [{"fixed": "3.0.0"}]},
        {"type": "SEMVER", "events": "nope"},
        {"type": "GIT", "repo": "x", "events": [{"introduced": "abc123"}]},  # not ours: ignored
    ]
    problems: list[str] = []
    [affected] = affected_crates(advisory, problems)
    assert affected.range_text() == "[2.0.0,2.1.0)" and affected.hits("2.0.5")
    assert problems == [
        "affected[0].ranges[1]: introduced '1.0' is not a semantic version",
        "affected[0].ranges[2]: a range has no introduced event",
        "affected[0].ranges[3]: a range has no events",
    ]


def test_malformed_records_are_skipped_by_id_and_the_import_goes_on(tmp_path: Path) -> None:
    good = one_range({"introduced": "0"}, {"fixed": "0.9.0"}, crate="sound")
    not_a_list = {"id": "RUSTSEC-2099-0002", "affected": {"package": "oops"}}
    bad_range = one_range({"introduced": "x.y"}, crate="broken")
    bad_range["id"] = "RUSTSEC-2099-0003"
    source = tmp_path / "all.zip"
    source.write_bytes(zip_of([good, not_a_list, bad_range]))
    db = f"sqlite:///{tmp_path / 'm.db'}"
    done = stagecrawl("crates", "vulns", "--source", str(source), "--scope", "all", "--db", db)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    summary = [line for line in done.stderr.splitlines() if "malformed advisory parts" in line]
    assert len(summary) == 1
    assert "RUSTSEC-2099-0002: affected is not a list" in summary[0]
    assert "RUSTSEC-2099-0003: affected[0].ranges[0]: introduced 'x.y'" in summary[0]
    stored = Database(db)
    assert {(r["OSV_ID"], r["PRODUCT_KEY"]) for r in table(stored, rust(stored).vuln_raw)} == {
        ("RUSTSEC-2099-0001", "sound"),
        ("RUSTSEC-2099-0003", "broken"),  # stored, with no range: it hits nothing
    }


def test_fields_of_the_wrong_type_skip_their_record_or_field_not_the_import(
    tmp_path: Path,
) -> None:
    """`aliases` that is not a list (also on a RUSTSEC record, which GHSA duplicates are folded
    into) and a severity whose `type` is a list were TypeErrors that ended the whole import:
    the first record is skipped by id, the second imported without its severity."""
    no_list = one_range({"introduced": "1.0.0"}, crate="aliased")
    no_list.update(id="RUSTSEC-2099-0004", aliases=1)
    odd_severity = one_range({"introduced": "1.0.0"}, crate="rated")
    odd_severity.update(id="RUSTSEC-2099-0005", severity=[{"type": ["CVSS_V3"], "score": "x"}])
    db = Database(f"sqlite:///{tmp_path / 'm.db'}")
    report = ImportReport()
    good = one_range({"introduced": "0"}, {"fixed": "0.9.0"}, crate="sound")
    records = [good, no_list, odd_severity]
    import_advisories(db, read_advisories(zip_of(records), report.read), "all", report)
    assert report.problems == ["RUSTSEC-2099-0004: aliases is not a list of strings"]
    assert {(r["OSV_ID"], r["PRODUCT_KEY"]) for r in table(db, rust(db).vuln_raw)} == {
        ("RUSTSEC-2099-0001", "sound"),
        ("RUSTSEC-2099-0005", "rated"),
    }


def add_collected(db: Database, name: str, versions: list[str]) -> None:
    """VERSION and PRODUCT rows as a crawl would leave them (only what the import reads)."""
    now = datetime(2026, 1, 1)
    key = {"LANGUAGE": "rust", "REPOSITORY": "Cargo", "PRODUCT_KEY": name, "NAME": name}
    with db.engine.begin() as conn:
        conn.execute(
            rust(db).product.insert(),
            [{**key, "COMP_STATUS": "ACTIVE", "VERSION_COUNT": len(versions), "LAST_UPDATED": now}],
        )
        conn.execute(
            rust(db).version.insert(),
            [
                {
                    **key,
                    "VERSION": v,
                    "DEPENDENCIES": "[]",
                    "FEATURES": "{}",
                    "YANKED": False,
                    "PROCESSED": 1,
                    "LAST_UPDATED": now,
                }
                for v in versions
            ],
        )


@needs_zip
def test_two_advisories_sharing_a_cve_keep_their_ranges_in_every_table(db_url: str) -> None:
    db = Database(db_url)
    add_collected(db, "wasmtime", ["0.33.0", "0.34.0", "0.36.0", "0.38.2"])
    wanted = {"RUSTSEC-2022-0096", "RUSTSEC-2022-0101"}
    records = [r for r in read_advisories(SHARED_ZIP, ImportReport().read) if r["id"] in wanted]
    report = ImportReport()
    import_advisories(db, records, "collected", report)
    ranges = {"RUSTSEC-2022-0096": "(,0.33.1)|[0.34.0,0.34.1)", "RUSTSEC-2022-0101": "(,0.38.2)"}
    raw = {r["OSV_ID"]: r for r in table(db, rust(db).vuln_raw)}
    assert {k: r["VULN_RANGE"] for k, r in raw.items()} == ranges
    assert "CVE-2022-23636" in json.loads(raw["RUSTSEC-2022-0096"]["ALIASES"])
    v1 = {(r["VULN_ID"], r["OSV_ID"]): r["VULN_RANGE"] for r in table(db, rust(db).vuln_v1)}
    assert v1 == {("CVE-2022-23636", k): v for k, v in ranges.items()}
    got = {(r["VERSION"], r["OSV_ID"]) for r in table(db, rust(db).vuln_hit)}
    assert got == {
        ("0.33.0", "RUSTSEC-2022-0096"),
        ("0.33.0", "RUSTSEC-2022-0101"),
        ("0.34.0", "RUSTSEC-2022-0096"),
        ("0.34.0", "RUSTSEC-2022-0101"),
        ("0.36.0", "RUSTSEC-2022-0101"),
    }


@needs_zip
def test_informational_advisories_are_stored_and_kept_out_of_the_cve_table(
    tmp_path: Path,
) -> None:
    db = Database(f"sqlite:///{tmp_path / 'i.db'}")
    report = ImportReport()
    import_advisories(db, read_advisories(SHARED_ZIP, report.read), "all", report)
    assert report.informational == 476
    raw = {r["OSV_ID"]: r for r in table(db, rust(db).vuln_raw)}
    assert raw["RUSTSEC-2020-0070"]["INFORMATIONAL"] == "unsound"  # CVEs, no CVSS
    assert raw["RUSTSEC-2023-0056"]["INFORMATIONAL"] == "unsound"  # CVE and a CVSS score
    assert raw["RUSTSEC-2022-0096"]["INFORMATIONAL"] is None
    v1_ids = {r["OSV_ID"] for r in table(db, rust(db).vuln_v1)}
    assert "RUSTSEC-2020-0070" not in v1_ids and "RUSTSEC-2023-0056" in v1_ids
    informational_in_v1 = {k for k in v1_ids if raw[k]["INFORMATIONAL"]}
    # only the informational advisories rated with CVSS stay in the CVE table
    assert all(json.loads(raw[k]["SEVERITY"]) for k in informational_in_v1)
    assert len(informational_in_v1) == 38


def test_ghsa_duplicates_merge_into_the_rustsec_advisory(db_url: str) -> None:
    db = Database(db_url)
    add_collected(db, "smallvec", ["1.0.0", "1.6.1"])
    # made up, in the shape of OSV's crates.io dump: a RustSec record and a GHSA record (its
    # aliases name the RustSec id) about the same vulnerability
    rustsec = one_range({"introduced": "1.0.0"}, {"fixed": "1.6.1"}, crate="smallvec")
    rustsec.update(id="RUSTSEC-2099-0006", aliases=["CVE-2099-0006"])
    rustsec["modified"] = "2026-01-01T00:00:00Z"
    ghsa = copy.deepcopy(rustsec)
    ghsa["id"] = "GHSA-made-up0-0006"
    ghsa["aliases"] = ["CVE-2099-0006", "RUSTSEC-2099-0006"]
    ghsa["modified"] = "2030-01-01T00:00:00Z"
    # an earlier import that stored the GHSA record as its own advisory
    first = ImportReport()
    import_advisories(db, [ghsa], "collected", first)
    assert {r["OSV_ID"] for r in table(db, rust(db).vuln_hit)} == {"GHSA-made-up0-0006"}

    report = ImportReport()
    import_advisories(db, [ghsa, rustsec], "collected", report)
    assert report.duplicates_merged == 1 and report.advisories == 2
    raw = table(db, rust(db).vuln_raw)
    assert [r["OSV_ID"] for r in raw] == ["RUSTSEC-2099-0006"]
    assert "GHSA-made-up0-0006" in json.loads(raw[0]["ALIASES"])
    assert raw[0]["MODIFIED"] == datetime(2030, 1, 1)  # the later of the two
    assert {r["OSV_ID"] for r in table(db, rust(db).vuln_v1)} == {"RUSTSEC-2099-0006"}
    assert {(r["VERSION"], r["OSV_ID"]) for r in table(db, rust(db).vuln_hit)} == {
        ("1.0.0", "RUSTSEC-2099-0006")
    }


def test_import_sends_few_statements(tmp_path: Path) -> None:
    """Issue 13: rows go as executemany batches in one transaction, not one per advisory."""
    from sqlalchemy import event

    db = Database(f"sqlite:///{tmp_path / 's.db'}")
    records = []
    for n in range(12):  # made up: 12 advisories over 4 crates, half with a CVE
        made_up = one_range({"introduced": "0"}, {"fixed": f"1.{n}.0"}, crate=f"crate-{n % 4}")
        made_up.update(id=f"RUSTSEC-2099-{100 + n:04d}", aliases=[f"CVE-2099-{100 + n}"][: n % 2])
        records.append(made_up)
    statements: list[str] = []
    event.listen(
        db.engine, "before_cursor_execute", lambda *a: statements.append(a[2]), retval=False
    )
    report = ImportReport()
    import_advisories(db, records, "all", report)
    writes = [s for s in statements if s.lstrip().upper().startswith(("INSERT", "DELETE"))]
    assert report.raw_written == len(records) > 10
    assert len(writes) <= 3  # RAW, V1 and HIT: one executemany each
    begins = [s for s in statements if s.strip().upper().startswith("BEGIN")]
    assert len(begins) <= 2  # one to read what is stored, one to write
