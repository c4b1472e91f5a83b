"""Kill -9 at a moment the test can prove: once the run has written some rows (seen in its
database, read-only, while it writes) and before it has written them all."""

from __future__ import annotations

import signal
import socket
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sqlalchemy import column, create_engine, select, table

HOST = socket.gethostname()  # the workers' HOST column (they run on this machine)


def sqlite_count(paths: Path | Iterable[Path], query: str) -> int:
    """The sum of `query` (a COUNT) over SQLite files, read-only; a file not there yet, or a
    table not made yet, counts 0."""
    total = 0
    for path in [paths] if isinstance(paths, Path) else paths:
        if not path.exists():
            continue
        try:
            conn = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True, timeout=5)
            try:
                total += int(conn.execute(query).fetchone()[0])
            finally:
                conn.close()
        except sqlite3.OperationalError:  # no such table yet
            continue
    return total


def kill_when(
    process: subprocess.Popen[Any],
    written: Callable[[], int],
    at_least: int,
    seconds: float = 120.0,
) -> None:
    """Poll `written` until it reaches `at_least` rows, then kill -9 the process and reap it.
    The run must still be going: a run that ended before is a failed test, not a kill."""
    deadline = time.monotonic() + seconds
    while written() < at_least:
        assert process.poll() is None, f"the run ended before {at_least} rows were written"
        assert time.monotonic() < deadline, f"fewer than {at_least} rows written in {seconds} s"
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before the kill"
    process.send_signal(signal.SIGKILL)
    assert process.wait(30) == -signal.SIGKILL


def running(url: str, processes: list[subprocess.Popen[str]]) -> bool:
    """Every one of `processes` has registered its worker row (each is past its start-up, in
    its run), told by its own pid: not a count of rows, which also holds a stopped or killed
    worker's row until it is cleaned up, or a row left by an earlier phase of the test."""
    engine = create_engine(url, connect_args={"connect_timeout": 2})
    try:
        with engine.connect() as conn:
            pid, host = column("PID"), column("HOST")
            query = select(pid).select_from(table("TB_STAGECRAWL_WORKER", pid, host))
            registered = {int(p) for p in conn.execute(query.where(host == HOST)).scalars()}
    except Exception:
        return False
    finally:
        engine.dispose()
    return {p.pid for p in processes} <= registered
