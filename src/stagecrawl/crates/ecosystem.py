"""crates.io as the SCA core knows it: the OSV ecosystem name, the purl type, cargo's SemVer
order and RustSec as its advisory database."""

from __future__ import annotations

from stagecrawl.crates.declaration import DECLARATION
from stagecrawl.crates.semver import SEMVER, Version
from stagecrawl.kernel.registry import declared_ecosystem

CRATES = declared_ecosystem(
    DECLARATION,
    SEMVER,
    purl_type="cargo",
    parse_version=Version.parse,
    version_kind="semantic version",
    # RustSec writes 0.0.0-0, below which SemVer has no version, for "every version".
    lowest=frozenset({"0", "0.0.0-0"}),
    primary_prefix="RUSTSEC-",
    database_name="RustSec",
    advisory_url_template="https://rustsec.org/advisories/{}.html",
    registry_key="crates_io",
    lockfile_name="Cargo.lock",
    manifest_name="Cargo.toml",
)
