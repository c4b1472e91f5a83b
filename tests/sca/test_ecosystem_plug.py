"""The SCA core takes a registry's version order as a plug: the same OSV records read with
PEP 440 (as a PyPI registry plugs it) and with SemVer give each ecosystem's answers, and the
core imports no registry package."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from sqlalchemy import select

from stagecrawl.sca.audit import Package, audit
from stagecrawl.sca.ecosystem import Ecosystem, OrderedVersion, VulnTables
from stagecrawl.sca.osv_import import ImportReport, RegistryState, import_advisories
from stagecrawl.sca.osv_model import affected_packages
from stagecrawl.storage.db import Database
from tests.crates.kernel import rust

SCA = Path(__file__).resolve().parents[2] / "src" / "stagecrawl" / "sca"


def pep440(text: str) -> OrderedVersion:
    try:
        return Version(text)
    except InvalidVersion:
        raise ValueError(text) from None


PYPI = Ecosystem(
    name="PyPI",
    purl_type="pypi",
    parse_version=pep440,
    version_kind="PEP 440 version",
    product_key=lambda name: str(canonicalize_name(name)),
    primary_prefix="PYSEC-",
)


def advisory(*events: dict[str, str], versions: list[str] | None = None) -> dict[str, Any]:
    return {
        "id": "PYSEC-2099-1",
        "modified": "2099-01-01T00:00:00Z",
        "aliases": ["GHSA-aaaa-bbbb-cccc"],
        "affected": [
            {
                "package": {"ecosystem": "PyPI", "name": "Demo_Pkg"},
                "ranges": [{"type": "ECOSYSTEM", "events": list(events)}],
                "versions": versions or [],
            },
            {"package": {"ecosystem": "crates.io", "name": "other"}, "versions": ["1.0.0"]},
        ],
    }


def test_pep440_order_decides_the_ranges() -> None:
    record = advisory({"introduced": "1.0"}, {"fixed": "1.0.post1"}, {"introduced": "2.0a1"})
    [demo] = affected_packages(record, PYPI)
    assert demo.product_key == "demo-pkg"  # the plug's key, PEP 503
    assert demo.hits("1.0") and demo.hits("1.0.0") and not demo.hits("1.0.post1")
    assert not demo.hits("1.0a1")  # PEP 440: a pre-release sorts before its release
    assert demo.hits("2.0a1") and demo.hits("2.0b2") and demo.hits("10.0")
    assert not demo.hits("1.10") and not demo.hits("1.9.9")
    assert demo.patched() == [">=1.0.post1, <2.0a1"]


def test_a_version_the_ecosystem_cannot_order_is_never_in_a_range() -> None:
    record = advisory({"introduced": "0"}, versions=["not-a-version"])
    [demo] = affected_packages(record, PYPI)
    assert demo.hits("0.0.1") and demo.hits("99")
    assert not demo.hits("weird-version")  # in "every version", yet unordered: not matched
    assert demo.hits("not-a-version")  # listed exactly: matched


def test_the_same_events_read_with_another_order_give_other_answers() -> None:
    semverish = Ecosystem(
        name="PyPI", purl_type="pypi", parse_version=lambda t: tuple(map(int, t.split(".")))
    )
    record = advisory({"introduced": "1.0"}, {"fixed": "1.10"})
    [tuples] = affected_packages(record, semverish)
    [pep] = affected_packages(record, PYPI)
    assert tuples.hits("1.9") and pep.hits("1.9")
    problems: list[str] = []
    affected_packages(advisory({"introduced": "1.0a1"}), semverish, problems)
    assert problems == ["affected[0].ranges[0]: introduced '1.0a1' is not a version"]


@pytest.fixture
def db(tmp_path: Path) -> Database:
    return Database(f"sqlite:///{tmp_path / 'plug.db'}")


def test_import_and_audit_through_the_plug(db: Database) -> None:
    # PyPI's VULN tables have the CARGO tables' schema: the core writes whichever it is given.
    tables = VulnTables(rust(db).vuln_raw, rust(db).vuln_v1, rust(db).vuln_hit)
    duplicate = {
        "id": "GHSA-aaaa-bbbb-cccc",
        "modified": "2099-01-02T00:00:00Z",
        "affected": [{"package": {"ecosystem": "PyPI", "name": "demo-pkg"}}],
    }
    records = [advisory({"introduced": "1.0"}, {"fixed": "1.2"}), duplicate]
    report = ImportReport()

    def state(_conn: Any) -> RegistryState:
        return RegistryState({"demo-pkg"}, {"demo-pkg": ["0.9", "1.1", "1.2", "garbage"]})

    import_advisories(db, PYPI, tables, records, "collected", report, state)
    assert report.duplicates_merged == 1 and report.problems == []
    with db.engine.connect() as conn:
        raw = conn.execute(
            select(rust(db).vuln_raw.c.OSV_ID, rust(db).vuln_raw.c.PRODUCT_KEY)
        ).all()
        hits = conn.execute(select(rust(db).vuln_hit.c.VERSION)).scalars().all()
    assert [tuple(r) for r in raw] == [("PYSEC-2099-1", "demo-pkg")]  # not the crates.io entry
    assert hits == ["1.1"]

    found = audit(
        db,
        PYPI,
        rust(db).vuln_raw,
        [Package("Demo.Pkg", "1.1.0", ["argument"]), Package("demo_pkg", "1.2", ["argument"])],
    )
    assert [(h.package.version, h.advisory.osv_id) for h in found.hits] == [
        ("1.1.0", "PYSEC-2099-1")
    ]
    assert found.purl(found.packages[0]) == "pkg:pypi/demo.pkg@1.1.0"  # the purl spec: lower case
    assert found.exit_code == 1


def test_the_sca_core_imports_no_registry_package() -> None:
    registries = ("crates", "pypi", "aircraft", "cli", "demo")
    offenders = []
    for path in sorted(SCA.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] == "stagecrawl" and len(parts) > 1 and parts[1] in registries:
                    offenders.append(f"{path.name}: {name}")
    assert offenders == []
    assert len(list(SCA.glob("*.py"))) >= 10
