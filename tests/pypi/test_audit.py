"""`pypi audit` on real lock files against the PYSEC advisories (../shared all.zip) agrees,
hit for hit, with an independent OSV evaluation (tests/pypi/osv_reference.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stagecrawl.demo.advisories import PYPI_ADVISORIES, write_folder
from stagecrawl.kernel.sca import import_records
from stagecrawl.pypi.locks import parse_lock
from stagecrawl.pypi.plugin import PYPI
from stagecrawl.storage.db import Database
from tests.cli import stagecrawl
from tests.pypi import osv_reference
from tests.pypi.kernel import PYPI as REGISTRY
from tests.pypi.kernel import audit
from tests.services import needs_shared, shared_path

ZIP = shared_path("pypi", "osv", "PyPI", "all.zip")
LOCKS = shared_path("pypi", "locks")
needs_zip = needs_shared("pypi", "osv", "PyPI", "all.zip")
LOCK_FILES = [
    "poetry-lock-1.1/poetry.lock",
    "poetry-lock-2.0/poetry.lock",
    "poetry-lock-2.1/poetry.lock",
    "uv-lock-rev3/uv.lock",
    "uv-lock-v1-norev/uv.lock",
    "pylock-pdm/pylock.toml",
    "pylock-pip/pip-full.toml",
    "pylock-spec-example/example.toml",
    "requirements-sigstore/requirements.txt",
    "requirements-warehouse/main.txt",
]


@pytest.fixture(scope="module")
def advisories_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('osv') / 'osv.db'}"
    report = import_records(Database(url), REGISTRY, ZIP, "all", 4 * 1024 * 1024)
    assert report.advisories == 2661
    return url


@pytest.fixture(scope="module")
def reference() -> dict[str, list[dict[str, object]]]:
    return osv_reference.load(ZIP)


@needs_zip
@pytest.mark.parametrize("lock_path", LOCK_FILES)
def test_audit_agrees_with_an_independent_osv_evaluation(
    lock_path: str, advisories_db: str, reference: dict[str, list[dict[str, object]]]
) -> None:
    path = LOCKS / lock_path
    report = audit(advisories_db, lockfiles=[path])
    got = {(h.package.name, h.package.version, h.advisory.osv_id) for h in report.hits}
    lock = parse_lock(path.read_text(), path.name)
    want = {
        (r.name, r.version, osv_id)
        for r in lock.pins
        for osv_id in osv_reference.hits(reference, r.name, r.version)
    }
    assert got == want
    assert report.problems == []


@needs_zip
def test_known_hits_and_the_version_order(advisories_db: str) -> None:
    report = audit(
        advisories_db, ["requests==2.18.0", "py==1.11.0", "Django==3.1.5", "requests==2.32.3"]
    )
    hits = {(h.package.name, h.package.version, h.advisory.osv_id) for h in report.hits}
    assert ("requests", "2.18.0", "PYSEC-2018-28") in hits
    assert ("py", "1.11.0", "PYSEC-2022-42969") in hits  # last_affected: 1.11.0 included
    assert not any(v == "2.32.3" for _, v, _ in hits)
    assert report.purl(report.packages[0]).startswith("pkg:pypi/")
    assert PYPI.parsed("unknown") is None


@needs_zip
def test_cli_audit_formats_and_exit_codes(advisories_db: str, tmp_path: Path) -> None:
    lock = LOCKS / "poetry-lock-1.1" / "poetry.lock"
    done = stagecrawl(
        "pypi", "audit", "--lockfile", str(lock), "--db", advisories_db, "--format", "json"
    )
    assert done.returncode == 1, done.stderr  # poetry's 2022 lock has known vulnerabilities
    document = json.loads(done.stdout)
    assert document["vulnerabilities"] > 0 and document["hits"][0]["project"]
    table = stagecrawl("pypi", "audit", "--lockfile", str(lock), "--db", advisories_db)
    assert table.returncode == 1  # the table is the report: on stdout, one hit a line
    hit = document["hits"][0]
    lines = [line.split()[:3] for line in table.stdout.splitlines()]
    assert [hit["project"], hit["version"], hit["id"]] in lines, table.stdout
    assert "vulnerabilities," in table.stdout and "vulnerabilities," not in table.stderr
    quiet = stagecrawl("-q", "pypi", "audit", "six==1.16.0", "--db", advisories_db)
    assert quiet.returncode == 0 and quiet.stdout == ""  # -q: nothing when it passes
    sarif = stagecrawl(
        "pypi", "audit", "--lockfile", str(lock), "--db", advisories_db, "--format", "sarif"
    )
    assert json.loads(sarif.stdout)["version"] == "2.1.0"
    cdx = stagecrawl(
        "pypi", "audit", "--lockfile", str(lock), "--db", advisories_db, "--format", "cyclonedx"
    )
    components = json.loads(cdx.stdout)["components"]
    assert all(c["purl"].startswith("pkg:pypi/") for c in components)
    clean = stagecrawl("pypi", "audit", "six==1.16.0", "--db", advisories_db, "--format", "json")
    assert clean.returncode == 0, clean.stderr
    bad = tmp_path / "poetry.lock"
    bad.write_text("[[package]\n")
    broken = stagecrawl("pypi", "audit", "--lockfile", str(bad), "--db", advisories_db)
    assert broken.returncode == 2
    assert broken.stderr.count("\n") == 1 and "not TOML" in broken.stderr
    unpinned = stagecrawl("pypi", "audit", "requests>=2", "--db", advisories_db)
    assert unpinned.returncode == 2 and "NAME==VERSION" in unpinned.stderr


@needs_zip
def test_cli_audit_of_a_repository_at_each_tag(advisories_db: str, tmp_path: Path) -> None:
    import subprocess

    work = tmp_path / "app"
    work.mkdir()

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=work, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("config", "user.email", "t@example.org")
    git("config", "user.name", "t")
    (work / "requirements.txt").write_text("requests==2.18.0\n")
    git("add", ".")
    git("commit", "-qm", "one")
    git("tag", "v1")
    (work / "requirements.txt").write_text("requests==2.32.3\n")
    git("commit", "-qam", "two")
    git("tag", "v2")
    done = stagecrawl(
        "pypi", "audit", "--repo", str(work), "--all-tags", "--db", advisories_db,
        "--cache-dir", str(tmp_path / "cache"), "--format", "json",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    hits = json.loads(done.stdout)["hits"]
    assert {h["version"] for h in hits} == {"2.18.0"}
    assert any("app@v1" in str(h) for h in hits)


def test_a_lock_of_no_pypi_package_is_a_clean_audit(tmp_path: Path) -> None:
    """A project without PyPI dependencies (its uv.lock holds only itself, editable): the audit
    of its lock passes with 0 packages, as `crates audit` does for a workspace-only Cargo.lock.
    It was 'say what to audit: NAME==VERSION … or --lockfile PATH', exit 2, to a command given
    --lockfile (a CI gate that failed for want of dependencies)."""
    url = f"sqlite:///{tmp_path / 'osv.db'}"
    made_up = write_folder(tmp_path / "advisories", PYPI_ADVISORIES)  # the demo's
    import_records(Database(url), REGISTRY, made_up, "all", 4 * 1024 * 1024)
    lock = tmp_path / "uv.lock"
    lock.write_text(
        'version = 1\nrequires-python = ">=3.11"\n\n[[package]]\nname = "myapp"\n'
        'version = "0.1.0"\nsource = { editable = "." }\n'
    )
    done = stagecrawl("pypi", "audit", "--lockfile", str(lock), "--db", url, "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["vulnerabilities"] == 0
    nothing = stagecrawl("pypi", "audit", "--db", url)  # no pin, no lock: still a usage error
    assert nothing.returncode == 2 and "say what to audit" in nothing.stderr
