"""SARIF that code scanning can place (every result has a physical location, relative to the
repository or --sarif-root) and CycloneDX whose purls round-trip and whose BOM has the project
as its root component and the lock file's dependency graph; VULN_RANGE holds listed versions."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packageurl import PackageURL
from sqlalchemy import select

from stagecrawl.sca.osv_import import ImportReport
from stagecrawl.storage.db import Database
from tests.cli import stagecrawl
from tests.crates.kernel import affected_crates, import_advisories, rust
from tests.crates.test_audit import LOCK_V3, ZIP, needs_zip, sarif_validator

pytestmark = needs_zip


@pytest.fixture(scope="module")
def db_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('fmt') / 'f.db'}"
    done = stagecrawl("crates", "vulns", "--source", str(ZIP), "--db", url)
    assert done.returncode == 0, done.stderr
    return url


def sarif_of(*args: str, cwd: Path) -> dict[str, object]:
    done = stagecrawl("crates", "audit", *args, "--format", "sarif", cwd=cwd)
    assert done.returncode in (0, 1), done.stderr
    document = json.loads(done.stdout)
    errors = list(sarif_validator().iter_errors(document))
    assert not errors, [e.message for e in errors]
    return document  # type: ignore[no-any-return]


def uris(document: dict[str, object]) -> set[str]:
    results = document["runs"][0]["results"]  # type: ignore[index]
    assert results
    found = set()
    for result in results:
        assert result["locations"], result  # every result has a physical location
        for location in result["locations"]:
            found.add(location["physicalLocation"]["artifactLocation"]["uri"])
    return found


def test_sarif_locations_are_relative_to_the_repository(db_url: str, tmp_path: Path) -> None:
    repo = tmp_path / "project"
    (repo / "app").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    lock = repo / "app" / "Cargo.lock"
    lock.write_text(LOCK_V3)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # an absolute --lockfile, run from outside the repository: relative to its repository
    absolute = sarif_of("--lockfile", str(lock), "--db", db_url, cwd=elsewhere)
    assert uris(absolute) == {"app/Cargo.lock"}
    # --sarif-root chooses the base
    rooted = sarif_of(
        "--lockfile", str(lock), "--sarif-root", str(repo / "app"), "--db", db_url, cwd=elsewhere
    )
    assert uris(rooted) == {"Cargo.lock"}
    # NAME@VERSION: the manifest at the root (docs/sca.md), never a logical location only
    named = sarif_of("time@0.3.10", "--db", db_url, cwd=repo)
    assert uris(named) == {"Cargo.toml"}


def test_an_ignored_advisory_is_a_suppressed_result(db_url: str, tmp_path: Path) -> None:
    (tmp_path / "stagecrawl.toml").write_text(
        "[advisories]\nignore = [{ id = 'RUSTSEC-2026-0009', reason = 'not reachable' }]\n"
    )
    document = sarif_of("time@0.3.10", "--db", db_url, cwd=tmp_path)
    [result] = document["runs"][0]["results"]  # type: ignore[index]
    assert result["suppressions"] == [
        {"kind": "external", "status": "accepted", "justification": "not reachable"}
    ]


def test_cyclonedx_purls_root_component_and_dependencies(db_url: str, tmp_path: Path) -> None:
    lock = tmp_path / "Cargo.lock"
    lock.write_text(LOCK_V3)
    done = stagecrawl(
        "crates", "audit", "--lockfile", str(lock), "--format", "cyclonedx", "--db", db_url
    )
    assert done.returncode == 1, done.stderr
    bom = json.loads(done.stdout)
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(done.stdout) is None
    assert bom["metadata"]["component"]["name"] == "demo-app"
    root_ref = bom["metadata"]["component"]["bom-ref"]
    graph = {d["ref"]: set(d["dependsOn"]) for d in bom["dependencies"]}
    assert graph[root_ref] == {
        "pkg:cargo/time@0.3.10",
        "pkg:cargo/time@0.1.45",
        "pkg:cargo/smallvec@1.6.1",
        "pkg:cargo/lock_api@0.4.1",
    }
    refs = {c["bom-ref"] for c in bom["components"]} | {root_ref}
    assert set(graph) <= refs and all(d <= refs for d in graph.values())

    plus = stagecrawl(
        "crates", "audit", "toml@1.1.2+spec-1.1.0", "--format", "cyclonedx", "--db", db_url
    )
    bom = json.loads(plus.stdout)
    [component] = bom["components"]
    assert component["purl"] == "pkg:cargo/toml@1.1.2%2Bspec-1.1.0"
    for purl in [component["purl"], "pkg:cargo/time@0.3.10"]:
        parsed = PackageURL.from_string(purl)
        assert parsed.to_string() == purl  # round trip
    assert PackageURL.from_string(component["purl"]).version == "1.1.2+spec-1.1.0"


def test_vuln_range_holds_listed_versions_beside_ranges(tmp_path: Path) -> None:
    record = {
        "id": "RUSTSEC-2099-0002",
        "aliases": ["CVE-2099-0002"],
        "modified": "2099-01-01T00:00:00Z",
        "affected": [
            {
                "package": {"ecosystem": "crates.io", "name": "demo"},
                "ranges": [
                    {"type": "SEMVER", "events": [{"introduced": "1.0.0"}, {"fixed": "1.2.0"}]}
                ],
                "versions": ["1.1.0", "0.9.3"],  # 1.1.0 is in the range, 0.9.3 is not
            }
        ],
    }
    [affected] = affected_crates(record)
    assert affected.range_text() == "[1.0.0,1.2.0)|[0.9.3,0.9.3]"
    db = Database(f"sqlite:///{tmp_path / 'r.db'}")
    import_advisories(db, [record], "all", ImportReport())
    with db.engine.connect() as conn:
        raw = conn.execute(select(rust(db).vuln_raw.c.VULN_RANGE)).scalar_one()
        v1 = conn.execute(select(rust(db).vuln_v1.c.VULN_RANGE)).scalar_one()
    assert raw == v1 == "[1.0.0,1.2.0)|[0.9.3,0.9.3]"
