"""Where the tests find the real services they use. The defaults are the machine's (and CI's);
the environment can point a second checkout at its own databases so two suites can run at once
without dropping each other's tables."""

from __future__ import annotations

import os
from pathlib import Path

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
