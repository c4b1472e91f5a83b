"""crates.io as the command line, `status` and `stagecrawl audit DIR` see it before anything
runs: its names, words, settings and lock files (standard library only, with the settings
table: `crates --help` and `status` import nothing heavier)."""

from __future__ import annotations

from dataclasses import dataclass

from stagecrawl.kernel.declaration import LockKind, RegistryDecl, Words
from stagecrawl.settings import Section, rate_setting, register_section, setting
from stagecrawl.storage.names import Bounds, registry_names

# Where crates.io publishes its bulk data (option defaults, shown without loading anything).
DEFAULT_DUMP_URL = "https://static.crates.io/db-dump.tar.gz"
DEFAULT_OSV_URL = "https://osv-vulnerabilities.storage.googleapis.com/crates.io/all.zip"
DEFAULT_INDEX_URL = "https://index.crates.io/"

# TB_COMP_LIB_RUST_LIST, TB_COMP_LIB_VERSION_RUST, TB_COMP_LIB_PRODUCT_RUST, the seed queue
# TB_STAGECRAWL_SEED (the first registry's, before names were per registry), and
# TB_COMP_LIB_VULN_CARGO_*; crates.io allows names of 64 characters.
NAMES = registry_names(
    "RUST", vuln="CARGO", seed="TB_STAGECRAWL_SEED", group="CRATE_NAME", bounds=Bounds(name=64)
)


@register_section
@dataclass(frozen=True, kw_only=True)
class CratesSettings(Section):
    """crates.io's lanes: the sparse index (authoritative) and the API (enrichment)."""

    KEY = "crates"
    ENV_PREFIX = ""  # STAGECRAWL_INDEX_URL …: the first registry's names, kept

    index_url: str = setting(DEFAULT_INDEX_URL, "sparse index root (a mirror works)", check="url")
    api_url: str = setting("https://crates.io/", "crates.io API root", check="url")
    index_rate: float = rate_setting(10.0, "index lane: requests per second")
    api_rate: float = rate_setting(1.0, "API lane: requests per second")
    index_burst: int = setting(
        1, "index lane: requests allowed back to back", minimum=1, maximum=1000
    )
    api_burst: int = setting(1, "API lane: requests allowed back to back", minimum=1, maximum=1000)
    index_budget: str = setting(
        "none", "index lane: windows such as 5000/1h (comma-separated), or none", check="budgets"
    )
    api_budget: str = setting(
        "600/600s",
        "API lane: windows (crates.io: about 600 per 10 minutes), or none",
        check="budgets",
    )
    index_token: str | None = setting(
        None,
        "bearer token for a private index (index lane only)",
        flag=None,
        secret=True,
        check="header",
    )
    api_token: str | None = setting(
        None,
        "bearer token for a private API (API lane only)",
        flag=None,
        secret=True,
        check="header",
    )


DECLARATION = RegistryDecl(
    cli="crates",
    title="crates.io",
    names=NAMES,
    words=Words(
        unit="crate",
        units="crates",
        index="the index",
        problems_key="index_problems",
        problems_row="index lines skipped (unreadable)",
        problems_line="unreadable index lines",
        name_example="serde",
    ),
    section=CratesSettings,
    tables="stagecrawl.crates.tables",
    plugin="stagecrawl.crates.plugin:REGISTRY",
    locks=(LockKind("Cargo.lock", ("Cargo.lock",)),),
    seed_env="STAGECRAWL_SEED_CRATES",
    osv_url=DEFAULT_OSV_URL,
    osv_ecosystem="crates.io",
    lock_help="A Cargo.lock (v1–v4); repeatable.",
)
