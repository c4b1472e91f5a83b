"""The names of stagecrawl's tables, standard library only: the SQLAlchemy declarations
(storage/db.py) take them from here, and so do the read-only status queries, which run on
SQLite without loading SQLAlchemy (storage/reads.py; issue 20's start-up budget)."""

from __future__ import annotations

from dataclasses import dataclass

WORKER = "TB_STAGECRAWL_WORKER"


@dataclass(frozen=True)
class RegistryNames:
    """One registry's table names in the organisation's format (docs/schema.md)."""

    code: str  # RUST, PYPI …
    list: str
    version: str
    product: str
    seed: str


def registry_names(code: str, seed: str | None = None) -> RegistryNames:
    """`TB_COMP_LIB_<code>_LIST`, `TB_COMP_LIB_VERSION_<code>`, `TB_COMP_LIB_PRODUCT_<code>`
    and the seed queue (`TB_STAGECRAWL_SEED_<code>` unless `seed`)."""
    return RegistryNames(
        code,
        list=f"TB_COMP_LIB_{code}_LIST",
        version=f"TB_COMP_LIB_VERSION_{code}",
        product=f"TB_COMP_LIB_PRODUCT_{code}",
        seed=seed or f"TB_STAGECRAWL_SEED_{code}",
    )


# Each registry's tables (a new registry adds its line here and its declaration in db.py)
RUST = registry_names("RUST", seed="TB_STAGECRAWL_SEED")
PYPI = registry_names("PYPI")
REGISTRIES = {names.code: names for names in (RUST, PYPI)}
