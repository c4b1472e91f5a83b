"""The WAL merge as a process exits: a database its phase let go is merged too, and a Ctrl-C
that lands in the merge ends the process without a traceback (the log stays, which is safe)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

WRITE_AND_LET_GO = """
import atexit, shutil, sqlite3, sys
# registered first, so it runs last: the file as the exit leaves it, before the interpreter's
# teardown closes what is still open (a last close would merge the log by itself)
atexit.register(lambda: shutil.copyfile("{path}", "{path}.alone"))
from stagecrawl.storage.db import Database
db = Database("sqlite:///{path}")
with db.engine.begin() as conn:
    conn.exec_driver_sql("CREATE TABLE T (X INTEGER)")
    conn.exec_driver_sql("INSERT INTO T VALUES (1)")
keep = sqlite3.connect("{path}")  # open to the end, as a let-go engine's connection can be
del db, conn  # let go, as a phase's database is once the phase returns
if {interrupt}:
    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt  # the Ctrl-C, as it lands inside the merge
    sqlite3.connect = interrupted
sys.exit(130 if {interrupt} else 0)
"""


def run(path: Path, interrupt: bool) -> subprocess.CompletedProcess[str]:
    program = WRITE_AND_LET_GO.format(path=path, interrupt=interrupt)
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)


def test_a_database_let_go_before_the_exit_is_merged_into_its_file(tmp_path: Path) -> None:
    path = tmp_path / "let-go.db"
    done = run(path, interrupt=False)
    assert done.returncode == 0, done.stderr
    alone = sqlite3.connect(f"{path}.alone")  # the file without its -wal: a backup's copy
    assert alone.execute("SELECT X FROM T").fetchall() == [(1,)]
    alone.close()


def test_a_ctrl_c_during_the_exit_merge_is_no_traceback(tmp_path: Path) -> None:
    done = run(tmp_path / "interrupted.db", interrupt=True)
    assert done.returncode == 130
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr
