"""The persistent frontier: every request a crawl knows, how far it got, and its retry ladder.

SQLite (stdlib) in WAL mode, one file beside the output. A request is `pending`, `inflight`
(claimed by this run), `done`, `failed` (on the ladder: `attempts` so far and the last `error`)
or `gave_up` — the product's one retry ladder (`stagecrawl.queue.ladder.RetryLadder`: the
sixth failure gives up), counted in `attempts` beside the state. Completing a request and
inserting the requests it produced happen in one transaction, so a crash at any point leaves
each request either still to do or done with all its children recorded.

Opening the frontier starts a run: `inflight` rows from a dead run go back to `pending`, and
so do `failed` rows — the one "next try = next run" policy (a run never retries what failed
during it; `stagecrawl.queue.ThisRun` keeps it in memory for shared SQL queues, here the
`failed` state keeps it, one process per frontier). A lock file keeps a second process off
the same frontier.

`FrontierQueue` puts it behind the engine's work-loop contract (engine/work.py), together with
the sink the items go to; every call runs on one dedicated thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import queue
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

from stagecrawl.engine.filelock import exclusive
from stagecrawl.engine.request import Item, Request
from stagecrawl.errors import StorageError
from stagecrawl.pauses import NotAsked
from stagecrawl.queue.ladder import LADDER, RetryLadder

PENDING, INFLIGHT, DONE, FAILED, GAVE_UP = 0, 1, 2, 3, 4
STATE_NAMES = {
    PENDING: "pending",
    INFLIGHT: "in flight",
    DONE: "done",
    FAILED: "failed (retried next run)",
    GAVE_UP: "given up",
}
MAX_ATTEMPTS = LADDER.max_failures
# Keys per `UPDATE … WHERE key IN (…)`: well within SQLite's bound on parameters (32766).
KEYS_PER_UPDATE = 500
ROWS_PER_INSERT = 500  # new requests to an INSERT statement, parameters allowing
NO_META = "{}"  # the stored meta of most requests: neither encoded nor decoded

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
T = TypeVar("T")


@dataclass
class Completion:
    request: Request
    children: Sequence[Request]
    error: str | None = None
    waits: bool = False  # not attempted (a pause): back to pending, off the ladder


class Outcome(Protocol):
    """What `Frontier.complete` reads of one request's outcome: a Completion, or the
    crawler's CrawlResult as it is (no copy per request)."""

    @property
    def request(self) -> Request: ...

    @property
    def children(self) -> Sequence[Request]: ...

    @property
    def error(self) -> str | None: ...

    @property
    def waits(self) -> bool: ...


