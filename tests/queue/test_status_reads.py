"""The owners' status reads (queue/reads.py, storage/reads.py): one portable SQL text each,
run through SQLAlchemy on every backend and through the standard library's sqlite3 on a
SQLite file, give the answers the rows call for; and `stagecrawl status` shows the same
whichever path read it, masks secrets, and creates nothing."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from stagecrawl.pauses import Waiting
from stagecrawl.queue import Workers, waiting_on
from stagecrawl.queue.lists import PENDING
from stagecrawl.queue.reads import WorkerReads, registry_reads
from stagecrawl.registries import DECLARATIONS
from stagecrawl.storage.db import Database
from stagecrawl.storage.reads import ReadSource, SqliteFile, sqlite_file
from tests.cli import stagecrawl
from tests.crates.kernel import event_list, seed_queue
from tests.queue.status_rows import fill_for_status
from tests.services import MARIADB_URL, POSTGRES_URL, drop_stagecrawl_tables

BACKENDS = ["sqlite", "mariadb", "postgresql"]


@pytest.fixture(params=BACKENDS)
def filled(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, datetime]]:
    url = {
        "sqlite": f"sqlite:///{tmp_path / 'status.db'}",
        "mariadb": MARIADB_URL,
        "postgresql": POSTGRES_URL,
    }[request.param]
    if request.param != "sqlite":
        drop_stagecrawl_tables(url)
    yield url, fill_for_status(url)
    if request.param != "sqlite":
        drop_stagecrawl_tables(url)


def answers(source: ReadSource, code: str) -> dict[str, Any]:
    """Every status read of one registry's tables and the worker table, as plain values."""
    tables = registry_reads(next(d.names for d in DECLARATIONS if d.code == code))
    events, seeds, workers = tables.events.queue, tables.seeds, WorkerReads()
    with source.reads() as r:
        return {
            "by_state": events.by_state(r),
            "sources": tables.events.sources(r),
            "requeue": events.count(r, requeue=True),
            "ladder": events.on_ladder(r, 20),
            "short ladder": events.on_ladder(r, 2),
            "seed ladder": seeds.on_ladder(r, 50),
            "seeds pending": seeds.count(r, PENDING),
            "versions": tables.versions.count(r),
            "products": tables.products.count(r),
            "leases": events.leases(r),
            "holders": [
                (h.worker, h.rows, h.since, h.heartbeat, h.dead_at)
                for h in workers.holders(r, events)
            ],
            "holders but alpha": events.holders(r, {"alpha"}),
            "waiting": events.waiting(r),
            "seeds waiting": seeds.waiting(r),
            "live": [tuple(w) for w in workers.live(r)],
        }


def expected(now: datetime) -> dict[str, Any]:
    def at(seconds: float) -> datetime:
        return now + timedelta(seconds=seconds)

    ladder = [
        ("beta", 30, "HTTP 503 from https://crawler:S3cr3tPw@mirror.example/x"),
        ("gamma", 39, "gave up: timeout"),
        ("zeta", 30, "our budget is spent"),
    ]
    return {
        "by_state": [(0, 8), (1, 4), (30, 4), (39, 2)],
        "sources": {"lock": 4, "lock,seed": 2, "seed": 12},
        "requeue": 2,
        "ladder": ladder,
        "short ladder": ladder[:2],
        "seed ladder": [
            ("S2", 31, "fetch https://crawler:S3cr3tPw@mirror.example/x failed"),
            ("S4", 39, "gave up"),
        ],
        "seeds pending": 2,
        "versions": 3,
        "products": 1,
        # theta's lease ran out: not counted
        "leases": {"w1": 4, "w2": 2, "ghost": 2},
        # oldest claim first (no claim time first); a dead worker's bound is its STALE_AFTER
        # and the stored resolution (1 s) past its heartbeat; a holder without a row: None
        "holders": [
            ("ghost", 2, None, None, None),
            ("w2", 2, at(-1200), at(-600), at(-600 + 15 + 1)),
            ("w1", 4, at(-90), now, at(30 + 1)),
        ],
        "holders but alpha": sorted([("w1", 2, at(-90)), ("w2", 2, at(-1200)), ("ghost", 2, None)]),
        "waiting": Waiting(4, at(1800), "our budget is spent"),
        "seeds waiting": Waiting(1, at(7200), "paused by host"),
        "live": [("w0", at(-660), at(-5), 5, 9, False), ("w1", at(-600), now, 120, 300, True)],
    }


def test_status_reads_answer_alike_on_every_backend_and_both_paths(
    filled: tuple[str, datetime],
) -> None:
    url, now = filled
    db = Database(url, read_only=True)
    sources: list[ReadSource] = [db]
    path = sqlite_file(url)
    if path is not None:
        sources.append(SqliteFile(url, path))  # the standard library's path
    want = expected(now)
    for source in sources:
        for code in (d.code for d in DECLARATIONS):
            got = answers(source, code)
            got["holders but alpha"] = sorted(got["holders but alpha"], key=str)
            want["holders but alpha"] = sorted(want["holders but alpha"], key=str)
            assert got == want, (type(source).__name__, code)
    db.dispose()


