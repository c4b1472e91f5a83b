"""One audit across ecosystems, and every registry's audit through one gate: `stagecrawl audit
DIR` finds the Cargo.lock and the requirements.txt of a project, audits each against its
registry's stored advisories and answers once (every format, exit 1 on a hit); `pypi audit`
honours stagecrawl.toml's ignores (a reason, an expiry: an expired one fails) and writes
markdown to --output, as `crates audit` does.

The advisories are made up for these tests (ids TEST-…, packages no registry has)."""

from __future__ import annotations

import json
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.cli import stagecrawl
from tests.crates.test_audit import sarif_validator

CRATE_ADVISORY = {
    "id": "TEST-CRATE-0001",
    "modified": "2026-11-01T00:00:00Z",
    "published": "2026-11-01T00:00:00Z",
    "aliases": ["CVE-2099-0001"],
    "summary": "made-up crate flaw",
    "affected": [
        {
            "package": {"ecosystem": "crates.io", "name": "madeup-crate"},
            "ranges": [{"type": "SEMVER", "events": [{"introduced": "0"}, {"fixed": "1.2.0"}]}],
        }
    ],
}
PROJECT_ADVISORY = {
    "id": "TEST-PYPI-0001",
    "modified": "2026-11-01T00:00:00Z",
    "published": "2026-11-01T00:00:00Z",
    "aliases": ["CVE-2099-0002"],
    "summary": "made-up project flaw",
    "affected": [
        {
            "package": {"ecosystem": "PyPI", "name": "madeup-project"},
            "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "2.0"}]}],
        }
    ],
}
CARGO_LOCK = """version = 3

[[package]]
name = "app"
version = "0.1.0"
dependencies = ["madeup-crate"]

[[package]]
name = "madeup-crate"
version = "1.0.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "0000000000000000000000000000000000000000000000000000000000000000"
"""


@pytest.fixture
def advisories(tmp_path: Path) -> str:
    """A database holding the made-up advisories of both registries."""
    db = f"sqlite:///{tmp_path / 'advisories.db'}"
    for cli, record in (("crates", CRATE_ADVISORY), ("pypi", PROJECT_ADVISORY)):
        source = tmp_path / f"{cli}.json"
        source.write_text(json.dumps(record))
        done = stagecrawl(cli, "vulns", "--source", str(source), "--scope", "all", "--db", db)
        assert done.returncode == 0, done.stderr
    return db


def project(root: Path, pin: str = "madeup-project==1.5") -> Path:
    (root / "rust").mkdir(parents=True)
    (root / "rust" / "Cargo.lock").write_text(CARGO_LOCK)
    (root / "py").mkdir()
    (root / "py" / "requirements.txt").write_text(f"{pin}\n")
    (root / "target").mkdir()  # a build folder's lock files are not the project's
    (root / "target" / "Cargo.lock").write_text("not read")
    return root


def test_one_audit_answers_for_every_ecosystem_of_a_project(
    advisories: str, tmp_path: Path
) -> None:
    root = project(tmp_path / "app")
    table = stagecrawl("audit", str(root), "--db", advisories)
    assert table.returncode == 1, table.stderr
    assert "TEST-CRATE-0001" in table.stdout and "TEST-PYPI-0001" in table.stdout
    assert "== crates.io ==" in table.stdout and "== PyPI ==" in table.stdout

    done = stagecrawl("audit", str(root), "--db", advisories, "--format", "json")
    assert done.returncode == 1, done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    hits = {e: [h["id"] for h in part["hits"]] for e, part in document["ecosystems"].items()}
    assert hits == {"crates.io": ["TEST-CRATE-0001"], "PyPI": ["TEST-PYPI-0001"]}
    assert document["vulnerabilities"] == 2 and document["exit_code"] == 1

    sarif = json.loads(
        stagecrawl("audit", str(root), "--db", advisories, "--format", "sarif").stdout
    )
    sarif_validator().validate(sarif)
    assert len(sarif["runs"]) == 2
    bom = json.loads(
        stagecrawl("audit", str(root), "--db", advisories, "--format", "cyclonedx").stdout
    )
    purls = {c["purl"] for c in bom["components"] if "purl" in c}  # the app itself has none
    assert purls == {"pkg:cargo/madeup-crate@1.0.0", "pkg:pypi/madeup-project@1.5"}
    assert {v["id"] for v in bom["vulnerabilities"]} == {"TEST-CRATE-0001", "TEST-PYPI-0001"}
    markdown = stagecrawl("audit", str(root), "--db", advisories, "--format", "markdown")
    assert "# crates.io" in markdown.stdout and "# PyPI" in markdown.stdout

    # fixed versions: a clean project exits 0
    clean = tmp_path / "clean"
    project(clean, "madeup-project==2.0")
    (clean / "rust" / "Cargo.lock").write_text(CARGO_LOCK.replace('"1.0.0"', '"1.2.0"'))
    assert stagecrawl("audit", str(clean), "--db", advisories).returncode == 0


