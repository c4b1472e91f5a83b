"""Database and Redis servers of a test's own, to stop and start again (outages).

The machine's shared MariaDB, PostgreSQL and Redis serve every other test and must never be
stopped: a fault test starts its own server on a free loopback port with a temporary data
directory, stops or kills it to cause the outage, starts it again on the same port and data,
and removes everything at the end. Each start and stop is bounded in time.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

START_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for_port(port: int, process: subprocess.Popen[bytes] | None, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"{what} exited with {process.returncode} on start") from None
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not listen on port {port}") from None
            time.sleep(0.1)


def _wait_closed(port: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        except OSError:
            return
        time.sleep(0.1)
    raise RuntimeError(f"port {port} still accepts connections")


class PrivateServer:
    """One server process on `port`; `stop()` ends it (an outage), `start()` brings it back."""

    url: str
    port: int

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def url_for(self, database: str) -> str:
        raise NotImplementedError


class PrivateRedis(PrivateServer):
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--daemonize", "no", "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        _wait_for_port(self.port, self.process, "redis-server")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        _wait_closed(self.port)


class PrivatePostgres(PrivateServer):
    """initdb into a temporary directory owned by the `postgres` user (PostgreSQL refuses to
    run as root); `pg_ctl stop -m immediate` is the outage (every connection dropped). With
    fsync off a commit is still written to the OS before it is acknowledged, so a stopped
    server keeps every acknowledged commit (only a machine crash would lose them)."""

    def __init__(self, directory: Path) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
        if not found:
            pytest.skip("PostgreSQL server binaries (pg_ctl, initdb) are not installed")
        self.bin = Path(found[-1]).parent
        self.directory = directory
        self.data = directory / "data"
        self.port = free_port()
        self.user = "postgres" if os.geteuid() == 0 else None
        if self.user is not None:
            shutil.chown(directory, self.user)
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                  "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8")  # fmt: skip
        self.url = self.url_for("postgres")

    def url_for(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str) -> None:
        subprocess.run(args, check=True, capture_output=True, timeout=START_TIMEOUT, user=self.user)

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1"
            " -c fsync=off -c shared_buffers=16MB -c max_connections=40"
        )
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options,
                  "-l", str(self.directory / "log"), "-w", "-t", "60", "start")  # fmt: skip
        _wait_for_port(self.port, None, "postgres")

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                      "-w", "-t", "60", "stop")  # fmt: skip
        _wait_closed(self.port)

    def create_database(self, name: str) -> str:
        self._psql(f"CREATE DATABASE {name}")
        return self.url_for(name)

    def _psql(self, sql: str) -> None:
        self._run(str(self.bin / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U",
                  "postgres", "-d", "postgres", "-c", sql)  # fmt: skip


class PrivateMariaDB(PrivateServer):
    """mariadb-install-db into a temporary directory, mariadbd on a free port; SIGKILL is the
    outage (a crash: every connection dropped). Commits are written to the OS at once (flushed
    to disk once a second: `innodb_flush_log_at_trx_commit=2`), so a killed server keeps every
    commit it acknowledged, as a durable server does (=0 would lose the last second's)."""

    def __init__(self, directory: Path) -> None:
        install, server = shutil.which("mariadb-install-db"), shutil.which("mariadbd")
        if install is None or server is None:
            pytest.skip("MariaDB server binaries (mariadb-install-db, mariadbd) are not installed")
        self.server = server
        self.directory = directory
        self.data = directory / "data"
        self.port = free_port()
        self.socket = directory / "mariadb.sock"
        self.process: subprocess.Popen[bytes] | None = None
        user = ["--user=root"] if os.geteuid() == 0 else []
        subprocess.run(
            [install, "--no-defaults", f"--datadir={self.data}", *user,
             "--auth-root-authentication-method=normal", "--skip-test-db"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        self.url = self.url_for("mysql")

    def url_for(self, database: str) -> str:
        return f"mysql+pymysql://root@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        user = ["--user=root"] if os.geteuid() == 0 else []
        self.process = subprocess.Popen(
            [self.server, "--no-defaults", f"--datadir={self.data}", f"--port={self.port}",
             f"--socket={self.socket}", "--bind-address=127.0.0.1", "--skip-log-bin",
             "--innodb-buffer-pool-size=32M", "--innodb-flush-log-at-trx-commit=2",
             "--skip-name-resolve", f"--pid-file={self.directory / 'pid'}",
             f"--log-error={self.directory / 'error.log'}", *user],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        _wait_for_port(self.port, self.process, "mariadbd")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)
        _wait_closed(self.port)

    def create_database(self, name: str) -> str:
        from sqlalchemy import create_engine, text

        engine = create_engine(self.url)
        with engine.begin() as conn:
            conn.execute(text(f"CREATE DATABASE {name}"))
        engine.dispose()
        return self.url_for(name)


@contextlib.contextmanager
def private_server(kind: str) -> Iterator[PrivateServer]:
    """A started private server of `kind` ("postgresql", "mariadb" or "redis"), removed at
    the end whatever happened."""
    if kind == "redis" and shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    directory = Path(tempfile.mkdtemp(prefix=f"stagecrawl-{kind}-"))
    os.chmod(directory, 0o755)
    server: PrivateServer | None = None
    try:
        if kind == "postgresql":
            server = PrivatePostgres(directory)
        elif kind == "mariadb":
            server = PrivateMariaDB(directory)
        else:
            server = PrivateRedis(directory)
        server.start()
        yield server
    finally:
        if server is not None:
            with contextlib.suppress(Exception):
                server.stop()
        shutil.rmtree(directory, ignore_errors=True)