def test_the_run_paths_read_leases_and_dead_workers_through_the_same_texts(
    filled: tuple[str, datetime],
) -> None:
    """What a run reads with them: a lost worker's row (`Workers.dead`: judged from its own
    bound), leases now, and what waits on a registry's queues together."""
    url, now = filled
    db = Database(url)
    with db.reading() as conn:
        dead = Workers(db).dead(conn, now)
    assert dead == [("w2", now - timedelta(seconds=600))]
    assert event_list(db).queue.leases_now() == {"w1": 4, "w2": 2, "ghost": 2}
    assert waiting_on([seed_queue(db), event_list(db).queue]) == Waiting(
        5, now + timedelta(seconds=7200), "paused by host"
    )
    db.dispose()


def _same(text: str) -> str:
    """Status output with what moves with the clock (seconds since a heartbeat) and the
    database's URL (its spelling differs between the two paths) taken out."""
    text = re.sub(r'"heartbeat_seconds_ago": \d+', '"heartbeat_seconds_ago": N', text)
    text = re.sub(r"\d+ s ago", "N s ago", text)
    return re.sub(r"sqlite(\+pysqlite)?:///\S+?\.db", "DB", text)


def test_status_on_sqlite_shows_what_the_sqlalchemy_path_shows(tmp_path: Path) -> None:
    """`sqlite:///…` is read with sqlite3, `sqlite+pysqlite:///…` (the same file) through
    SQLAlchemy: the same JSON and tables, secrets masked, the file unchanged (SQLite itself
    may open a WAL database's -wal and -shm files beside it, on either path)."""
    path = tmp_path / "status.db"
    fill_for_status(f"sqlite:///{path}")
    before = path.read_bytes()
    shown = {}
    for url in (f"sqlite:///{path}", f"sqlite+pysqlite:///{path}"):
        for fmt in ("json", "table"):
            done = stagecrawl("status", "--db", url, "--format", fmt)
            assert done.returncode == 0, done.stderr
            assert "S3cr3tPw" not in done.stdout + done.stderr
            shown[(url.split(":")[0], fmt)] = _same(done.stdout)
    assert shown[("sqlite", "json")] == shown[("sqlite+pysqlite", "json")]
    assert shown[("sqlite", "table")] == shown[("sqlite+pysqlite", "table")]
    document = json.loads(shown[("sqlite", "json")].replace(": N", ": 0"))
    assert [w["worker"] for w in document["crates"]["lease_holders"]] == ["ghost", "w2", "w1"]
    assert document["pypi"]["waiting"]["items"] == 5
    assert path.read_bytes() == before
    assert {p.name for p in tmp_path.iterdir()} <= {
        path.name,
        f"{path.name}-wal",
        f"{path.name}-shm",
    }


def test_status_on_a_database_an_older_stagecrawl_made_names_the_upgrade(tmp_path: Path) -> None:
    """A LIST without a column the reads name: the sqlite3 path hands over to `Database`,
    which says what brings it up to date (as every command does), and changes nothing."""
    path = tmp_path / "old.db"
    fill_for_status(f"sqlite:///{path}")
    with sqlite3.connect(path) as conn:
        conn.execute('ALTER TABLE "TB_COMP_LIB_RUST_LIST" DROP COLUMN "CLAIMED_AT"')
    done = stagecrawl("status", "--db", f"sqlite:///{path}")
    assert done.returncode == 2
    assert "TB_COMP_LIB_RUST_LIST" in done.stderr and "older stagecrawl" in done.stderr
    with sqlite3.connect(path) as conn:
        columns = [row[1] for row in conn.execute('PRAGMA table_info("TB_COMP_LIB_RUST_LIST")')]
    assert "CLAIMED_AT" not in columns


def test_status_on_a_file_that_is_not_stagecrawls_creates_no_table(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    done = stagecrawl("status", "--db", f"sqlite:///{path}")
    assert done.returncode == 2
    assert "no stagecrawl tables" in done.stderr
    with sqlite3.connect(path) as conn:
        assert [n for (n,) in conn.execute("SELECT name FROM sqlite_master")] == ["notes"]


@pytest.mark.parametrize("folder", ["a#b", "c?d", "100%25"])
@pytest.mark.parametrize("scheme", ["sqlite", "sqlite+pysqlite"])
def test_status_reads_a_database_in_a_folder_whose_name_has_uri_characters(
    tmp_path: Path, folder: str, scheme: str
) -> None:
    """A read-only SQLite file is opened by a `file:` URI: a `#`, `?` or `%` in the path (here
    a folder's name, the URL relative to it) must not cut the URI short, which opened another
    file read and write, created it, and read no stagecrawl tables there."""
    made = tmp_path / "status.db"  # made here: the URL of its final place is not plain
    fill_for_status(f"sqlite:///{made}")
    where = tmp_path / folder
    where.mkdir()
    made.rename(where / made.name)
    done = stagecrawl("status", "--db", f"{scheme}:///status.db", "--format", "json", cwd=where)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["crates"]["versions"] > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder]  # nothing made beside it
