"""Advisories for crates.io: OSV's crates.io dump (or the RustSec zip, a folder, one JSON file)
into TB_COMP_LIB_VULN_CARGO_RAW / _V1 / _HIT, through the SCA core (stagecrawl.sca.osv_*) with
cargo's SemVer order plugged in (stagecrawl.crates.ecosystem.CRATES)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy.engine import Connection

from stagecrawl.crates.ecosystem import CRATES, vuln_tables
from stagecrawl.crates.sources import DEFAULT_OSV_URL
from stagecrawl.crates.tables import products, versions
from stagecrawl.sca import osv_import
from stagecrawl.sca.osv_import import ImportReport, RegistryState
from stagecrawl.sca.osv_model import Affected, affected_packages
from stagecrawl.sca.osv_model import vuln_id as _vuln_id
from stagecrawl.sca.osv_read import read_advisories
from stagecrawl.storage.db import Database

__all__ = ["DEFAULT_OSV_URL", "ImportReport", "import_advisories", "read_advisories"]


def vuln_id(advisory: dict[str, Any]) -> str:
    """The VULN_ID of an advisory: its CVE alias, else its RUSTSEC id, else its OSV id."""
    return _vuln_id(advisory, CRATES.primary_prefix)


def affected_crates(advisory: dict[str, Any], problems: list[str] | None = None) -> list[Affected]:
    """The crates.io packages of an advisory, several `affected` entries of one crate merged."""
    return affected_packages(advisory, CRATES, problems)


def import_advisories(
    db: Database, records: Iterable[dict[str, Any]], scope: str, report: ImportReport
) -> None:
    """Store the advisories of `records` in the crates VULN tables; V1 for the crates in
    PRODUCT (`scope` collected) or every crate (`all`); HIT for the collected versions."""

    def state(conn: Connection) -> RegistryState:
        # the table owners (crates/tables.py)
        return RegistryState(products(db).keys(conn), versions(db).by_product(conn))

    osv_import.import_advisories(db, CRATES, vuln_tables(db), records, scope, report, state)
