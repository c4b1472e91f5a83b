"""`python -m stagecrawl.ddl > sql/mysql.sql`: the MySQL DDL of every registry's tables."""

from __future__ import annotations

from stagecrawl.registries import declare_tables
from stagecrawl.storage.ddl import mysql_ddl

if __name__ == "__main__":
    declare_tables()
    print(mysql_ddl(), end="")
