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

A frontier opened with `keep_items` also lists, for every done request, the items it gave
(`items`: request, store, key), so a crawl can check at its start that its stores still hold
what the frontier counts as done (`lacking`) and fetch again what they lost (`redo`). A crawl
whose every request is a start request can hand the frontier its whole wish list at once
(`offer_all`): unfinished requests then follow the URLs of this run, not of the run that queued
them, and those it no longer wants are forgotten. `read_only=True` opens the file to look,
for a caller that holds the lock of its folder (no lock file, nothing written or made; on
read-only media too).

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
ITEMS_SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    request TEXT NOT NULL,
    store TEXT NOT NULL,
    key TEXT NOT NULL,
    PRIMARY KEY (request, store, key)
) WITHOUT ROWID;
"""
# PRAGMA user_version: 1 = every done request's items are listed (the frontier kept them from
# its first request on); 0 = a frontier written before, or without `keep_items` since.
ITEMS_LISTED = 1
T = TypeVar("T")


@dataclass
class Completion:
    request: Request
    children: Sequence[Request]
    error: str | None = None
    waits: bool = False  # not attempted (a pause): back to pending, off the ladder
    items: Sequence[Item] = ()


@dataclass(frozen=True)
class Offered:
    """What `offer_all` did: requests new to the frontier, unfinished ones whose URL changed
    to this run's, and unfinished ones no longer wanted (forgotten)."""

    added: int = 0
    retargeted: int = 0
    forgotten: int = 0


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

    @property
    def items(self) -> Sequence[Item]: ...


