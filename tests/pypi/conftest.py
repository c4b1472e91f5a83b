from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from stagecrawl.testing.pypi_origin import PyPIOrigin
from tests.services import MARIADB_URL, POSTGRES_URL, SHARED

PYPI_SHARED = SHARED / "fixtures" / "pypi"
CONTACT_UA = "stagecrawl-tests/1 (+tests@example.org)"


@pytest.fixture
def pypi() -> Iterator[PyPIOrigin]:
    server = PyPIOrigin().load_fixtures().start()
    yield server
    server.stop()


PYPI_TABLES = (
    "TB_COMP_LIB_PYPI_LIST",
    "TB_COMP_LIB_VERSION_PYPI",
    "TB_COMP_LIB_PRODUCT_PYPI",
    "TB_STAGECRAWL_SEED_PYPI",
    "TB_COMP_LIB_VULN_PYPI_V1",
    "TB_COMP_LIB_VULN_PYPI_RAW",
    "TB_COMP_LIB_VULN_PYPI_HIT",
    "TB_STAGECRAWL_WORKER",
)


def drop_pypi_tables(url: str) -> None:
    engine = create_engine(url)
    quote = "`" if url.startswith("mysql") else '"'
    with engine.begin() as conn:
        for table in PYPI_TABLES:
            conn.execute(text(f"DROP TABLE IF EXISTS {quote}{table}{quote}"))
    engine.dispose()


@pytest.fixture(params=["sqlite", "mariadb", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The same PyPI tests on every backend, for real."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'pypi.db'}"
        return
    url = MARIADB_URL if request.param == "mariadb" else POSTGRES_URL
    drop_pypi_tables(url)
    yield url
    drop_pypi_tables(url)
