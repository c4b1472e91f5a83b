"""The persistent frontier: every request the crawl knows, and how far it got.

SQLite (stdlib) in WAL mode, one file beside the output. A request is `pending`, `inflight`
(claimed by this run), `done` or `failed`. Completing a request and inserting the requests it
produced happen in one transaction, so a crash at any point leaves each request either still to
do or done with all its children recorded. On open, `inflight` rows from a dead run go back to
`pending`. A lock file keeps a second process off the same frontier.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from stagecrawl.engine.request import Request
from stagecrawl.errors import StorageError

PENDING, INFLIGHT, DONE, FAILED = 0, 1, 2, 3

SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    url TEXT NOT NULL,
    callback TEXT NOT NULL,
    meta TEXT NOT NULL,
    etag TEXT,
    last_modified TEXT,
    state INTEGER NOT NULL DEFAULT 0,
    error TEXT
);
CREATE INDEX IF NOT EXISTS ix_requests_state ON requests (state, seq);
"""


@dataclass
class Completion:
    request: Request
    children: Sequence[Request]
    error: str | None = None


class Frontier:
    def __init__(self, path: Path | str | None = None) -> None:
        """`path=None` keeps the frontier in memory (no resume)."""
        self.path = Path(path) if path is not None else None
        self._lock_handle: IO[str] | None = None
        if self.path is not None:
            self._take_lock()
        try:
            self.db = sqlite3.connect(
                str(self.path) if self.path else ":memory:", isolation_level=None
            )
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(SCHEMA)
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open frontier {self.path}: {exc}") from exc
        self.resumed = self.db.execute(
            "UPDATE requests SET state = ? WHERE state = ?", (PENDING, INFLIGHT)
        ).rowcount

    def _take_lock(self) -> None:
        assert self.path is not None
        lock_path = self.path.with_name(self.path.name + ".lock")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle = open(lock_path, "w")  # noqa: SIM115 - held for the frontier's lifetime
        except OSError as exc:
            raise StorageError(f"cannot create {lock_path}: {exc.strerror}") from exc
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise StorageError(
                f"another stagecrawl process is using {self.path}; wait for it or stop it"
            ) from None
        handle.write(str(os.getpid()))
        handle.flush()
        self._lock_handle = handle

    def close(self) -> None:
        self.db.close()
        if self._lock_handle is not None:
            self._lock_handle.close()
            self._lock_handle = None

    @staticmethod
    def _row(request: Request) -> tuple[str, str, str, str, str | None, str | None]:
        return (
            request.key,
            request.url,
            request.callback,
            json.dumps(request.meta, sort_keys=True),
            request.etag,
            request.last_modified,
        )

    def add(self, requests: Iterable[Request]) -> int:
        """Insert new requests; ones whose key is already known (in any state) are ignored."""
        rows = [self._row(r) for r in requests]
        with self._transaction():
            before = self.db.total_changes
            self.db.executemany(
                "INSERT OR IGNORE INTO requests (key, url, callback, meta, etag, last_modified)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )
            return self.db.total_changes - before

    def claim(self, limit: int) -> list[Request]:
        if limit <= 0:
            return []
        with self._transaction():
            rows = self.db.execute(
                "SELECT seq, key, url, callback, meta, etag, last_modified FROM requests"
                " WHERE state = ? ORDER BY seq LIMIT ?",
                (PENDING, limit),
            ).fetchall()
            self.db.executemany(
                "UPDATE requests SET state = ? WHERE seq = ?", [(INFLIGHT, r[0]) for r in rows]
            )
        return [
            Request(
                url=r[2],
                callback=r[3],
                meta=json.loads(r[4]),
                key=r[1],
                etag=r[5],
                last_modified=r[6],
            )
            for r in rows
        ]

    def complete(self, completions: Sequence[Completion]) -> int:
        """Record outcomes and their child requests atomically; returns new children added."""
        with self._transaction():
            before = self.db.total_changes
            children = [self._row(c) for done in completions for c in done.children]
            self.db.executemany(
                "INSERT OR IGNORE INTO requests (key, url, callback, meta, etag, last_modified)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                children,
            )
            added = self.db.total_changes - before
            self.db.executemany(
                "UPDATE requests SET state = ?, error = ? WHERE key = ?",
                [(FAILED if c.error else DONE, c.error, c.request.key) for c in completions],
            )
        return added

    def release(self, keys: Iterable[str]) -> None:
        """Hand claimed requests back (shutdown before they were processed)."""
        with self._transaction():
            self.db.executemany(
                "UPDATE requests SET state = ? WHERE key = ? AND state = ?",
                [(PENDING, k, INFLIGHT) for k in keys],
            )

    def counts(self) -> dict[int, int]:
        return dict(self.db.execute("SELECT state, COUNT(*) FROM requests GROUP BY state"))

    def _transaction(self) -> _Tx:
        return _Tx(self.db)


class _Tx:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")
