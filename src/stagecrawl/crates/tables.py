"""The crates registry's tables and their owners: the one place that says crates.io's rows
are LANGUAGE 'rust', REPOSITORY 'Cargo', ordered by SemVer."""

from __future__ import annotations

from stagecrawl.crates.semver import SEMVER
from stagecrawl.storage.db import Database
from stagecrawl.storage.names import RUST
from stagecrawl.storage.owners import ProductTable, VersionTable

LANGUAGE, REPOSITORY = "rust", "Cargo"
CODE = RUST.code  # TB_COMP_LIB_RUST_LIST, TB_COMP_LIB_VERSION_RUST, TB_COMP_LIB_PRODUCT_RUST


def versions(db: Database) -> VersionTable:
    return VersionTable(db, db.registry(CODE), LANGUAGE, REPOSITORY)


def products(db: Database) -> ProductTable:
    return ProductTable(db, db.registry(CODE), LANGUAGE, REPOSITORY, SEMVER)
