"""What a registry plugs into the SCA core: its OSV ecosystem, its purl type, its version order,
and its advisory tables.

A registry package builds one `Ecosystem` (crates.io: `stagecrawl.crates.sca.CRATES`) and one
`VulnTables` from its own table declarations; everything in `stagecrawl.sca` takes them as
arguments and imports no registry.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import Table


class OrderedVersion(Protocol):
    """A parsed version of one ecosystem: totally ordered by that ecosystem's rules."""

    def __lt__(self, other: Any, /) -> bool: ...

    def __le__(self, other: Any, /) -> bool: ...


def lower(name: str) -> str:
    return name.lower()


def unchanged(version: str) -> str:
    return version


@dataclass(frozen=True)
class Ecosystem:
    """One registry as OSV, purl and its version rules know it.

    `parse_version` raises ValueError for a string the ecosystem cannot order (such a version
    is never inside a range: only an advisory's explicit `versions` list can name it).
    `product_key` is the key the registry's tables use for a package name (crates.io: lower
    case; PyPI: PEP 503 normalised). `lowest` are the `introduced` values meaning "below every
    version" beside the schema's "0". `primary_prefix` is the id prefix of the ecosystem's own
    advisory database (RUSTSEC-, PYSEC-): records that alias each other (a GHSA and a PYSEC
    twin) are merged into one advisory under its id, and its ids are preferred after a CVE.

    Two versions are one when the ecosystem says so, not when their strings match: PEP 440
    for PyPI (`1.0` is `1.0.0`, `2.0.0RC1` is `2.0.0rc1`), SemVer precedence for crates.io and
    Go (build metadata aside). `version_key` is that identity (default: the parsed version,
    which must then be hashable and equal by the ecosystem's rules; a version the ecosystem
    cannot parse is only itself); `normalise_version` is the one spelling reports, purls and
    BOM components use for it (default: as written)."""

    name: str  # OSV ecosystem: "crates.io", "PyPI"
    purl_type: str  # "cargo", "pypi"
    parse_version: Callable[[str], OrderedVersion]
    version_kind: str = "version"  # in messages: "not a semantic version"
    product_key: Callable[[str], str] = lower
    lowest: frozenset[str] = frozenset({"0"})
    primary_prefix: str = ""
    database_name: str = "OSV"  # its advisory database, for reports: "RustSec"
    advisory_url_template: str = ""  # "https://rustsec.org/advisories/{}.html"
    sort_key: Callable[[str], Any] = field(default=str)
    package_word: str = "package"  # in reports: "crate"
    registry_key: str = ""  # in JSON keys: packages_not_from_<registry_key> ("crates_io")
    lockfile_name: str = ""  # the file a repo@tag source stands for ("Cargo.lock")
    manifest_name: str = ""  # where SARIF points a version named on the command line
    version_key: Callable[[str], Hashable] | None = None
    normalise_version: Callable[[str], str] = unchanged

    def parsed(self, version: str) -> OrderedVersion | None:
        """The version parsed, or None when the ecosystem cannot order it."""
        try:
            return self.parse_version(version)
        except ValueError:
            return None

    def identity(self, version: str, parsed: OrderedVersion | bool | None = True) -> Hashable:
        """What makes two spellings one version (see the class doc). `parsed`: the version
        already parsed (None: not a version), for a caller asking of many advisories."""
        if self.version_key is not None:
            return self.version_key(version)
        if parsed is True:
            parsed = self.parsed(version)
        return ("text", version) if parsed is None or parsed is False else ("version", parsed)

    def same_version(self, left: str, right: str) -> bool:
        return left == right or self.identity(left) == self.identity(right)

    def advisory_url(self, osv_id: str) -> str:
        own = self.primary_prefix and osv_id.startswith(self.primary_prefix)
        if own and self.advisory_url_template:
            return self.advisory_url_template.format(osv_id)
        return f"https://osv.dev/vulnerability/{osv_id}"

    def source_name(self, osv_id: str) -> str:
        if self.primary_prefix and osv_id.startswith(self.primary_prefix):
            return self.database_name
        return "OSV"


@dataclass(frozen=True)
class VulnTables:
    """A registry's advisory tables (the organisation's format, one schema for every
    registry): RAW every advisory for every package it names, V1 the CVE table of the
    packages in scope, HIT the collected versions each advisory hits."""

    raw: Table  # TB_COMP_LIB_VULN_<X>_RAW
    v1: Table  # TB_COMP_LIB_VULN_<X>_V1
    hit: Table  # TB_COMP_LIB_VULN_<X>_HIT


def parse_time(value: Any) -> datetime | None:
    """RFC 3339 timestamps as naive UTC datetimes (the tables store UTC)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(UTC).replace(tzinfo=None)
    return parsed.replace(microsecond=0)


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None, microsecond=0)
