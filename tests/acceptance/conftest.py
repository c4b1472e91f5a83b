from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from stagecrawl.demo.registry import CRATES, build_mirror
from stagecrawl.storage.db import Database
from stagecrawl.testing.origin import TestOrigin
from tests.cli import cli_env, spawn, stagecrawl

__all__ = ["Mirror", "cli_env", "dump", "spawn", "stagecrawl"]
NAMES = sorted(CRATES)
VOLATILE = {"TIMESTAMP", "LAST_UPDATED", "CLAIMED_BY", "CLAIMED_UNTIL", "CHECKED_AT"}


@dataclass
class Mirror:
    index: TestOrigin
    api: TestOrigin
    root: Path

    def urls(self) -> list[str]:
        return ["--index-url", self.index.url + "/", "--api-url", self.api.url + "/"]


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[Mirror]:
    root = tmp_path / "mirror"
    build_mirror(root)
    index = TestOrigin(root / "index").start()
    api = TestOrigin(root / "api").start()
    yield Mirror(index, api, root)
    index.stop()
    api.stop()


def dump(url: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of the crates tables, minus the columns that only say when."""
    db = Database(url)
    result = {}
    for table in (db.list, db.version, db.product):
        with db.engine.connect() as conn:
            rows = conn.execute(select(table).order_by(*table.primary_key.columns)).all()
        result[table.name] = [
            {k: v for k, v in r._mapping.items() if k not in VOLATILE} for r in rows
        ]
    db.dispose()
    return result
