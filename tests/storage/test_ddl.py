from __future__ import annotations

from pathlib import Path

from stagecrawl.storage.ddl import mysql_ddl

ROOT = Path(__file__).resolve().parents[2]


def test_committed_mysql_ddl_matches_the_tables_stagecrawl_creates() -> None:
    committed = (ROOT / "sql" / "mysql.sql").read_text()
    assert committed == mysql_ddl(), "regenerate: python -m stagecrawl.storage.ddl > sql/mysql.sql"
    assert "utf8mb4_0900_ai_ci" in committed and "BINARY(32)" in committed
