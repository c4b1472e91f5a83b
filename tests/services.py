"""Where the tests find the real services they use. The defaults are the machine's (and CI's);
the environment can point a second checkout at its own databases so two suites can run at once
without dropping each other's tables."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

MARIADB_URL = os.environ.get(
    "STAGECRAWL_TEST_MARIADB_URL", "mysql+pymysql://root@127.0.0.1:3306/test"
)
POSTGRES_URL = os.environ.get(
    "STAGECRAWL_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("STAGECRAWL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
# ../shared/ beside the repository (CI lays it there); a worktree elsewhere can point at it.
SHARED = Path(
    os.environ.get("STAGECRAWL_TEST_SHARED") or Path(__file__).resolve().parents[2] / "shared"
)


def shared_path(*parts: str) -> Path:
    """Where `../shared/fixtures/<parts>` is (present or not)."""
    return SHARED.joinpath("fixtures", *parts)


def absent_reason(path: Path) -> str:
    return (
        f"{path} is absent: real data from ../shared/fixtures/ is read where it lies, never "
        "copied into the project (lay ../shared beside the repository or set "
        "STAGECRAWL_TEST_SHARED)"
    )


def shared_fixture(*parts: str) -> Path:
    """The real data at `../shared/fixtures/<parts>`, for a test or fixture to read at run
    time; where it is absent the calling test is skipped, saying which path and why."""
    path = shared_path(*parts)
    if not path.exists():
        pytest.skip(absent_reason(path))
    return path


def needs_shared(*parts: str) -> pytest.MarkDecorator:
    """`shared_fixture` as a mark, for a test that reads the path itself."""
    path = shared_path(*parts)
    return pytest.mark.skipif(not path.exists(), reason=absent_reason(path))


def drop_stagecrawl_tables(url: str) -> None:
    """Drop every table stagecrawl declares (both registries, licenses, workers, seeds) from a
    server database, so a test starts from nothing. The names come from the schema itself, so a
    table added later is dropped too."""
    from sqlalchemy import create_engine, text

    from stagecrawl.registries import declare_tables
    from stagecrawl.storage.schema import Collations, build_metadata

    declare_tables()
    engine = create_engine(url)
    quote = engine.dialect.identifier_preparer.quote
    with engine.begin() as conn:
        for table in reversed(build_metadata(Collations(None)).sorted_tables):
            conn.execute(text(f"DROP TABLE IF EXISTS {quote(table.name)}"))
    engine.dispose()
