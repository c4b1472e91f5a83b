from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from stagecrawl.demo.registry import build_mirror
from stagecrawl.storage.db import Database
from stagecrawl.testing.origin import TestOrigin
from tests.acceptance.registry import CRATES
from tests.cli import cli_env, spawn, stagecrawl
from tests.crates.kernel import rust

__all__ = ["Mirror", "cli_env", "dump", "redis_server", "spawn", "stagecrawl"]
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
    build_mirror(root, CRATES)
    index = TestOrigin(root / "index").start()
    api = TestOrigin(root / "api").start()
    yield Mirror(index, api, root)
    index.stop()
    api.stop()


def dump(url: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of the crates tables, minus the columns that only say when."""
    db = Database(url)
    result = {}
    for table in (rust(db).list, rust(db).version, rust(db).product):
        with db.engine.connect() as conn:
            rows = conn.execute(select(table).order_by(*table.primary_key.columns)).all()
        result[table.name] = [
            {k: v for k, v in r._mapping.items() if k not in VOLATILE} for r in rows
        ]
    db.dispose()
    return result


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def redis_server(*options: str) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """A real redis-server of the test's own on a free loopback port (to lose mid-run, or to
    require a password), stopped at the end."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--daemonize", "no", *options],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError(f"redis-server did not start on port {port}") from None
                time.sleep(0.05)
        yield port, server
    finally:
        server.kill()
        server.wait()