class Frontier:
    def __init__(
        self,
        path: Path | str | None = None,
        ladder: RetryLadder = LADDER,
        keep_items: bool = False,
        read_only: bool = False,
    ) -> None:
        """`path=None` keeps the frontier in memory (no resume)."""
        self.path = Path(path) if path is not None else None
        self.retry = ladder
        self.max_attempts = ladder.max_failures
        self.keep_items = keep_items
        self.read_only = read_only
        self._lock = contextlib.ExitStack()
        if read_only:
            if self.path is None:
                raise ValueError("a read-only frontier needs a file")
            self.db = _open_read_only(self.path)
            self.resumed = self._count(INFLIGHT)  # what opening it to crawl would put back
            self.retried = self._count(FAILED)
            self.items_listed = self._user_version() >= ITEMS_LISTED and self._has_items()
            self._rows_per_insert = 1
            return
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
            self._list_items(keep_items)
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

    def _list_items(self, keep_items: bool) -> None:
        """Make the items table; say whether it lists every done request's items."""
        listed = self._user_version() >= ITEMS_LISTED
        if keep_items:
            if not self._has_items():
                self.db.executescript(ITEMS_SCHEMA)
                # complete only if nothing was done before (a frontier written without it)
                empty = self.db.execute("SELECT 1 FROM requests LIMIT 1").fetchone() is None
                listed = empty
                self.db.execute(f"PRAGMA user_version = {ITEMS_LISTED if empty else 0}")
        elif listed:  # done requests from now on are not listed: the list is no longer whole
            self.db.execute("PRAGMA user_version = 0")
            listed = False
        self.items_listed = listed

    def _user_version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def _has_items(self) -> bool:
        row = self.db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'items'"
        ).fetchone()
        return row is not None

    def _count(self, state: int) -> int:
        row = self.db.execute("SELECT COUNT(*) FROM requests WHERE state = ?", (state,))
        return int(row.fetchone()[0])

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
        listed = self.keep_items and bool(done)
        if len(updates) == 1 and not children and not failed and not waiting and not listed:
            self.db.execute(*updates[0])
            return 0
        with self._transaction():
            added = 0
            if children:
                added = self._insert(children)
            for update in updates:
                self.db.execute(*update)
            if listed:
                self._list(completions, done)
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

    def _list(self, completions: Sequence[Outcome], done: Sequence[str]) -> None:
        """The items of the done requests replace what they gave before (a request done
        again, its source changed)."""
        self._delete_items(done)
        rows = [
            (c.request.key, item.store, item.key)
            for c in completions
            if c.error is None
            for item in c.items
        ]
        per_statement = max(1, self.db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // 3)
        for start in range(0, len(rows), min(ROWS_PER_INSERT, per_statement)):
            chunk = rows[start : start + min(ROWS_PER_INSERT, per_statement)]
            self.db.execute(
                "INSERT OR IGNORE INTO items (request, store, key)"
                f" VALUES {','.join(['(?, ?, ?)'] * len(chunk))}",
                [value for row in chunk for value in row],
            )

    def _delete_items(self, keys: Sequence[str]) -> None:
        for start in range(0, len(keys), KEYS_PER_UPDATE):
            chunk = keys[start : start + KEYS_PER_UPDATE]
            self.db.execute(
                f"DELETE FROM items WHERE request IN ({','.join('?' * len(chunk))})", chunk
            )

    def offer_all(self, requests: Sequence[Request]) -> Offered:
        """Every request the crawl wants now, for a crawl whose every request is a start
        request (no children: an unfinished request not offered here is forgotten). New ones
        are added; pending and failed ones take the URL and meta offered now (this run's
        endpoint, not the one of the run that queued them); pending and failed ones not
        offered are forgotten. Done and given-up requests stay as they are."""
        wanted = {r.key: r for r in requests}
        with self._transaction():
            unfinished = self.db.execute(
                "SELECT key, url, meta FROM requests WHERE state IN (?, ?, ?)",
                (PENDING, INFLIGHT, FAILED),
            ).fetchall()
            forgotten = [key for key, _url, _meta in unfinished if key not in wanted]
            retarget = []
            for key, url, meta in unfinished:
                offered = wanted.get(key)
                if offered is None:
                    continue
                row = self._row(offered)
                if (url, meta) != (row[1], row[3]):
                    retarget.append((row[1], row[3], key))
            for start in range(0, len(forgotten), KEYS_PER_UPDATE):
                chunk = forgotten[start : start + KEYS_PER_UPDATE]
                marks = ",".join("?" * len(chunk))
                self.db.execute(f"DELETE FROM requests WHERE key IN ({marks})", chunk)
            if self.keep_items:
                self._delete_items(forgotten)
            if retarget:
                self.db.executemany("UPDATE requests SET url = ?, meta = ? WHERE key = ?", retarget)
            added = self._insert([self._row(r) for r in wanted.values()])
        return Offered(added, len(retarget), len(forgotten))

    def known(self, keys: Iterable[str]) -> set[str]:
        """Which of `keys` the frontier knows, in any state."""
        found: set[str] = set()
        listed = list(keys)
        for start in range(0, len(listed), KEYS_PER_UPDATE):
            chunk = listed[start : start + KEYS_PER_UPDATE]
            marks = ",".join("?" * len(chunk))
            found.update(
                row[0]
                for row in self.db.execute(
                    f"SELECT key FROM requests WHERE key IN ({marks})", chunk
                )
            )
        return found

    def done_requests(self) -> list[Request]:
        return [
            Request(
                url=r[1], callback=r[2], meta={} if r[3] == NO_META else json.loads(r[3]), key=r[0]
            )
            for r in self.db.execute(
                "SELECT key, url, callback, meta FROM requests WHERE state = ? ORDER BY seq",
                (DONE,),
            )
        ]

    def done_items(self) -> dict[str, list[tuple[str, str]]]:
        """The items each done request gave, (store, key), as far as they are listed
        (`items_listed` says whether every done request's are)."""
        if not self._has_items():
            return {}
        given: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)
        for request, store, key in self.db.execute(
            "SELECT i.request, i.store, i.key FROM items i JOIN requests r ON r.key = i.request"
            " WHERE r.state = ? ORDER BY i.request",
            (DONE,),
        ):
            given[request].append((store, key))
        return dict(given)

    def redo(self, keys: Iterable[str]) -> int:
        """Done requests back to pending (what they gave was lost): how many."""
        listed = list(keys)
        changed = 0
        with self._transaction():
            for start in range(0, len(listed), KEYS_PER_UPDATE):
                chunk = listed[start : start + KEYS_PER_UPDATE]
                changed += self.db.execute(
                    f"UPDATE requests SET state = {PENDING}, attempts = 0, error = NULL"
                    f" WHERE state = {DONE} AND key IN ({','.join('?' * len(chunk))})",
                    chunk,
                ).rowcount
        return changed

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


def _open_read_only(path: Path) -> sqlite3.Connection:
    """`path` opened read-only for a reader no process writes beside (it holds the lock of
    the frontier's folder). Read as immutable, SQLite makes no file: a plain read-only open
    of a WAL database leaves a `-wal` and a `-shm` behind, and cannot make them on read-only
    media. Only commits still in a `-wal` (a killed run's) need the plain open, which reads
    them."""
    text = str(path.resolve()).replace("%", "%25").replace("?", "%3F").replace("#", "%23")
    wal = path.with_name(path.name + "-wal")
    try:
        pending = wal.exists() and wal.stat().st_size > 0
    except OSError:
        pending = True
    mode = "mode=ro" if pending else "mode=ro&immutable=1"
    try:
        db = sqlite3.connect(
            f"file:{text}?{mode}", uri=True, isolation_level=None, check_same_thread=False
        )
        db.execute("SELECT COUNT(*) FROM requests").fetchone()
    except sqlite3.Error as exc:
        raise StorageError(f"cannot read frontier {path}: {exc}") from None
    return db


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
