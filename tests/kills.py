"""Kill -9 at a moment the test can prove: once the run has written some rows (seen in its
database, read-only, while it writes) and before it has written them all."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


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
