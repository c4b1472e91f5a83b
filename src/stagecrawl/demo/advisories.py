"""The demo's advisories: OSV records written here, about the demo's made-up packages.

None of them is a real vulnerability: their ids are `DEMO-2026-NNNN`, the CVE aliases some carry
(so the demo fills the CVE tables too) are in the year 2099, which no real CVE has, and each
record says so in its `details` and `database_specific`. They follow the OSV schema
(https://ossf.github.io/osv-schema/) in the shapes the real databases use: SEMVER ranges for
crates.io, ECOSYSTEM ranges for PyPI, several ranges, `introduced: "0"`, `last_affected`,
listed versions, a withdrawn record, informational kinds, CVSS vectors.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

NOTE = "Made up for the stagecrawl demo: not a real vulnerability, package or CVE."
Events = Sequence[tuple[str, str]]  # ("introduced", "1.0.0"), ("fixed", "1.2.0"), …


def advisory(
    osv_id: str,
    ecosystem: str,
    package: str,
    summary: str,
    ranges: Iterable[Events] = (),
    *,
    versions: Sequence[str] = (),
    aliases: Sequence[str] = (),
    severity: str | None = None,
    functions: Sequence[str] = (),
    informational: str | None = None,
    withdrawn: str | None = None,
    modified: str = "2026-01-15T00:00:00Z",
) -> dict[str, Any]:
    """One OSV record about `package` of `ecosystem`, labelled as made up."""
    range_type = "SEMVER" if ecosystem == "crates.io" else "ECOSYSTEM"
    affected: dict[str, Any] = {"package": {"ecosystem": ecosystem, "name": package}}
    listed_ranges = [
        {"type": range_type, "events": [{kind: version} for kind, version in events]}
        for events in ranges
    ]
    if listed_ranges:
        affected["ranges"] = listed_ranges
    if versions:
        affected["versions"] = list(versions)
    if functions:  # RustSec's place for the affected functions
        affected["ecosystem_specific"] = {"affects": {"functions": list(functions)}}
    specific: dict[str, Any] = {"made_up": True, "note": NOTE}
    if informational:
        specific["informational"] = informational
    affected["database_specific"] = specific
    record: dict[str, Any] = {
        "schema_version": "1.6.0",
        "id": osv_id,
        "modified": modified,
        "published": "2026-01-01T00:00:00Z",
        "aliases": list(aliases),
        "summary": summary,
        "details": f"{NOTE} {summary}.",
        "affected": [affected],
        "database_specific": {"made_up": True, "note": NOTE},
    }
    if severity:
        # "CVSS:3.1/…" is a CVSS_V3 vector, "CVSS:4.0/…" a CVSS_V4 one
        kind = "CVSS_V" + severity.removeprefix("CVSS:")[0]
        record["severity"] = [{"type": kind, "score": severity}]
    if withdrawn:
        record["withdrawn"] = withdrawn
    return record


def osv_zip(records: Iterable[dict[str, Any]]) -> bytes:
    """The records as OSV's per-ecosystem `all.zip` lays them out: one `<id>.json` each."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for record in records:
            archive.writestr(f"{record['id']}.json", json.dumps(record, indent=2))
    return buffer.getvalue()


def write_folder(folder: Path, records: Iterable[dict[str, Any]]) -> Path:
    """The records as a folder of `<id>.json` files (what `pypi vulns --source DIR` reads)."""
    folder.mkdir(parents=True, exist_ok=True)
    for record in records:
        (folder / f"{record['id']}.json").write_text(json.dumps(record, indent=2) + "\n")
    (folder / "README.txt").write_text(NOTE + "\n")
    return folder


