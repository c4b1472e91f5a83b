"""OSV advisories read as their authors mean them, for PyPI (PEP 440), crates.io (SemVer) and
Go-style SEMVER ranges (a `v` before the version) alike: overlapping and tied ranges, listed
versions matched by the ecosystem's equality, "patched" advice that never admits an affected
version, alias twins merged without loss, unreadable parts said, not passed over.

Each expectation is worked out by hand from the events in the test (comments say how), not by
running the code under test."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from stagecrawl.crates.ecosystem import CRATES
from stagecrawl.crates.semver import Version as SemVer
from stagecrawl.crates.semver import sort_key as semver_sort_key
from stagecrawl.pypi.plugin import PYPI
from stagecrawl.sca.audit import AuditReport, Package, audit
from stagecrawl.sca.config import GateConfig
from stagecrawl.sca.ecosystem import Ecosystem, OrderedVersion, VulnTables
from stagecrawl.sca.gate import apply_gate
from stagecrawl.sca.osv_import import ImportReport, RegistryState, import_advisories
from stagecrawl.sca.osv_model import affected_packages
from stagecrawl.storage.db import Database
from tests.crates.kernel import rust


def go_version(text: str) -> OrderedVersion:
    """Go module versions: SemVer with a `v` (OSV writes them without it)."""
    return SemVer.parse(text.removeprefix("v"))


GO = Ecosystem(
    name="Go",
    purl_type="golang",
    parse_version=go_version,
    version_kind="Go module version",
    primary_prefix="GO-",
    sort_key=lambda text: semver_sort_key(text.removeprefix("v")),
)


@dataclass(frozen=True)
class Case:
    """One ecosystem and how its versions are spelled in the cases below."""

    ecosystem: Ecosystem
    range_type: str
    primary: str  # the ecosystem's own database prefix
    package: str

    def v(self, text: str) -> str:
        """A version as the ecosystem spells it in a lock (three parts for SemVer)."""
        if self.ecosystem is PYPI:
            return text
        parts = text.split(".")
        full = ".".join(parts + ["0"] * (3 - len(parts)))
        return f"v{full}" if self.ecosystem is GO else full

    def bound(self, text: str) -> str:
        """A version as the advisory writes it (Go: without the `v`)."""
        return self.v(text).removeprefix("v")


CASES = [
    Case(PYPI, "ECOSYSTEM", "PYSEC-", "demo-pkg"),
    Case(CRATES, "SEMVER", "RUSTSEC-", "demo"),
    Case(GO, "SEMVER", "GO-", "example.com/demo"),
]
IDS = ["pypi", "crates", "go"]


def record(
    case: Case,
    osv_id: str,
    *events: tuple[str, str],
    versions: list[str] | None = None,
    package: str | None = None,
    **fields: Any,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "package": {"ecosystem": case.ecosystem.name, "name": package or case.package},
        "ranges": [{"type": case.range_type, "events": [{k: case.bound(v)} for k, v in events]}],
    }
    if versions is not None:
        entry["versions"] = versions
    return {"id": osv_id, "modified": "2099-01-01T00:00:00Z", "affected": [entry], **fields}


def hits(case: Case, advisory: dict[str, Any], *versions: str) -> list[bool]:
    [affected] = affected_packages(advisory, case.ecosystem)
    return [affected.hits(case.v(v)) for v in versions]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_overlapping_pairs_are_their_union(case: Case) -> None:
    # PYSEC-2023-72 (pyspark): [0,3.1.1) ∪ [3.2.0,3.2.2) ∪ [3.1.1,3.2.0) = everything below
    # 3.2.2. Walked as one sorted timeline with `introduced` first at a tie, 3.1.1–3.2.1 came
    # out clean and the advice named >=3.1.1.
    events = [
        ("introduced", "0"),
        ("fixed", "3.1.1"),
        ("introduced", "3.2.0"),
        ("fixed", "3.2.2"),
        ("introduced", "3.1.1"),
        ("fixed", "3.2.0"),
    ]
    advisory = record(case, f"{case.primary}2099-1", *events)
    assert hits(case, advisory, "3.1.0", "3.1.1", "3.2.0", "3.2.1", "3.2.2") == [
        True,
        True,
        True,
        True,
        False,
    ]
    [affected] = affected_packages(advisory, case.ecosystem)
    assert affected.patched() == [f">={case.bound('3.2.2')}"]
    # PYSEC-2021-114 (jinja2-like): [2.11,2.11.7) overlaps [0,2.11.6): 2.11.6 is affected
    overlap = record(
        case,
        f"{case.primary}2099-2",
        ("introduced", "2.11"),
        ("fixed", "2.11.7"),
        ("introduced", "0"),
        ("fixed", "2.11.6"),
    )
    assert hits(case, overlap, "2.11.6", "2.11.7") == [True, False]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_where_events_do_not_alternate_an_end_applies_before_an_introduced(case: Case) -> None:
    # I1, F2, I2, I2.5, F3 does not alternate: the timeline, sorted, a fix at 2 applied before
    # the introduction at 2, so [1,2) ∪ [2,3): 2.0 is affected (introduced-first said clean).
    advisory = record(
        case,
        f"{case.primary}2099-3",
        ("introduced", "1.0"),
        ("fixed", "2.0"),
        ("introduced", "2.0"),
        ("introduced", "2.5"),
        ("fixed", "3.0"),
    )
    assert hits(case, advisory, "0.9", "1.0", "2.0", "2.9", "3.0") == [
        False,
        True,
        True,
        True,
        False,
    ]
    # a pair whose introduction lies above its fix is not a pair as written: the timeline
    # sorts them (RustSec's out-of-order pairs: [1.0,1.2) ∪ [2.0,2.1))
    swapped = record(
        case,
        f"{case.primary}2099-4",
        ("introduced", "2.0"),
        ("fixed", "1.2"),
        ("introduced", "1.0"),
        ("fixed", "2.1"),
    )
    assert hits(case, swapped, "1.1", "1.5", "2.0", "2.1") == [True, False, True, False]


def test_listed_versions_match_by_the_ecosystems_equality() -> None:
    pypi = CASES[0]
    advisory = record(
        pypi,
        "PYSEC-2099-5",
        ("introduced", "9.0"),
        versions=["1.0", "2.0.0RC1", "3.0-1", "v23.9.0", "not-a-version"],
    )
    [affected] = affected_packages(advisory, PYPI)
    for version in ("1.0.0", "1", "2.0.0rc1", "2.0rc1", "3.0.post1", "23.9.0", "not-a-version"):
        assert affected.hits(version), version
    for version in ("1.0.1", "2.0.0", "3.0", "23.9", "not-a-Version"):
        assert not affected.hits(version) or version == "23.9", version
    assert affected.hits("23.9")  # 23.9 is 23.9.0 under PEP 440
    # SemVer: build metadata does not make another version (crates.io refuses such an upload;
    # Go's +incompatible is the plain version)
    [crate] = affected_packages(
        record(CASES[1], "RUSTSEC-2099-5", ("introduced", "9.0"), versions=["1.0.0"]), CRATES
    )
    assert crate.hits("1.0.0+build.1") and not crate.hits("1.0.1")
    [module] = affected_packages(
        record(CASES[2], "GO-2099-5", ("introduced", "9.0"), versions=["20.10.17"]), GO
    )
    assert module.hits("v20.10.17+incompatible") and module.hits("v20.10.17")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_patched_advice_never_admits_an_affected_version(case: Case) -> None:
    # [0,1.0) and the listed 1.5 (outside every range): the advice leaves 1.5 out
    advisory = record(case, f"{case.primary}2099-6", ("introduced", "0"), ("fixed", "1.0"))
    advisory["affected"][0]["versions"] = [case.bound("1.5")]
    [affected] = affected_packages(advisory, case.ecosystem)
    b = case.bound
    assert affected.patched() == [f">={b('1.0')}, <{b('1.5')}", f">{b('1.5')}"]
    assert affected.hits(case.v("1.5")) and not affected.hits(case.v("1.4"))


# --- twins, unreadable parts and strictness, through import and audit ----------------------


def import_records(db: Database, case: Case, records: list[dict[str, Any]]) -> ImportReport:
    report = ImportReport()
    tables = VulnTables(rust(db).vuln_raw, rust(db).vuln_v1, rust(db).vuln_hit)

    def state(_conn: Any) -> RegistryState:
        return RegistryState(set(), {})

    import_advisories(db, case.ecosystem, tables, records, "all", report, state)
    return report


def audit_of(db: Database, case: Case, *pins: tuple[str, str]) -> AuditReport:
    packages = [Package(name, case.v(version), ["test"]) for name, version in pins]
    return audit(db, case.ecosystem, rust(db).vuln_raw, packages)


CVSS_HIGH = "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"  # 9.8
CVSS_LOW = "CVSS:3.1/AV:L/AC:H/PR:H/UI:R/S:U/C:L/I:N/A:N"  # 1.8


def twins(case: Case, withdrawn: bool = False) -> list[dict[str, Any]]:
    """A primary record [1.0,1.2) without summary, rated low; its GHSA twin [1.0,1.5) rated
    high with a summary, also naming a second package."""
    primary = record(
        case,
        f"{case.primary}2099-7",
        ("introduced", "1.0"),
        ("fixed", "1.2"),
        aliases=["CVE-2099-7", "GHSA-aaaa-bbbb-cccc"],
        details="The parser trusts its input. More words follow.",
        severity=[{"type": "CVSS_V3", "score": CVSS_LOW}],
    )
    if withdrawn:
        primary["withdrawn"] = "2099-02-01T00:00:00Z"
    ghsa = record(
        case,
        "GHSA-aaaa-bbbb-cccc",
        ("introduced", "1.0"),
        ("fixed", "1.5"),
        aliases=["CVE-2099-7"],
        summary="Parser trusts input",
        severity=[{"type": "CVSS_V3", "score": CVSS_HIGH}],
    )
    ghsa["modified"] = "2098-01-01T00:00:00Z"
    second = record(case, "x", ("introduced", "0"), package=f"{case.package}-extra")
    ghsa["affected"] += second["affected"]
    return [primary, ghsa]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_alias_twins_are_one_finding_that_loses_nothing(case: Case, tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'twins.db'}")
    report = import_records(db, case, twins(case))
    assert report.duplicates_merged == 1 and report.problems == [] == report.warnings
    found = audit_of(
        db, case, (case.package, "1.3"), (case.package, "1.5"), (f"{case.package}-extra", "7.0")
    )
    got = [(h.package.name, h.package.version, h.advisory.osv_id) for h in found.hits]
    # the wider GHSA range (1.3 is fixed only there) and the package only the GHSA names
    assert got == [
        (case.package, case.v("1.3"), f"{case.primary}2099-7"),
        (f"{case.package}-extra", case.v("7.0"), f"{case.primary}2099-7"),
    ]
    advisory = found.hits[0].advisory
    assert set(advisory.aliases) == {"CVE-2099-7", "GHSA-aaaa-bbbb-cccc"}
    assert advisory.severity == CVSS_HIGH  # the highest of the twins
    assert advisory.summary == "Parser trusts input"  # the primary has none: the twin's
    assert advisory.details == "The parser trusts its input. More words follow."


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_withdrawn_twin_does_not_hide_a_live_one(case: Case, tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'withdrawn.db'}")
    import_records(db, case, twins(case, withdrawn=True))
    found = audit_of(db, case, (case.package, "1.1"), (case.package, "1.3"))
    # the live GHSA speaks, under its own id (the primary id says "withdrawn" where it is read)
    assert [(h.package.version, h.advisory.osv_id) for h in found.hits] == [
        (case.v("1.1"), "GHSA-aaaa-bbbb-cccc"),
        (case.v("1.3"), "GHSA-aaaa-bbbb-cccc"),
    ]
    assert f"{case.primary}2099-7" in found.hits[0].advisory.aliases
    # every twin withdrawn: withdrawn
    both = twins(case, withdrawn=True)
    both[1]["withdrawn"] = "2099-03-01T00:00:00Z"
    again = Database(f"sqlite:///{tmp_path / 'both.db'}")
    import_records(again, case, both)
    assert audit_of(again, case, (case.package, "1.1")).hits == []


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_twins_imported_apart_are_merged_by_the_audit(case: Case, tmp_path: Path) -> None:
    """Two sources (the ecosystem's database, then a GHSA dump) stored the twins as two rows:
    the audit still reports one finding with the union of their ranges."""
    db = Database(f"sqlite:///{tmp_path / 'apart.db'}")
    primary, ghsa = twins(case)
    ghsa["aliases"] = ["CVE-2099-7"]  # only the primary names its twin
    import_records(db, case, [primary])
    import_records(db, case, [ghsa])
    found = audit_of(db, case, (case.package, "1.1"), (case.package, "1.3"))
    assert [(h.package.version, h.advisory.osv_id) for h in found.hits] == [
        (case.v("1.1"), f"{case.primary}2099-7"),
        (case.v("1.3"), f"{case.primary}2099-7"),
    ]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_an_unreadable_part_is_kept_warned_and_said_at_audit(case: Case, tmp_path: Path) -> None:
    # PYSEC-2019-125's `fixed 2019-09-12`: no ecosystem order reads it
    db = Database(f"sqlite:///{tmp_path / 'odd.db'}")
    odd = record(case, f"{case.primary}2099-8", ("introduced", "0"))
    odd["affected"][0]["ranges"][0]["events"].append({"fixed": "2019-09-12"})
    odd["affected"][0]["ranges"].append(
        {"type": case.range_type, "events": [{"introduced": case.bound("5.0")}]}
    )
    report = import_records(db, case, [odd])
    assert report.problems == []  # imported: exit 0
    assert len(report.warnings) == 1 and "fixed '2019-09-12'" in report.warnings[0]
    found = audit_of(db, case, (case.package, "1.0"), (case.package, "5.0"))
    assert [h.package.version for h in found.hits] == [case.v("5.0")]  # the readable range
    [missed] = found.unevaluated
    assert missed.package.version == case.v("1.0") and missed.osv_id == f"{case.primary}2099-8"
    assert missed.text().startswith(f"advisory {case.primary}2099-8 could not be fully evaluated")
    assert found.exit_code == 1  # the 5.0 hit
    clean = audit_of(db, case, (case.package, "1.0"))
    assert clean.exit_code == 0 and len(clean.unevaluated) == 1  # said, not failed…
    apply_gate(clean, GateConfig(strict=True), datetime(2099, 1, 1))
    assert clean.exit_code == 1 and clean.strict_failures  # …unless the gate is strict


def test_one_component_for_two_spellings_of_one_version(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'spell.db'}")
    import_records(db, CASES[0], [record(CASES[0], "PYSEC-2099-9", ("introduced", "0"))])
    found = audit_of(
        db, CASES[0], ("demo_pkg", "3.0.0"), ("Demo.Pkg", "3.0"), ("demo-pkg", "v2.0.0RC1")
    )
    assert [(p.version, found.purl(p)) for p in found.packages] == [
        ("2.0.0rc1", "pkg:pypi/demo-pkg@2.0.0rc1"),
        ("3.0", "pkg:pypi/demo-pkg@3.0"),
    ]
    assert len(found.hits) == 2
