"""A database created by the previous stagecrawl keeps working: missing nullable columns and
missing indexes are added in place, and the derived VULN tables, whose primary key changed,
are rebuilt empty."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import Column, MetaData, Table, inspect, select

from stagecrawl.errors import StorageError
from stagecrawl.sca.osv_import import ImportReport
from stagecrawl.storage.db import Database, build_metadata
from tests.crates.kernel import import_advisories, rust

# What the previous version created: no LICENSE_EXPRESSION, no INFORMATIONAL, and the VULN
# tables keyed on the CVE.
ADDED = {
    "TB_COMP_LIB_VERSION_RUST": {"LICENSE_EXPRESSION"},
    "TB_COMP_LIB_VULN_CARGO_RAW": {"INFORMATIONAL"},
}
OLD_KEYS = {
    "TB_COMP_LIB_VULN_CARGO_V1": ("PRODUCT_KEY", "VULN_ID"),
    "TB_COMP_LIB_VULN_CARGO_HIT": ("PRODUCT_KEY", "VERSION", "VULN_ID"),
}


def old_metadata(db: Database) -> MetaData:
    kw: dict[str, Any] = {}
    if db.dialect in ("mysql", "mariadb"):
        kw = {"mysql_charset": "utf8mb4", "mysql_collate": db.collation, "mysql_engine": "InnoDB"}
    current = build_metadata(db.collations)
    old = MetaData()
    for table in current.sorted_tables:
        keys = OLD_KEYS.get(table.name, tuple(c.name for c in table.primary_key.columns))
        Table(
            table.name,
            old,
            *(
                Column(
                    c.name,
                    c.type,
                    primary_key=c.name in keys,
                    nullable=c.nullable,
                    autoincrement=False,
                )
                for c in table.columns
                if c.name not in ADDED.get(table.name, set())
            ),
            **kw,
        )
    return old


def test_a_database_of_the_previous_version_is_upgraded(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    probe = Database(db_url, create=False)
    old = old_metadata(probe)
    old.create_all(probe.engine)
    now = datetime(2026, 1, 1)
    with probe.engine.begin() as conn:
        conn.execute(
            old.tables["TB_COMP_LIB_VERSION_RUST"].insert(),
            [
                {
                    "LANGUAGE": "rust",
                    "REPOSITORY": "Cargo",
                    "PRODUCT_KEY": "demo",
                    "VERSION": "1.0.0",
                    "NAME": "demo",
                    "LICENSE": "MIT/Apache-2.0",
                    "DEPENDENCIES": "[]",
                    "FEATURES": "{}",
                    "YANKED": False,
                    "PROCESSED": 1,
                    "LAST_UPDATED": now,
                }
            ],
        )
        conn.execute(
            old.tables["TB_COMP_LIB_VULN_CARGO_V1"].insert(),
            [
                {
                    "PRODUCT_KEY": "demo",
                    "VULN_ID": "CVE-2099-1",
                    "VULN_RANGE": "(,)",
                    "MAPPED_TYPE": "RE",
                    "OSV_ID": "RUSTSEC-2099-0001",
                    "LAST_UPDATED": now,
                }
            ],
        )
    probe.dispose()

    # A reader (`status`) cannot upgrade: it names the table and what will, and changes nothing.
    with pytest.raises(StorageError, match=r"LICENSE_EXPRESSION.*upgrades it in place"):
        Database(db_url, read_only=True)
    with caplog.at_level(logging.WARNING, logger="stagecrawl.storage"):
        db = Database(db_url)
    assert "rebuilding" in caplog.text and "crates vulns" in caplog.text
    live = inspect(db.engine)
    assert "LICENSE_EXPRESSION" in {c["name"] for c in live.get_columns(rust(db).version.name)}
    # the LIST's claim indexes (an older LIST has none of them): claims read through them
    indexes = {str(ix["name"]) for ix in live.get_indexes(rust(db).list.name)}
    assert {"IX_RUST_LIST_PROCESSED_CRATE", "IX_RUST_LIST_RESYNC_CRATE"} <= indexes
    assert live.get_pk_constraint(rust(db).vuln_v1.name)["constrained_columns"] == [
        "PRODUCT_KEY",
        "VULN_ID",
        "OSV_ID",
    ]
    with db.engine.connect() as conn:
        kept = conn.execute(
            select(rust(db).version.c.LICENSE, rust(db).version.c.LICENSE_EXPRESSION)
        ).all()
        assert [tuple(r) for r in kept] == [("MIT/Apache-2.0", None)]  # collected data stays
        assert conn.execute(select(rust(db).vuln_v1)).all() == []  # derived: rebuilt empty
    # …and `crates vulns` refills it
    record = {
        "id": "RUSTSEC-2099-0001",
        "aliases": ["CVE-2099-1"],
        "modified": "2099-01-01T00:00:00Z",
        "affected": [
            {
                "package": {"ecosystem": "crates.io", "name": "demo"},
                "ranges": [{"type": "SEMVER", "events": [{"introduced": "0"}]}],
            }
        ],
    }
    import_advisories(db, [record], "collected", ImportReport())
    with db.engine.connect() as conn:
        assert len(conn.execute(select(rust(db).vuln_hit)).all()) == 1
    db.dispose()
    again = Database(db_url)  # a second start changes nothing
    with again.engine.connect() as conn:
        assert len(conn.execute(select(rust(again).vuln_hit)).all()) == 1
    again.dispose()
