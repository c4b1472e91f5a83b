"""Collecting the LIST: claimed crates → index + API → VERSION and PRODUCT rows, on the one loop.

The LIST table is the durable queue (queue.py); `CratesQueue` puts it behind the engine's
work-loop contract: a unit is one crate's claimed events (so a crate costs one index request
and one API request, whoever takes it), a result is what that crate produced, and a batch of
results is written in one transaction with each crate lease-checked (store.py). The queue also
keeps this worker's row in TB_STAGECRAWL_WORKER and its heartbeat, which renews its leases.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, delete, func, literal, select, update

from stagecrawl.crates.client import CratesClient, IndexEntry, explain
from stagecrawl.crates.index import IndexFormatError
from stagecrawl.crates.licenses import AiLicenseClient, LicenseMatcher
from stagecrawl.crates.names import product_key
from stagecrawl.crates.queue import (
    CLAIMABLE,
    COLLECTED,
    NOT_FOUND,
    SKIPPED,
    Claimed,
    Outcome,
    claim,
    next_failure_state,
    next_lease_expiry,
    release,
    release_stale_leases,
    renew_leases,
    utcnow,
)
from stagecrawl.crates.rows import (
    CRATES_IO_PAGE,
    LANGUAGE,
    REPOSITORY,
    index_state_row,
    product_row,
    version_row,
)
from stagecrawl.crates.store import CrateWrite, existing_versions, write_crates
from stagecrawl.engine.filelock import exclusive
from stagecrawl.engine.progress import ProgressReporter
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.engine.work import LoopSettings, LoopStats, WorkLoop
from stagecrawl.errors import FetchError, LimiterUnavailable, NotFound, RateLimited
from stagecrawl.secrets import redact
from stagecrawl.storage.db import Database

__all__ = [
    "CRATES_IO_PAGE",
    "LANGUAGE",
    "REPOSITORY",
    "CollectSettings",
    "CollectSummary",
    "Collector",
    "CratesQueue",
    "index_state_row",
    "product_row",
    "version_row",
]

log = logging.getLogger("stagecrawl.crates")


@contextlib.contextmanager
def single_sqlite_writer(db: Database) -> Iterator[None]:
    """SQLite has one writer: a second `collect` on the same file is refused, not queued."""
    path = db.sqlite_path
    if not path or path == ":memory:":
        yield
        return
    busy = (
        f"another stagecrawl collect is running on {path}; SQLite takes one writer —"
        " for several workers use MySQL/MariaDB or PostgreSQL (--db) and --redis-url"
    )
    with exclusive(Path(f"{path}.collect.lock"), busy):
        yield


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class CollectSettings:
    concurrency: int = 8
    claim_crates: int = 0  # crates held ready beyond the workers; 0 = the concurrency
    lease_seconds: float = 900.0
    skip_existing: bool = True
    limit: int | None = None
    grace_period: float = 10.0
    heartbeat_interval: float = 5.0
    commit_batch: int = 32  # crates per transaction at most (group commit)
    commit_linger: float = 0.0  # seconds a partial batch may wait for more crates
    poll_interval: float = 1.0

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")


@dataclass
class CollectSummary:
    outcomes: Counter[int] = field(default_factory=Counter)
    crates: int = 0
    yanked: int = 0
    lost_leases: int = 0
    released: int = 0
    interrupted: bool = False
    errors: Counter[str] = field(default_factory=Counter)
    wall_seconds: float = 0.0
    failures: dict[str, str] = field(default_factory=dict)  # crate -> last reason (this run)
    # crate -> its index file's unreadable lines ("line 3: not JSON: …"), skipped this run
    index_problems: dict[str, list[str]] = field(default_factory=dict)

    @property
    def failed(self) -> int:
        return sum(n for state, n in self.outcomes.items() if state >= 30)


@dataclass
class CrateResult:
    group: list[Claimed]
    write: CrateWrite


class CratesQueue:
    """The LIST table behind the work-loop contract, for one worker."""

    def __init__(
        self,
        db: Database,
        worker: str,
        settings: CollectSettings,
        summary: CollectSummary,
        more_coming: Callable[[], bool] = lambda: False,
    ) -> None:
        self.db = db
        self.worker = worker
        self.settings = settings
        self.summary = summary
        self.more_coming = more_coming
        self.failed_crates: set[str] = set()  # failed in this run: the next try is the next run
        self.claimed_events = 0
        # Claimed from the database ahead of the work loop's asks and handed out from here:
        # one claim transaction per `claim_batch` crates (twice what the loop holds) rather
        # than one per finished crate. They are leased (the heartbeat renews them) and go back
        # in close() if never handed out.
        self._ready: deque[list[Claimed]] = deque()
        self.claim_batch = 2 * (
            settings.concurrency + (settings.claim_crates or settings.concurrency)
        )
        self._after: str | None = None  # the last crate claimed: the next claim starts there
        # crate -> its versions already in VERSION, read once per claim (skip_existing)
        self.existing: dict[str, set[str]] = {}
        self._heartbeat: asyncio.Task[None] | None = None
        self._requests: Callable[[], int] = lambda: 0

    # -- lifecycle: the worker's row, its heartbeat, and every lease back at the end -----------
    async def open(self, shared_limit: bool, requests: Callable[[], int]) -> None:
        self._requests = requests
        freed = await asyncio.to_thread(release_stale_leases, self.db, self.db.is_sqlite)
        if freed:
            log.info("took back %d events claimed by a worker that is gone", freed)
        await asyncio.to_thread(self._register_worker, shared_limit)
        self._heartbeat = asyncio.create_task(self._beat_forever())

    async def close(self) -> None:
        # Claimed ahead and never handed out: they go back with the rest below.
        self.summary.released += sum(len(group) for group in self._ready)
        self._ready.clear()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
        await asyncio.to_thread(self._unregister_worker)

    def _register_worker(self, shared: bool) -> None:
        now = utcnow()

        def work(conn: Connection) -> None:
            # Workers whose heartbeat stopped long ago are gone: clear them from the list.
            conn.execute(
                delete(self.db.worker).where(
                    self.db.worker.c.HEARTBEAT < literal(now - timedelta(hours=1))
                )
            )
            conn.execute(
                self.db.worker.insert().values(
                    WORKER_ID=self.worker,
                    HOST=socket.gethostname(),
                    PID=os.getpid(),
                    STARTED=now,
                    HEARTBEAT=now,
                    EVENTS_DONE=0,
                    CRATES_DONE=0,
                    REQUESTS=0,
                    SHARED_LIMIT=shared,
                )
            )

        self.db.transaction(work)

    def _beat(self) -> None:
        statement = (
            update(self.db.worker)
            .where(self.db.worker.c.WORKER_ID == literal(self.worker))
            .values(
                HEARTBEAT=utcnow(),
                EVENTS_DONE=sum(self.summary.outcomes.values()),
                CRATES_DONE=self.summary.crates,
                REQUESTS=self._requests(),
            )
        )
        self.db.transaction(lambda conn: conn.execute(statement))
        renew_leases(self.db, self.worker, self.settings.lease_seconds)

    async def _beat_forever(self) -> None:
        # Beat well inside the lease, so a live worker never loses what it holds.
        interval = min(self.settings.heartbeat_interval, self.settings.lease_seconds / 3)
        while True:
            await asyncio.sleep(interval)
            try:
                await asyncio.to_thread(self._beat)
            except Exception as exc:  # a missed beat is retried; the lease has room for it
                log.warning("heartbeat failed: %s", str(exc).splitlines()[0])

    def _unregister_worker(self) -> None:
        table = self.db.list

        def work(conn: Connection) -> None:
            # Whatever this worker still holds goes back now, not when its lease runs out.
            conn.execute(
                update(table)
                .where(table.c.CLAIMED_BY == literal(self.worker))
                .values(CLAIMED_BY=None, CLAIMED_UNTIL=None)
            )
            conn.execute(
                delete(self.db.worker).where(self.db.worker.c.WORKER_ID == literal(self.worker))
            )

        self.db.transaction(work)

    # -- the work-loop contract --------------------------------------------------------------
    async def claim(self, limit: int) -> list[list[Claimed]]:
        if len(self._ready) < limit:
            # Top up in bulk: the loop reads a short answer as "the queue ran short".
            await asyncio.to_thread(
                self._claim_ahead, max(limit - len(self._ready), self.claim_batch)
            )
        taken: list[list[Claimed]] = []
        while self._ready and len(taken) < limit:
            taken.append(self._ready.popleft())
        return taken

    def _claim_ahead(self, crates: int) -> None:
        max_events: int | None = None
        if self.settings.limit is not None:
            max_events = self.settings.limit - self.claimed_events
            if max_events <= 0:
                return
        events = claim(
            self.db,
            self.worker,
            crates,
            self.settings.lease_seconds,
            self.failed_crates,  # live: read inside the claim's transaction
            max_events,
            self._after,
        )
        if not events:
            return
        self.claimed_events += len(events)
        self._after = events[-1].crate_name
        groups: dict[str, list[Claimed]] = defaultdict(list)
        for event in events:
            groups[event.crate_name].append(event)
        if self.settings.skip_existing:
            # One read (no write lock) for the whole claim, not one per crate.
            keys = {product_key(group[0].name): name for name, group in groups.items()}
            found = existing_versions(self.db, list(keys))
            for key, name in keys.items():
                self.existing[name] = found.get(key, set())
        self._ready.extend(groups.values())

    async def complete(self, results: Sequence[CrateResult]) -> None:
        kept = await asyncio.to_thread(
            write_crates, self.db, self.worker, [r.write for r in results]
        )
        summary = self.summary
        for result, written in zip(results, kept, strict=True):
            if not written:
                summary.lost_leases += 1
                log.warning("lease lost for %s: another worker has it", result.group[0].name)
                continue
            for outcome in result.write.outcomes:
                summary.outcomes[outcome.processed] += 1
            summary.yanked += sum(1 for v in result.write.versions if v["YANKED"])
            summary.crates += 1

    async def release(self, units: Sequence[list[Claimed]]) -> None:
        # A crate given back (a stop, a crash) is not claimed again in this run: a crash must
        # not turn into a loop of claims.
        self.failed_crates.update(group[0].crate_name for group in units if group)
        ids = [event.id for group in units for event in group]
        await asyncio.to_thread(release, self.db, self.worker, ids)
        self.summary.released += len(ids)

    def pending_count(self) -> int:
        table = self.db.list
        with self.db.reading() as conn:
            return int(
                conn.execute(
                    select(func.count()).where(
                        table.c.PROCESSED.in_(CLAIMABLE) | table.c.RESYNC.is_(True)
                    )
                ).scalar_one()
            )

    async def is_empty(self) -> bool:
        return await asyncio.to_thread(self.pending_count) == 0

    async def is_finished(self) -> bool:
        if self.more_coming():
            return False  # seeding is still registering events
        if self.settings.limit is not None and self.claimed_events >= self.settings.limit:
            return True
        # Another worker holds unfinished events: wait for it to write them, or for its lease
        # to run out (it died) and take them over.
        expiry = await asyncio.to_thread(next_lease_expiry, self.db, set(self.failed_crates))
        return expiry is None


class Collector:
    """One worker: claims crates from the LIST and collects them on the work loop."""

    def __init__(
        self,
        db: Database,
        client: CratesClient,
        settings: CollectSettings | None = None,
        progress: ProgressReporter | None = None,
        worker: str | None = None,
        ai: AiLicenseClient | None = None,
        stop: GracefulStop | None = None,
        more_coming: Callable[[], bool] = lambda: False,
    ) -> None:
        self.db = db
        self.ai = ai
        self.licenses: LicenseMatcher | None = None
        self.client = client
        self.settings = settings or CollectSettings()
        self.progress = progress
        self.worker = worker or worker_id()
        self.summary = CollectSummary()
        self.stop = stop or GracefulStop("crates in progress")
        self.queue = CratesQueue(db, self.worker, self.settings, self.summary, more_coming)
        s = self.settings
        self.loop = WorkLoop(
            self.queue,
            self._process,
            LoopSettings(
                concurrency=s.concurrency,
                claim_ahead=s.claim_crates,
                commit_batch=s.commit_batch,
                commit_linger=s.commit_linger,
                grace_period=s.grace_period,
                poll_interval=s.poll_interval,
            ),
            self.stop,
            self._report,
        )
        self.total = 0

    def request_stop(self) -> None:
        self.stop.request()

    def add_to_total(self, events: int) -> None:
        """Events registered while collecting (a seeder running alongside)."""
        self.total += events
        self._report(None)

    async def run(self) -> CollectSummary:
        with single_sqlite_writer(self.db):
            fetcher = self.client.fetcher
            shared = type(fetcher.limiter).__name__ == "RedisLimiter"
            if not self.db.is_sqlite and not shared:
                log.warning(
                    "no --redis-url: this worker has its own rate bucket; N workers together"
                    " send up to N times the configured rate"
                )
            self.total += await asyncio.to_thread(self.queue.pending_count)
            if self.settings.limit is not None:
                self.total = min(self.total, self.settings.limit)
            self.licenses = await asyncio.to_thread(LicenseMatcher.load, self.db)
            await self.queue.open(shared, lambda: sum(fetcher.stats.requests.values()))
            try:
                stats = await self.loop.run()
            finally:
                await self.queue.close()  # every lease still held goes back now
        self.summary.interrupted = stats.interrupted
        self.summary.wall_seconds = stats.wall_seconds
        return self.summary

    def _report(self, _stats: LoopStats | None) -> None:
        if self.progress is None:
            return
        s = self.summary
        self.progress.update(
            sum(s.outcomes.values()),
            self.total,
            {
                "crates": s.crates,
                "not-found": s.outcomes[NOT_FOUND],
                "failed": s.failed,
                "index-req": self.client.index_requests,
                "api-req": self.client.api_requests,
            },
        )

    async def _process(self, group: list[Claimed]) -> CrateResult:
        ids = [e.id for e in group]
        try:
            outcomes, versions, product = await self._collect(group)
        except LimiterUnavailable:
            # Pacing blind would break the shared rate: this ends the run (the work loop gives
            # every crate it holds back, and the command says why in one line, exit 1).
            raise
        except Exception as exc:
            # The work loop's contract: a unit's failure is its result. A crate that breaks
            # something unforeseen climbs the ladder with the reason instead of being handed
            # out again and again.
            log.error("collecting %s failed unexpectedly: %r", group[0].name, exc)
            reason = f"unexpected {type(exc).__name__}: {exc}"
            return CrateResult(group, CrateWrite(ids, self._failures(group, reason, exc)))
        write = CrateWrite(
            ids,
            outcomes,
            versions,
            product[0] if product else None,
            product[1] if product else None,
        )
        return CrateResult(group, write)

    async def _collect(
        self, group: list[Claimed]
    ) -> tuple[list[Outcome], list[dict[str, Any]], tuple[dict[str, Any], dict[str, Any]] | None]:
        real = group[0].name
        todo = group
        outcomes: list[Outcome] = []
        if self.settings.skip_existing:
            existing = self.queue.existing.pop(group[0].crate_name)  # read with the claim
            todo = [e for e in group if e.resync or e.version not in existing]
            outcomes = [
                Outcome(e, SKIPPED) for e in group if not e.resync and e.version in existing
            ]
            if not todo:
                return outcomes, [], None
        try:
            entry = await self.client.index(real)
        except NotFound:
            return (
                outcomes + [Outcome(e, NOT_FOUND, error="not in the index") for e in todo],
                [],
                None,
            )
        except (FetchError, IndexFormatError) as exc:
            return outcomes + self._failures(todo, f"index: {explain(exc)}", exc), [], None
        try:
            api = await self.client.api(entry.real_name)
        except (FetchError, ValueError) as exc:
            return outcomes + self._failures(todo, f"api: {explain(exc)}", exc), [], None
        now = utcnow()
        by_version = {v.vers: v for v in entry.versions}
        ai_ids: dict[str, str | None] = {}
        if self.ai is not None and api is not None:
            for text in {v.license for v in api.versions.values() if v.license}:
                ai_ids[text] = await self.ai.classify(text)
        versions: list[dict[str, Any]] = []
        unreadable: list[Claimed] = []
        for event in todo:
            found = by_version.get(event.version)
            if found is not None:
                row = version_row(entry.real_name, found, api, now, self.licenses, ai_ids)
                versions.append(row)
                outcomes.append(Outcome(event, COLLECTED, yanked=found.yanked))
            elif entry.unreadable_reason(event.version) is not None:
                unreadable.append(event)
            else:
                outcomes.append(Outcome(event, NOT_FOUND, error="version not in the index"))
        if entry.problems:
            self.summary.index_problems[entry.real_name] = entry.problem_lines()
        if unreadable:
            outcomes += self._index_line_failures(entry, unreadable)
        self.client.forget(real)  # rows built: the run cache need not keep this crate
        self.client.forget(entry.real_name)
        return outcomes, versions, (product_row(entry, api, now), index_state_row(entry, now))

    def _index_line_failures(self, entry: IndexEntry, events: list[Claimed]) -> list[Outcome]:
        """Events whose version may be on an unreadable index line: not found is not known, so
        they climb the retry ladder with the line and its reason (a fixed index collects them
        on a later run), and the crate is not retried in this run."""
        self.queue.failed_crates.add(events[0].crate_name)
        self.summary.errors["index_line"] += 1
        outcomes = []
        for event in events:
            reason = entry.unreadable_reason(event.version) or ""
            self.summary.failures[f"{event.name}@{event.version}"] = reason[:300]
            outcomes.append(Outcome(event, next_failure_state(event.processed), error=reason))
        return outcomes

    def _failures(self, events: list[Claimed], reason: str, exc: Exception) -> list[Outcome]:
        kind = getattr(exc, "kind", "format")
        reason = redact(reason)  # stored and shown later, maybe where the secret is not known
        self.summary.errors[kind] += 1
        crate = events[0].crate_name
        self.queue.failed_crates.add(crate)  # before the write frees the events: no retry now
        self.summary.failures[events[0].name] = reason[:300]
        if isinstance(exc, RateLimited):
            log.warning("rate limited: %s", exc)
        return [Outcome(e, next_failure_state(e.processed), error=reason[:2000]) for e in events]
