"""`sqlite_memory_mb` bounds what SQLite holds in the process, whatever the number of
connections and the size of the database: each connection's page cache filled as a crawl's
database grew (one connection a thread), and its peak RSS grew with its length. Measured by
SQLite's own count (sqlite3_memory_highwater) in a fresh process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PROBE = """
import contextlib, ctypes, sys, _sqlite3
from stagecrawl.storage.db import Database

db = Database(f"sqlite:///{sys.argv[1]}", sqlite_memory_mb=float(sys.argv[2]))
with db.engine.begin() as conn:
    conn.exec_driver_sql("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)")
    rows = [(n, bytes(400)) for n in range(25_000)]  # ~11 MB
    conn.exec_driver_sql("INSERT INTO t (k, v) VALUES (?, ?)", rows)
with contextlib.ExitStack() as stack:  # four connections at once, each reading every page
    for _ in range(4):
        stack.enter_context(db.reading()).exec_driver_sql("SELECT sum(length(v)) FROM t").all()
lib = ctypes.CDLL(_sqlite3.__file__)
lib.sqlite3_memory_highwater.restype = ctypes.c_int64
lib.sqlite3_memory_highwater.argtypes = [ctypes.c_int]
print(lib.sqlite3_memory_highwater(0))
"""


def highwater_mb(tmp_path: Path, setting: str) -> float:
    path = tmp_path / f"m{setting}.db"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(path), setting], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout) / 2**20


def test_sqlites_memory_stays_within_the_setting_across_connections(tmp_path: Path) -> None:
    unbounded = highwater_mb(tmp_path, "0")  # ~11 MB of data, 2 MB of cache a connection
    bounded = highwater_mb(tmp_path, "2")
    assert unbounded > 6
    assert bounded < 3.5  # soft: a page cache reuses pages past it (statements still grow)