def test_a_folder_without_a_lock_file_is_one_line_and_exit_2(
    advisories: str, tmp_path: Path
) -> None:
    (tmp_path / "empty").mkdir()
    done = stagecrawl("audit", str(tmp_path / "empty"), "--db", advisories)
    assert done.returncode == 2
    assert "no lock file under" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_an_ecosystem_without_advisories_is_named_not_passed(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'crates-only.db'}"
    source = tmp_path / "c.json"
    source.write_text(json.dumps(CRATE_ADVISORY))
    assert stagecrawl("crates", "vulns", "--source", str(source), "--db", db).returncode == 0
    root = project(tmp_path / "app", "madeup-project==2.0")
    (root / "rust" / "Cargo.lock").write_text(CARGO_LOCK.replace('"1.0.0"', '"1.2.0"'))
    done = stagecrawl("audit", str(root), "--db", db)
    assert done.returncode == 1  # nothing hit, but PyPI could not be audited
    assert "not audited: PyPI" in done.stdout and "pypi vulns" in done.stdout


def test_pypi_audit_honours_the_gate_config_and_writes_markdown(
    advisories: str, tmp_path: Path
) -> None:
    root = project(tmp_path / "app")
    lock = root / "py" / "requirements.txt"
    later = date.today() + timedelta(days=30)
    config = root / "stagecrawl.toml"
    config.write_text(
        "[advisories]\nignore = [\n"
        f'  {{ id = "CVE-2099-0002", reason = "never imported at run time", until = {later} }},\n'
        "]\n"
    )
    report = root / "audit.md"
    done = stagecrawl(
        "pypi", "audit", "--lockfile", str(lock), "--db", advisories,
        "--format", "markdown", "--output", str(report), cwd=root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + done.stdout
    text = report.read_text()
    assert "ignored: TEST-PYPI-0001" in text and "never imported at run time" in text
    assert done.stdout == ""  # the report went to the file

    config.write_text(
        "[advisories]\nignore = [\n"
        '  { id = "TEST-PYPI-0001", reason = "was fine", until = 2020-01-01 },\n'
        "]\n"
    )
    expired = stagecrawl("pypi", "audit", "--lockfile", str(lock), "--db", advisories, cwd=root)
    assert expired.returncode == 1
    assert "expired on 2020-01-01" in expired.stdout
    # --config names another file; --ignore adds to it
    other = tmp_path / "gate.toml"
    other.write_text("[advisories]\nseverity-threshold = 'low'\n")
    flagged = stagecrawl(
        "pypi", "audit", "--lockfile", str(lock), "--db", advisories, "--config", str(other),
        "--ignore", "TEST-PYPI-0001",
    )  # fmt: skip
    assert flagged.returncode == 0, flagged.stdout


def test_one_license_check_answers_for_every_ecosystem_of_a_project(
    advisories: str, tmp_path: Path
) -> None:
    """`stagecrawl licenses check DIR`: every lock file's versions against one policy; a
    version not collected has no known license: reported, never passed (exit 1)."""
    root = project(tmp_path / "app")
    done = stagecrawl(
        "licenses", "check", str(root), "--allow", "MIT", "--db", advisories, "--format", "json"
    )
    assert done.returncode == 1, done.stderr
    document: dict[str, Any] = json.loads(done.stdout)
    assert document["exit_code"] == 1
    unknown = {
        ecosystem: [(v["version"], v["reason"]) for v in part["violations"]]
        for ecosystem, part in document["ecosystems"].items()
    }
    assert unknown == {
        "crates.io": [("1.0.0", "not collected: license unknown")],
        "PyPI": [("1.5", "not collected: license unknown")],
    }
