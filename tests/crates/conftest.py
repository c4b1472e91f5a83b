from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from stagecrawl.settings import Settings
from stagecrawl.testing.origin import TestOrigin
from tests.crates.registry import build_registry
from tests.services import MARIADB_URL, POSTGRES_URL

TABLES = (
    "TB_COMP_LIB_RUST_LIST",
    "TB_COMP_LIB_VERSION_RUST",
    "TB_COMP_LIB_PRODUCT_RUST",
    "TB_LICENSE_V2",
    "TB_COMP_LIB_VULN_CARGO_V1",
    "TB_COMP_LIB_VULN_CARGO_RAW",
    "TB_COMP_LIB_VULN_CARGO_HIT",
    "TB_COMP_LIB_RUST_INDEX_STATE",
    "TB_STAGECRAWL_WORKER",
    "TB_STAGECRAWL_SEED",
)


def _drop_tables(url: str) -> None:
    engine = create_engine(url)
    quote = "`" if url.startswith("mysql") else '"'
    with engine.begin() as conn:
        for table in TABLES:
            conn.execute(text(f"DROP TABLE IF EXISTS {quote}{table}{quote}"))
    engine.dispose()


@pytest.fixture(params=["sqlite", "mariadb", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The same tests on every backend, for real (`.ci/run` starts MariaDB and PostgreSQL)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'stagecrawl.db'}"
        return
    url = MARIADB_URL if request.param == "mariadb" else POSTGRES_URL
    _drop_tables(url)
    yield url
    _drop_tables(url)


@dataclass
class Registry:
    index: TestOrigin
    api: TestOrigin

    def settings(self, **overrides: float) -> Settings:
        """The run's settings against this registry (fast rates, one retry), as a command
        would resolve them from its flags, with no environment."""
        flags = {
            "index_url": self.index.url + "/",
            "api_url": self.api.url + "/",
            "api_rate": 200.0,
            "index_rate": 500.0,
            **overrides,
        }
        return Settings.resolve(flags, {"STAGECRAWL_RETRIES": "1"})


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    index_root, api_root = build_registry(tmp_path / "registry")
    index = TestOrigin(index_root).start()
    api = TestOrigin(api_root).start()
    yield Registry(index, api)
    index.stop()
    api.stop()
