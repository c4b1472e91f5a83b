"""Reads on SQLite never take the write lock; writes still take it up front."""

from __future__ import annotations

import sqlite3
import subprocess
import threading
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from stagecrawl.storage.db import Database
from stagecrawl.storage.reads import immutable
from tests.crates.kernel import existing_versions, rust


def _hold_write_lock(path: Path) -> sqlite3.Connection:
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    other.execute(
        "INSERT INTO TB_STAGECRAWL_SEED (CRATE_NAME, NAME, STATE, RESYNC, LAST_UPDATED)"
        " VALUES ('held', 'held', 0, 0, '2024-01-01 00:00:00')"
    )
    return other


def test_a_read_proceeds_while_another_connection_holds_the_write_lock(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    db = Database(f"sqlite:///{path}")
    other = _hold_write_lock(path)
    seen: list[object] = []

    def read() -> None:
        with db.reading() as conn:
            seen.append(conn.execute(select(func.count()).select_from(rust(db).seed)).scalar_one())
        seen.append(existing_versions(db, ["serde"]))

    # Taking the lock would wait out busy_timeout (30 s); the read must not wait at all.
    reader = threading.Thread(target=read)
    reader.start()
    reader.join(timeout=10)
    try:
        assert not reader.is_alive(), "the read waited for the write lock"
        assert seen == [0, {"serde": set()}]  # the writer's uncommitted row is not visible
    finally:
        other.rollback()
        other.close()
        reader.join()
        db.dispose()


def test_a_write_on_a_reading_connection_fails_at_once_and_writers_still_write(
    tmp_path: Path,
) -> None:
    db = Database(f"sqlite:///{tmp_path / 'db.sqlite'}")
    row = {"CRATE_NAME": "a", "NAME": "a", "STATE": 0, "RESYNC": False}
    with pytest.raises(OperationalError, match="readonly"), db.reading() as conn:
        conn.execute(rust(db).seed.insert().values(**row, LAST_UPDATED=func.current_timestamp()))
    # The same pooled connection, now writing: the query-only flag followed the role.
    with db.engine.begin() as conn:
        conn.execute(rust(db).seed.insert().values(**row, LAST_UPDATED=func.current_timestamp()))
    with db.reading() as conn:
        assert conn.execute(select(func.count()).select_from(rust(db).seed)).scalar_one() == 1
    db.dispose()


def test_read_only_database_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    Database(f"sqlite:///{path}").dispose()
    db = Database(f"sqlite:///{path}", read_only=True)
    with db.reading() as conn:
        assert conn.execute(select(func.count()).select_from(rust(db).list)).scalar_one() == 0
    with db.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(rust(db).list)).scalar_one() == 0
    db.dispose()


def test_a_read_only_mount_is_read_with_its_locks_where_it_can_be(tmp_path: Path) -> None:
    """Immutable mode (no locks, no WAL index) only where a plain read-only open fails: a
    read-only mount may be a view of a volume written elsewhere, whose index is there."""
    from tests.acceptance.test_bad_input import tmpfs

    made = tmp_path / "made.db"
    Database(f"sqlite:///{made}").dispose()  # merged into the file on close
    writer = sqlite3.connect(made)  # a writer elsewhere: its -wal and -shm exist
    writer.execute("PRAGMA journal_mode=WAL")
    writer.execute("SELECT count(*) FROM sqlite_master").fetchone()
    with tmpfs(tmp_path / "ro", "size=4m") as folder:
        for name in ("alone.db", "beside.db"):
            (folder / name).write_bytes(made.read_bytes())
        for suffix in ("-wal", "-shm"):
            (folder / f"beside.db{suffix}").write_bytes(Path(f"{made}{suffix}").read_bytes())
        remounted = subprocess.run(["mount", "-o", "remount,ro", str(folder)], capture_output=True)
        assert remounted.returncode == 0, remounted.stderr
        assert immutable(folder / "alone.db")  # no index, none can be made: immutable
        assert not immutable(folder / "beside.db")  # its index is there: read with locks
        assert not immutable(made)  # not a read-only mount
    writer.close()
