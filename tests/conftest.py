from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from stagecrawl.registries import declare_tables
from stagecrawl.testing.origin import TestOrigin
from tests.services import (
    MARIADB_URL,
    POSTGRES_URL,
    create_worker_databases,
    drop_stagecrawl_tables,
)

# Every registry's tables are declared, as every command declares them: a database a test
# opens holds them all.
declare_tables()
create_worker_databases()  # under pytest-xdist: this worker's own (none made otherwise)


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


@dataclass
class SilentServer:
    """A TCP port that accepts connections and never says a word: a stuck server, or another
    service that waits for the client to speak first (Redis, an HTTP server) where a MySQL
    client waits for the server's greeting."""

    port: int
    accepted: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def silent_server() -> Iterator[SilentServer]:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    silent = SilentServer(server.getsockname()[1])
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue
            silent.accepted.set()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield silent
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()