class Frontier:
    def __init__(self, path: Path | str | None = None, ladder: RetryLadder = LADDER) -> None:
        """`path=None` keeps the frontier in memory (no resume)."""
        self.path = Path(path) if path is not None else None
        self.retry = ladder
        self.max_attempts = ladder.max_failures
        self._lock = contextlib.ExitStack()
        if self.path is not None:
            self._lock.enter_context(
                exclusive(
                    self.path.with_name(self.path.name + ".lock"),
                    f"another stagecrawl process is using {self.path}; wait for it or stop it",
                )
            )
        try:
            self.db = sqlite3.connect(
                str(self.path) if self.path else ":memory:",
                isolation_level=None,
                check_same_thread=False,  # FrontierQueue serialises every call on one thread
            )
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(SCHEMA)
            columns = {row[1] for row in self.db.execute("PRAGMA table_info(requests)")}
            if "attempts" not in columns:  # a frontier written before the ladder existed
                self.db.execute(
                    "ALTER TABLE requests ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0"
                )
        except sqlite3.Error as exc:
            self._lock.close()
            raise StorageError(f"cannot open frontier {self.path}: {exc}") from exc
        # Rows to an INSERT: as many as its parameters allow (999 in SQLite before 3.32)
        variables = self.db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
        self._rows_per_insert = max(1, min(ROWS_PER_INSERT, variables // 6))
        self.resumed = self.db.execute(
            "UPDATE requests SET state = ? WHERE state = ?", (PENDING, INFLIGHT)
        ).rowcount
        self.retried = self.db.execute(
            "UPDATE requests SET state = ? WHERE state = ?", (PENDING, FAILED)
        ).rowcount

    def close(self) -> None:
        self.db.close()
        self._lock.close()

    @staticmethod
    def _row(request: Request) -> tuple[str, str, str, str, str | None, str | None]:
        return (
            request.key,
            request.url,
            request.callback,
            json.dumps(request.meta, sort_keys=True) if request.meta else NO_META,
            request.etag,
            request.last_modified,
        )

    def add(self, requests: Iterable[Request]) -> int:
        """Insert new requests; ones whose key is already known (in any state) are ignored."""
        rows = [self._row(r) for r in requests]
        with self._transaction():
            return self._insert(rows)

    def _insert(self, rows: Sequence[tuple[str | None, ...]]) -> int:
        """INSERT OR IGNORE `rows`, ROWS_PER_INSERT to a statement; returns how many were new.
        Not `executemany`: it gives up the GIL once a row, and a thread that must win it back
        from a busy event loop that often crawls (see `complete`)."""
        before = self.db.total_changes
        for start in range(0, len(rows), self._rows_per_insert):
            chunk = rows[start : start + self._rows_per_insert]
            self.db.execute(
                "INSERT OR IGNORE INTO requests (key, url, callback, meta, etag, last_modified)"
                f" VALUES {','.join(['(?, ?, ?, ?, ?, ?)'] * len(chunk))}",
                [value for row in chunk for value in row],
            )
        return self.db.total_changes - before

    def claim(self, limit: int) -> list[Request]:
        if limit <= 0:
            return []
        # One statement, so no BEGIN/COMMIT around it: a single statement is its own
        # transaction (see `complete` for why every call counts).
        rows = self.db.execute(
            "UPDATE requests SET state = ? WHERE seq IN (SELECT seq FROM requests"
            " WHERE state = ? ORDER BY seq LIMIT ?)"
            " RETURNING seq, key, url, callback, meta, etag, last_modified",
            (INFLIGHT, PENDING, limit),
        ).fetchall()
        rows.sort()
        return [
            Request(
                url=r[2],
                callback=r[3],
                meta={} if r[4] == NO_META else json.loads(r[4]),
                key=r[1],
                etag=r[5],
                last_modified=r[6],
            )
            for r in rows
        ]

    def complete(self, completions: Sequence[Outcome]) -> int:
        """Record outcomes and their child requests atomically; returns new children added.
        A failure climbs the ladder: `failed`, until the ladder gives it up: `gave_up`.

        Every SQLite call lets go of the GIL and must win it back from the event loop, which
        is busy while batches complete: each such hand-back waited up to the interpreter's
        switch interval (5 ms), and a batch of 256 took 15-60 ms instead of about one
        (bench/engine.py, c=64). So a statement with nothing to do is not run, and a batch of
        successes alone, one statement, runs without BEGIN/COMMIT around it."""
        children = [self._row(c) for done in completions for c in done.children]
        done = [c.request.key for c in completions if c.error is None]
        failed = [
            (c.error, c.request.key) for c in completions if c.error is not None and not c.waits
        ]
        waiting = [(c.error, c.request.key) for c in completions if c.waits]
        # One statement per chunk, not one per request: the batch is mostly successes.
        updates = []
        for start in range(0, len(done), KEYS_PER_UPDATE):
            keys = done[start : start + KEYS_PER_UPDATE]
            marks = ",".join("?" * len(keys))
            updates.append(
                (f"UPDATE requests SET state = {DONE}, error = NULL WHERE key IN ({marks})", keys)
            )
        if len(updates) == 1 and not children and not failed and not waiting:
            self.db.execute(*updates[0])
            return 0
        with self._transaction():
            added = 0
            if children:
                added = self._insert(children)
            for update in updates:
                self.db.execute(*update)
            if failed:
                self.db.executemany(
                    "UPDATE requests SET attempts = attempts + 1, error = ?,"
                    f" state = CASE WHEN attempts + 1 >= {self.max_attempts} THEN {GAVE_UP}"
                    f" ELSE {FAILED} END WHERE key = ?",
                    failed,
                )
            if waiting:
                self.db.executemany(
                    f"UPDATE requests SET state = {PENDING}, error = ? WHERE key = ?", waiting
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

    def pending(self) -> int:
        row = self.db.execute(
            "SELECT COUNT(*) FROM requests WHERE state = ?", (PENDING,)
        ).fetchone()
        return int(row[0])

    def ladder(self, limit: int = 10) -> list[tuple[str, int, int, str]]:
        """Failed and given-up requests: (url, state, attempts, last error), newest first."""
        return [
            (str(r[0]), int(r[1]), int(r[2]), str(r[3] or ""))
            for r in self.db.execute(
                "SELECT url, state, attempts, error FROM requests WHERE state IN (?, ?)"
                " ORDER BY seq DESC LIMIT ?",
                (FAILED, GAVE_UP, limit),
            )
        ]

    def _transaction(self) -> _Tx:
        return _Tx(self.db)


class _Tx:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")


class Sink(Protocol):
    def write(self, items: Sequence[Item]) -> None: ...

    def flush(self) -> None:
        """Make every item written so far durable."""

    def close(self) -> None: ...


@dataclass
class CrawlResult:
    """What one request produced: items for the sink, new requests, or the error."""

    request: Request
    items: list[Item]
    children: list[Request]
    error: str | None = None
    # Not attempted: a host's pause (or our budget) outlasts the run. The request goes back to
    # pending with `error` as its reason and climbs no ladder: no failure of its own.
    waits: bool = False


class FrontierQueue:
    """The frontier and its sink behind the work-loop contract: a batch of results becomes
    one sink write + flush, then one frontier transaction (items are durable before their
    request is marked done; sinks upsert by key, so a redone request writes the same item)."""

    # Committing a batch adds the children its requests found: claimable work (work.py).
    grows_on_complete = True

    def __init__(self, frontier: Frontier, sink: Sink, read_ahead: int = 512) -> None:
        self.frontier = frontier
        self.sink = sink
        self.items = 0
        self.duplicates = 0
        self.children_added = 0
        # Claims are taken from the frontier `read_ahead` at a time (marked in flight in one
        # transaction) and handed out from memory: one SQLite transaction per few hundred
        # requests instead of one per claim. What is read ahead but not handed out goes back
        # on `close`; after a kill, opening the frontier puts in-flight rows back anyway.
        self.read_ahead = read_ahead
        self._ready: collections.deque[Request] = collections.deque()
        self._thread = OneThread("frontier")
        # Start requests are still being added (beside the work loop): the crawl is not
        # finished when the frontier runs dry meanwhile.
        self.adding = False
        # A host's pause that outlasts the run: nothing more is claimed, the rest waits for
        # the next run (the pending requests, and what comes back marked `waits`).
        self.held = NotAsked()

    def hold(self, request: Request, until: datetime, reason: str) -> None:
        """`request` met a pause until `until`: claim nothing more in this run."""
        self.held.hold(request.key, until, reason)

    async def _call(self, function: Any, *args: Any) -> Any:
        return await self._thread.call(function, *args)

    async def add_from(self, requests: Iterator[Request], most: int) -> tuple[int, int]:
        """Take up to `most` requests from `requests` and add them: (taken, new). The
        requests are made here, on the event loop's thread, and written on the frontier's:
        made there, beside a busy loop, their Python work contended with it for the GIL
        (in one of two bench runs, 10-25 % more CPU a request)."""
        chunk = list(itertools.islice(requests, most))
        if not chunk:
            return 0, 0
        added: int = await self._call(self.frontier.add, chunk)
        self.duplicates += len(chunk) - added
        return len(chunk), added

    async def claim(self, limit: int) -> list[Request]:
        if self.held.until is not None:
            return []
        if len(self._ready) < limit:
            more: list[Request] = await self._call(
                self.frontier.claim, max(limit, self.read_ahead) - len(self._ready)
            )
            self._ready.extend(more)
        return [self._ready.popleft() for _ in range(min(limit, len(self._ready)))]

    async def complete(self, results: Sequence[CrawlResult]) -> None:
        await self._call(self._complete, results)

    def _complete(self, results: Sequence[CrawlResult]) -> None:
        items = [item for r in results for item in r.items]
        if items:
            self.sink.write(items)
            self.sink.flush()
        offered = sum(len(r.children) for r in results)
        added = self.frontier.complete(results)
        self.items += len(items)
        self.duplicates += offered - added
        self.children_added += added

    async def release(self, units: Sequence[Request]) -> None:
        await self._call(self.frontier.release, [u.key for u in units])

    async def pending(self) -> int:
        pending: int = await self._call(self.frontier.pending)
        return pending

    async def ladder(self, limit: int) -> list[tuple[str, int, int, str]]:
        ladder: list[tuple[str, int, int, str]] = await self._call(self.frontier.ladder, limit)
        return ladder

    async def is_empty(self) -> bool:
        return not self._ready and await self.pending() == 0

    async def is_finished(self) -> bool:
        if self.held.until is not None:
            return True  # nothing can be sent before then: the rest waits for the next run
        if self.adding:
            return False  # start requests are still being added beside the loop
        # One process per frontier (the lock file): what is not pending is done, on the
        # ladder for the next run, or ours in flight, which the loop accounts for.
        return await self.is_empty()

    async def counts(self) -> dict[int, int]:
        counts: dict[int, int] = await self._call(self.frontier.counts)
        return counts

    async def give_back_read_ahead(self) -> None:
        """Requests read ahead but never handed out go back to pending."""
        if self._ready:
            keys = [r.key for r in self._ready]
            self._ready.clear()
            await self._call(self.frontier.release, keys)

    def close(self) -> None:
        self._thread.shutdown()


class OneThread:
    """One thread that runs calls in the order they come (SQLite wants one writer), each
    awaited on the event loop. What `run_in_executor` on a one-thread pool does, for a
    fraction of its cost per call (no concurrent Future with its condition, no work item,
    no idle-semaphore check, no chained callbacks): the committer makes one call per batch
    and the claims one per read-ahead, hundreds a second at full speed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    async def call(self, function: Any, *args: Any) -> Any:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._jobs.put((loop, future, function, args))
        return await future

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, future, function, args = job
            if future.cancelled():  # as a pool would: a call cancelled before it ran never runs
                continue
            outcome: tuple[Any, BaseException | None]
            try:
                outcome = (function(*args), None)
            except BaseException as exc:  # handed to the caller, like the pool's work item
                outcome = (None, exc)
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody awaits it
                loop.call_soon_threadsafe(_settle, future, *outcome)

    def shutdown(self) -> None:
        """Run what is queued, then end the thread."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None


_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Any, tuple[Any, ...]]


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