# PyPI: about the projects of stagecrawl.demo.pypi
PYPI_ADVISORIES = [
    advisory(
        "DEMO-2026-0101",
        "PyPI",
        "demo-http",
        "demo-http sends credentials to another host after a redirect (made up)",
        [[("introduced", "0"), ("fixed", "1.3.0")]],
        aliases=["CVE-2099-0101"],
        severity="CVSS:3.1/AV:N/AC:H/PR:N/UI:R/S:U/C:H/I:N/A:N",
    ),
    advisory(
        "DEMO-2026-0102",
        "PyPI",
        "Demo.Yaml",  # as an advisory may spell it: matched by its PEP 503 name
        "Demo.Yaml's full loader runs arbitrary code (made up)",
        [[("introduced", "0"), ("fixed", "5.1")]],
        aliases=["CVE-2099-0102"],
        severity="CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
    ),
    advisory(
        "DEMO-2026-0103",
        "PyPI",
        "demo-certs",
        "demo-certs trusts a retired root certificate (made up)",
        [[("introduced", "2020.1"), ("fixed", "2023.7.22")]],
    ),
    advisory(
        "DEMO-2026-0104",
        "PyPI",
        "demo-cli",
        "demo-cli expands shell patterns in quoted arguments (made up)",
        [[("introduced", "1.0"), ("last_affected", "1.0.post1")]],
        aliases=["CVE-2099-0104"],
    ),
    advisory(
        "DEMO-2026-0105",
        "PyPI",
        "demo-six",
        "demo-six: an advisory withdrawn after review (made up)",
        [[("introduced", "0")]],
        withdrawn="2026-01-10T00:00:00Z",
    ),
    advisory(
        "DEMO-2026-0106",
        "PyPI",
        "demo-plugin",
        "demo-plugin 0.6.0 was uploaded with a debugging hook left on (made up)",
        versions=["0.6.0"],
    ),
    advisory(
        "DEMO-2026-0107",
        "PyPI",
        "demo-not-crawled",
        "A project the demo does not crawl: the audit still knows it (made up)",
        [[("introduced", "0"), ("fixed", "2.0")]],
    ),
]

# crates.io: about the crates of stagecrawl.demo.registry
CRATES_ADVISORIES = [
    advisory(
        "DEMO-2026-0001",
        "crates.io",
        "demo-archive",
        "demo-archive writes outside the target folder on `..` entries (made up)",
        [[("introduced", "0"), ("fixed", "0.2.7")]],
        aliases=["CVE-2099-0001"],
        severity="CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:U/C:N/I:H/A:N",
        functions=["demo_archive::Entry::unpack", "demo_archive::Archive::unpack"],
    ),
    advisory(
        "DEMO-2026-0002",
        "crates.io",
        "demo-archive",
        "demo-archive trusts the size an entry's header claims (made up)",
        [[("introduced", "0"), ("fixed", "0.3.2")]],
        aliases=["CVE-2099-0002"],
        severity="CVSS:4.0/AV:L/AC:L/AT:N/PR:N/UI:P/VC:H/VI:H/VA:N/SC:N/SI:N/SA:N",
    ),
    advisory(
        "DEMO-2026-0003",
        "crates.io",
        "demo-inline-vec",
        "demo-inline-vec overflows its buffer when it grows by many at once (made up)",
        [
            [("introduced", "0.4.0"), ("fixed", "0.4.6")],
            [("introduced", "1.0.0"), ("fixed", "1.2.0")],
        ],
    ),
    advisory(
        "DEMO-2026-0004",
        "crates.io",
        "demo-web",
        "demo-web accepts two Content-Length headers (made up)",
        [[("introduced", "0.10.0"), ("last_affected", "0.10.4")]],
        aliases=["CVE-2099-0004"],
    ),
    advisory(
        "DEMO-2026-0005",
        "crates.io",
        "demo-web",
        "demo-web's header parser overflows an integer (made up)",
        [[("introduced", "0.9.0"), ("fixed", "0.10.9")]],
        aliases=["CVE-2099-0005"],
        severity="CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:H",
    ),
    advisory(
        "DEMO-2026-0006",
        "crates.io",
        "demo-tls",
        "demo-tls hands out a reference that outlives its buffer (made up)",
        [[("introduced", "0.5.0"), ("fixed", "0.5.7")]],
        informational="unsound",
    ),
    advisory(
        "DEMO-2026-0007",
        "crates.io",
        "demo-clock",
        "demo-clock is no longer maintained (made up)",
        [[("introduced", "0")]],
        informational="unmaintained",
    ),
    advisory(
        "DEMO-2026-0008",
        "crates.io",
        "demo-sys",
        "demo-sys: an advisory withdrawn after review (made up)",
        [[("introduced", "0")]],
        withdrawn="2026-01-10T00:00:00Z",
    ),
    advisory(
        "DEMO-2026-0009",
        "crates.io",
        "demo-parse",
        "demo-parse 2.0.1 was published from a tampered checkout (made up)",
        versions=["2.0.1"],
        aliases=["CVE-2099-0009"],
    ),
    advisory(
        "DEMO-2026-0010",
        "crates.io",
        "demo-not-crawled",
        "A crate the demo does not crawl: the audit still knows it (made up)",
        [[("introduced", "0"), ("fixed", "1.0.0")]],
    ),
    advisory(
        "DEMO-2026-0011",
        "crates.io",
        "demo-tls",
        "demo-tls reads uninitialised memory; rated, so it stays in the CVE table (made up)",
        [[("introduced", "0"), ("fixed", "0.5.3")]],
        aliases=["CVE-2099-0011"],
        severity="CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:L/I:N/A:N",
        informational="unsound",
    ),
]
