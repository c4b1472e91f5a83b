"""Where the tests find the real services they use. The defaults are the machine's (and CI's);
the environment can point a second checkout at its own databases so two suites can run at once
without dropping each other's tables."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

MARIADB_URL = os.environ.get(
    "STAGECRAWL_TEST_MARIADB_URL", "mysql+pymysql://root@127.0.0.1:3306/test"
)
POSTGRES_URL = os.environ.get(
    "STAGECRAWL_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("STAGECRAWL_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
# Under pytest-xdist (the README's test command runs two workers), each worker has its own
# databases (`test_gw1`) and Redis database (the next number): tests drop their tables and
# flush their keys, and must not do it under a neighbour's feet.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def _for_worker(url: str) -> str:
    if not WORKER:
        return url
    parsed = make_url(url)
    return parsed.set(database=f"{parsed.database}_{WORKER}").render_as_string(hide_password=False)


def _redis_for_worker(url: str) -> str:
    base, _, number = url.rpartition("/")
    if not WORKER or not number.isdigit():
        return url
    return f"{base}/{(int(number) + 1 + int(WORKER.removeprefix('gw'))) % 16}"


SERVER_URLS = {"mariadb": MARIADB_URL, "postgresql": POSTGRES_URL}  # where workers' are made
MARIADB_URL, POSTGRES_URL = _for_worker(MARIADB_URL), _for_worker(POSTGRES_URL)
REDIS_URL = _redis_for_worker(REDIS_URL)
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


def create_worker_databases() -> None:
    """This worker's MariaDB and PostgreSQL databases, made on their servers when absent (a
    server that is down is left for the tests that need it to say so)."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import SQLAlchemyError

    for kind, url in (("mariadb", MARIADB_URL), ("postgresql", POSTGRES_URL)):
        if url == SERVER_URLS[kind]:
            continue
        name = make_url(url).database
        # the server itself, not the base database (which need not exist for the workers')
        base = make_url(SERVER_URLS[kind])
        server = base._replace(database=None if kind == "mariadb" else "postgres")
        engine = create_engine(server, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                if kind == "mariadb":
                    conn.execute(text(f"CREATE DATABASE IF NOT EXISTS `{name}`"))
                elif not conn.execute(
                    text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}
                ).first():
                    conn.execute(text(f'CREATE DATABASE "{name}"'))
        except SQLAlchemyError:
            pass
        finally:
            engine.dispose()
