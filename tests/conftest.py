from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stagecrawl.testing.origin import TestOrigin
from tests.services import MARIADB_URL, POSTGRES_URL, drop_stagecrawl_tables


@pytest.fixture
def origin() -> Iterator[TestOrigin]:
    server = TestOrigin().start()
    yield server
    server.stop()


@pytest.fixture
def other_origin() -> Iterator[TestOrigin]:
    server = TestOrigin().start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "mariadb", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The same test on every backend, for real (`.ci/run` starts MariaDB and PostgreSQL); a
    server database starts and ends without stagecrawl's tables."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'stagecrawl.db'}"
        return
    url = MARIADB_URL if request.param == "mariadb" else POSTGRES_URL
    drop_stagecrawl_tables(url)
    yield url
    drop_stagecrawl_tables(url)
