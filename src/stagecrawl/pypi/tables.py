"""PyPI's tables: the one place that says PyPI's rows are LANGUAGE 'python', REPOSITORY 'PyPI',
keyed by the PEP 503 name and ordered by PEP 440, with PyPI's own columns (docs/pypi.md), and
how a database an older stagecrawl made is brought to this shape. Their owners are the
kernel's (`Registry.versions`, `Registry.products`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Boolean, Column, String, Text

from stagecrawl.pypi.declaration import NAMES
from stagecrawl.pypi.versions import is_final, sort_key
from stagecrawl.storage.names import SHORT_TEXT_MAX, STATUS_MAX, VALIDATOR_MAX
from stagecrawl.storage.owners import VersionOrder
from stagecrawl.storage.schema import (
    BigCount,
    Collations,
    JsonText,
    Migration,
    MigrationContext,
    RegistrySchema,
    register,
)

LANGUAGE, REPOSITORY = "python", "PyPI"
# An invalid version (`unknown`) sorts below every valid one and is never a final release.
PEP440 = VersionOrder(key=sort_key, is_prerelease=lambda version: not is_final(version))


def _version_extra(_c: Collations) -> Sequence[Column[Any]]:
    return (
        Column("YANKED_REASON", Text),
        Column("REQUIRES_PYTHON", String(SHORT_TEXT_MAX)),
        Column("EXTRAS", JsonText),  # Provides-Extra; NULL: unknown
        Column("FILES", JsonText),  # filename, hashes, size, upload_time, yanked …
        Column("DEPENDENCY_SOURCE", String(STATUS_MAX)),  # metadata | json-api | NULL
        Column("LICENSE_SOURCE", String(32)),
        Column("VERSION_VALID", Boolean),  # PEP 440
    )


def _product_extra(_c: Collations) -> Sequence[Column[Any]]:
    return (
        Column("PROJECT_STATUS", String(STATUS_MAX)),  # PEP 792
        Column("LAST_SERIAL", BigCount),
        Column("ETAG", String(VALIDATOR_MAX)),
        Column("INVALID_VERSIONS", JsonText),
    )


def _own_words(ctx: MigrationContext) -> None:
    """Schema 1: the LIST and seed tables' key column is PROJECT_NAME (it was CRATE_NAME,
    copied from the first registry), its indexes named after it; crates.io's RUST_VERSION
    and LINKS leave PyPI's VERSION table (always NULL there); names may be 200 characters
    (the columns held 64, validation allowed 200)."""
    ctx.rename_group(NAMES, "CRATE_NAME")
    ctx.drop_column(NAMES.version, "RUST_VERSION")
    ctx.drop_column(NAMES.version, "LINKS")
    ctx.widen_declared(NAMES, NAMES.bounds.name)


def _long_urls(ctx: MigrationContext) -> None:
    ctx.widen_declared(NAMES, NAMES.bounds.url)


SCHEMA = register(
    RegistrySchema(
        NAMES,
        version_extra=_version_extra,
        product_extra=_product_extra,
        dependencies_nullable=True,  # NULL: unknown (never "none", which is [])
        migrations=(
            Migration(1, "PROJECT_NAME key column, no crates.io columns", _own_words),
            Migration(2, "URL holds the page of the longest name and version", _long_urls),
        ),
        vulns_command="stagecrawl pypi vulns",
    )
)
