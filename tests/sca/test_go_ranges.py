"""The SCA core's range reading on real Go-style SEMVER ranges: every entry of the Go
vulnerability database (../shared/fixtures/go/vulndb/vulndb.zip, 4,291 records: pseudo-versions,
`+incompatible`, `introduced: 0`), read through a Go plug (`v`-prefixed module versions) and
checked on and around every bound against an evaluation written here with python-semver and
the OSV schema (union of listed pairs, else the timeline with an end before an introduction at
one version), not with stagecrawl's range code."""

from __future__ import annotations

import json
import zipfile
from functools import cmp_to_key
from typing import Any

import pytest
import semver

from stagecrawl.sca.osv_model import affected_packages
from tests.sca.test_osv_semantics import GO
from tests.services import SHARED

ZIP = SHARED / "fixtures" / "go" / "vulndb" / "vulndb.zip"
pytestmark = [
    pytest.mark.skipif(
        not ZIP.exists(), reason="../shared/fixtures/go/vulndb/vulndb.zip is not beside the project"
    ),
    pytest.mark.slow,
]


def parse(text: str) -> semver.Version:
    return semver.Version.parse(text.removeprefix("v"))


def compare(left: semver.Version | None, right: semver.Version | None) -> int:
    if left is None or right is None:
        return (right is None) - (left is None)  # None: below every version
    return int(left.compare(right))


def affects(version: str, events: list[dict[str, str]]) -> bool:
    v = parse(version)
    steps: list[tuple[str, semver.Version | None]] = []
    for event in events:
        ((kind, value),) = event.items()
        steps.append((kind, None if kind == "introduced" and value == "0" else parse(value)))
    starts, ends = steps[0::2], steps[1::2]
    alternating = all(k == "introduced" for k, _ in starts) and all(
        k in ("fixed", "last_affected") for k, _ in ends
    )
    if alternating and all(
        compare(s, e) <= 0 for (_, s), (_, e) in zip(starts, ends, strict=False)
    ):
        for position, (_, start) in enumerate(starts):
            if compare(v, start) < 0:
                continue
            if position == len(ends):
                return True
            kind, end = ends[position]
            if compare(v, end) < 0 or (kind == "last_affected" and compare(v, end) == 0):
                return True
        return False

    def order(a: tuple[str, Any], b: tuple[str, Any]) -> int:
        return compare(a[1], b[1]) or (a[0] == "introduced") - (b[0] == "introduced")

    vulnerable = False
    for kind, bound in sorted(steps, key=cmp_to_key(order)):
        if kind == "introduced" and compare(v, bound) >= 0:
            vulnerable = True
        elif (kind == "fixed" and compare(v, bound) >= 0) or (
            kind == "last_affected" and compare(v, bound) > 0
        ):
            vulnerable = False
    return vulnerable


def around(value: str) -> set[str]:
    v = parse(value)
    result = {f"v{v}", f"v{v.bump_patch()}", f"v{v.bump_minor()}", f"v{v.bump_major()}"}
    if not v.prerelease and not v.build:
        result |= {f"v{v}-rc.1", f"v{v}+incompatible"}
    if v.patch:
        result.add(f"v{v.replace(patch=v.patch - 1)}")
    return result


def test_every_go_range_reads_as_an_independent_evaluation_reads_it() -> None:
    checked = hits = 0
    with zipfile.ZipFile(ZIP) as archive:
        names = [n for n in archive.namelist() if n.startswith("ID/") and n.endswith(".json")]
        assert len(names) == 4291
        for name in names:
            record = json.loads(archive.read(name))
            entries = [a for a in record.get("affected", []) if a["package"]["ecosystem"] == "Go"]
            by_module: dict[str, list[dict[str, Any]]] = {}
            for entry in entries:
                by_module.setdefault(entry["package"]["name"], []).append(entry)
            for affected in affected_packages(record, GO):
                ranges = [
                    r["events"]
                    for e in by_module[affected.name]
                    for r in e.get("ranges", [])
                    if r["type"] == "SEMVER"
                ]
                versions = {"v0.0.0", "v99.0.0"}
                for events in ranges:
                    for event in events:
                        (value,) = event.values()
                        if value != "0":
                            versions |= around(value)
                for version in versions:
                    want = any(affects(version, events) for events in ranges)
                    assert affected.hits(version) == want, (record["id"], version)
                    checked += 1
                    hits += want
    assert checked > 40_000 and hits > 10_000
