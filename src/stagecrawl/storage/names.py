"""The names of stagecrawl's tables, standard library only: the SQLAlchemy declarations
(storage/schema.py) take them from here, and so do the read-only status queries, which run on
SQLite without loading SQLAlchemy (storage/reads.py; issue 20's start-up budget).

A registry declares its names once (`registry_names`, in its own declaration module); storage
knows no registry by name."""

from __future__ import annotations

from dataclasses import dataclass

WORKER = "TB_STAGECRAWL_WORKER"
LICENSE = "TB_LICENSE_V2"
# The schema's version per part ("core" and each registry's code): what migrations have run.
SCHEMA = "TB_STAGECRAWL_SCHEMA"

# The bound of each kind of value the tables hold, declared once: the DDL takes its column
# lengths from here and the registries check values against them where they enter (a name
# from the command line, a version from an index page, a pin from a lock file), so a value
# that does not fit is refused with its reason instead of failing a whole batch on a server
# that enforces lengths (PostgreSQL, strict MySQL) while SQLite stored it.
VERSION_MAX = 100  # a version string
SOURCE_MAX = 32  # LIST SOURCE / RESOLVE_KIND
SHA256_MAX = 64  # a hex sha256 (CHECKSUM, CONTENT_SHA256)
VALIDATOR_MAX = 255  # an ETag, a Last-Modified
URL_MAX = 255
SHORT_TEXT_MAX = 255  # a requires-python, a links key, a display name's home
STATUS_MAX = 16


@dataclass(frozen=True)
class Bounds:
    """A registry's identity bound: the longest package name its columns hold. Each registry
    declares its own (crates.io allows 64 characters; PyPI names reach a few hundred, Go
    module paths too); the other bounds are the module constants above."""

    name: int = 64
    version: int = VERSION_MAX
    # VERSION's and PRODUCT's URL, the package's page: wider where a long name (and its
    # version) is part of the link (PyPI's /project/NAME/VERSION/, pkg.go.dev/PATH@VERSION)
    url: int = URL_MAX


@dataclass(frozen=True)
class RegistryNames:
    """One registry's table names in the organisation's format (docs/schema.md), the LIST's
    and seed table's key column (named for the registry: CRATE_NAME, PROJECT_NAME …), whether
    names compare case-sensitively (Go) or not, and its value bounds."""

    code: str  # RUST, PYPI …: TB_COMP_LIB_<code>_LIST …
    list: str
    version: str
    product: str
    seed: str
    vuln: str  # TB_COMP_LIB_VULN_<vuln>_RAW …
    group: str = "CRATE_NAME"
    case_sensitive: bool = False
    bounds: Bounds = Bounds()
    # The schema version of its tables this stagecrawl writes (its migrations reach it:
    # storage/schema.py checks the two agree); `status` compares it with the stored one.
    schema_version: int = 0

    @property
    def vuln_raw(self) -> str:
        return f"TB_COMP_LIB_VULN_{self.vuln}_RAW"

    @property
    def vuln_v1(self) -> str:
        return f"TB_COMP_LIB_VULN_{self.vuln}_V1"

    @property
    def vuln_hit(self) -> str:
        return f"TB_COMP_LIB_VULN_{self.vuln}_HIT"

    def fold(self, name: str) -> str:
        """A stored key as the registry compares it (lower case unless case-sensitive)."""
        return name if self.case_sensitive else name.lower()


def registry_names(
    code: str,
    *,
    vuln: str | None = None,
    seed: str | None = None,
    group: str = "CRATE_NAME",
    case_sensitive: bool = False,
    bounds: Bounds = Bounds(),
    schema_version: int = 0,
) -> RegistryNames:
    """`TB_COMP_LIB_<code>_LIST`, `TB_COMP_LIB_VERSION_<code>`, `TB_COMP_LIB_PRODUCT_<code>`,
    the seed queue (`TB_STAGECRAWL_SEED_<code>` unless `seed`) and the advisory tables
    (`TB_COMP_LIB_VULN_<vuln or code>_…`)."""
    return RegistryNames(
        code,
        list=f"TB_COMP_LIB_{code}_LIST",
        version=f"TB_COMP_LIB_VERSION_{code}",
        product=f"TB_COMP_LIB_PRODUCT_{code}",
        seed=seed or f"TB_STAGECRAWL_SEED_{code}",
        vuln=vuln or code,
        group=group,
        case_sensitive=case_sensitive,
        bounds=bounds,
        schema_version=schema_version,
    )


def behind_text(url: str, behind: list[str]) -> str:
    """What a reader says of a database an older stagecrawl made (one line, every reader)."""
    return (
        f"{url} was made by an older stagecrawl ({'; '.join(behind)}): `stagecrawl upgrade"
        " --db URL` upgrades it in place (so does the next writing command: seed, collect,"
        " crawl …)"
    )
