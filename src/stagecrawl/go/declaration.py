"""Go modules as the command line, `status` and `stagecrawl audit DIR` see them before anything
runs: names, words, lanes and lock files (standard library only, with the settings table)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from stagecrawl.kernel.declaration import LockKind, RegistryDecl, Words
from stagecrawl.settings import Section, rate_setting, register_section, setting
from stagecrawl.storage.names import VERSION_MAX, Bounds, registry_names

DEFAULT_PROXY_URL = "https://proxy.golang.org/"
DEFAULT_INDEX_URL = "https://index.golang.org/index"
DEFAULT_OSV_URL = "https://vuln.go.dev/vulndb.zip"
# Module paths have no registry bound of their own; 300 holds every path in the Go vulnerability
# database and the public index with room, inside MySQL's key length at utf8mb4_bin.
NAME_MAX = 300
URL_MAX = len("https://pkg.go.dev/@") + NAME_MAX + VERSION_MAX  # a version's page

# TB_COMP_LIB_GOLANG_LIST (keyed by MODULE_PATH, case-sensitive), TB_COMP_LIB_VERSION_GOLANG,
# TB_COMP_LIB_PRODUCT_GOLANG, TB_STAGECRAWL_SEED_GOLANG, TB_COMP_LIB_VULN_GOLANG_*
NAMES = registry_names(
    "GOLANG", group="MODULE_PATH", case_sensitive=True, bounds=Bounds(name=NAME_MAX, url=URL_MAX)
)


@register_section
@dataclass(frozen=True, kw_only=True)
class GoSettings(Section):
    """Go's lanes: the module proxy (authoritative), the index feed (what is new) and the
    module zips (licenses, off by default). docs/operations.md says why these rates."""

    KEY = "go"
    ENV_PREFIX = "GO_"
    EVERY_COMMAND: ClassVar[tuple[str, ...]] = ("private",)

    proxy_url: str = setting(
        DEFAULT_PROXY_URL, "GOPROXY-protocol root (a mirror, Athens, a file tree)", check="url"
    )
    index_url: str = setting(DEFAULT_INDEX_URL, "module index feed (?since=…)", check="url")
    proxy_rate: float = rate_setting(8.0, "Go proxy lane: requests per second")
    index_rate: float = rate_setting(1.0, "Go index lane: requests per second")
    zip_rate: float = rate_setting(1.0, "Go zip lane: requests per second")
    zips: int = setting(
        0, "fetch each version's module zip for its licenses (1) or not (0)", minimum=0, maximum=1
    )
    zip_max_mb: float = setting(
        32.0, "largest module zip fetched for licenses, MiB", minimum=0, above=True, maximum=500
    )
    since: str = setting(
        "",
        "refresh: walk the index feed from this time (RFC 3339, inclusive) and register every"
        " module version it lists, pseudo-versions too (a mirror); the cursor is kept",
    )
    private: str = setting(
        "",
        "module path globs never asked of the proxy (GOPRIVATE's syntax; GOPRIVATE and"
        " GONOPROXY are read too)",
    )


DECLARATION = RegistryDecl(
    cli="go", title="Go modules", names=NAMES, section=GoSettings,
    words=Words("module", "modules", "the module proxy", "proxy", name_example="golang.org/x/mod"),
    tables="stagecrawl.go.tables", plugin="stagecrawl.go.plugin:REGISTRY",
    locks=(LockKind("go.mod", ("go.mod",)), LockKind("go.work", ("go.work",))),
    seed_env="STAGECRAWL_GO_SEED_MODULES", osv_url=DEFAULT_OSV_URL, osv_ecosystem="Go",
    lock_help="go.mod, go.work, go.sum (go < 1.17) or vendor/modules.txt; repeatable.",
)  # fmt: skip
