"""Collecting the LIST: claimed crates → index + API → VERSION and PRODUCT rows, on the one loop.

The LIST table is a durable queue of the generic queue package (stagecrawl.queue, declared in
crates/queue.py); `crates_queue` runs it behind the engine's work-loop contract with the crates
handler: a unit is one crate's claimed events (so a crate costs one index request and one API
request, whoever takes it), a result is what that crate produced, and a batch of results is
written in one transaction with each crate lease-checked. The queue keeps this worker's row in
TB_STAGECRAWL_WORKER and its heartbeat, which renews its leases.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from sqlalchemy import Connection

from stagecrawl.crates.client import CratesClient, IndexEntry, explain
from stagecrawl.crates.index import IndexFormatError
from stagecrawl.crates.licenses import AiLicenseClient, LicenseMatcher
from stagecrawl.crates.names import product_key
from stagecrawl.crates.queue import (
    COLLECTED,
    NOT_FOUND,
    SKIPPED,
    Claimed,
    Outcome,
    event_list,
    next_failure_state,
    outcome,
    utcnow,
)
from stagecrawl.crates.rows import (
    CRATES_IO_PAGE,
    YANKED_AT,
    index_state_row,
    product_row,
    version_row,
)
from stagecrawl.crates.store import CrateWrite, existing_versions, write_rows
from stagecrawl.crates.tables import LANGUAGE, REPOSITORY
from stagecrawl.engine.filelock import exclusive
from stagecrawl.engine.progress import ProgressReporter
from stagecrawl.engine.shutdown import GracefulStop, Interrupted
from stagecrawl.engine.work import LoopSettings, LoopStats, WorkLoop
from stagecrawl.errors import FetchError, LimiterUnavailable, NotFound, RateLimited
from stagecrawl.queue import Handler, QueueRun, RunSettings, WorkerProgress, worker_id
from stagecrawl.secrets import redact
from stagecrawl.settings import DEFAULTS
from stagecrawl.storage.db import Database

__all__ = [
    "CRATES_IO_PAGE",
    "LANGUAGE",
    "REPOSITORY",
    "CollectSettings",
    "CollectSummary",
    "Collector",
    "CratesHandler",
    "crates_queue",
    "index_state_row",
    "product_row",
    "version_row",
    "worker_id",
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


@dataclass
class CollectSettings:
    """The collector's knobs; those in the settings table take their defaults from it."""

    concurrency: int = DEFAULTS.concurrency
    claim_crates: int = 0  # crates held ready beyond the workers; 0 = the concurrency
    lease_seconds: float = DEFAULTS.lease_seconds
    skip_existing: bool = True
    limit: int | None = None
    grace_period: float = DEFAULTS.grace_period
    heartbeat_interval: float = 5.0
    commit_batch: int = DEFAULTS.commit_batch  # crates per transaction at most (group commit)
    commit_linger: float = DEFAULTS.commit_linger  # seconds a partial batch may wait
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
    given_back: str = ""  # on a stop, the causes in words (LoopStats.given_back_text)
    interrupted: bool = False
    errors: Counter[str] = field(default_factory=Counter)
    wall_seconds: float = 0.0
    failures: dict[str, str] = field(default_factory=dict)  # crate -> last reason (this run)
    # crate -> its index file's unreadable lines ("line 3: not JSON: …"), skipped this run
    index_problems: dict[str, list[str]] = field(default_factory=dict)
    # crate -> why it was not attempted (a host's pause): it waits, off the retry ladder
    waiting: dict[str, str] = field(default_factory=dict)
    waiting_events: int = 0

    @property
    def failed(self) -> int:
        return sum(n for state, n in self.outcomes.items() if state >= 30)


@dataclass
class CrateResult:
    group: list[Claimed]
    write: CrateWrite


class CratesHandler(Handler[CrateResult]):
    """What the crates pipeline tells the generic queue: a crate's outcomes, its VERSION,
    PRODUCT and index-state rows (written in the finishing transaction), one read of the
    versions already stored per claim (skip_existing), and the run's accounting."""

    def __init__(self, db: Database, settings: CollectSettings, summary: CollectSummary) -> None:
        self.db = db
        self.settings = settings
        self.summary = summary
        # crate -> its versions already in VERSION, read once per claim (skip_existing)
        self.existing: dict[str, set[str]] = {}

    def outcomes(self, result: CrateResult) -> Sequence[Outcome]:
        return result.write.outcomes

    def claimed(self, units: Sequence[list[Claimed]]) -> None:
        if self.settings.skip_existing:
            # One read (no write lock) for the whole claim, not one per crate.
            keys = {product_key(unit[0].name): unit[0].group for unit in units}
            found = existing_versions(self.db, list(keys))
            for key, name in keys.items():
                self.existing[name] = found.get(key, set())

    def write(self, conn: Connection, results: Sequence[CrateResult]) -> None:
        write_rows(conn, self.db, [r.write for r in results])

    def finished(self, results: Sequence[CrateResult], kept: Sequence[bool]) -> None:
        summary = self.summary
        for result, written in zip(results, kept, strict=True):
            if not written:
                summary.lost_leases += 1
                log.warning("lease lost for %s: another worker has it", result.group[0].name)
                continue
            for done in result.write.outcomes:
                if done.not_before is not None:
                    summary.waiting_events += 1  # not attempted: neither done nor failed
                    continue
                summary.outcomes[done.state] += 1
            summary.yanked += sum(1 for v in result.write.versions if v[YANKED_AT])
            if any(done.not_before is None for done in result.write.outcomes):
                summary.crates += 1


def crates_queue(
    db: Database,
    worker: str,
    settings: CollectSettings,
    summary: CollectSummary,
    more_coming: Callable[[], bool] = lambda: False,
    stopping: Callable[[], bool] | None = None,
) -> QueueRun[CrateResult]:
    """The LIST behind the work-loop contract, for one worker: one claim transaction per
    `claim_crates` crates (the concurrency by default) rather than one per finished crate,
    and no more read ahead than that: a worker holds at most its concurrency plus
    `claim_crates` crates (and the finished ones waiting for their commit), so a worker that
    dies leaves little to take back and never sits on most of the queue."""
    claim_batch = settings.claim_crates or settings.concurrency
    return QueueRun(
        event_list(db).queue,
        CratesHandler(db, settings, summary),
        worker,
        RunSettings(
            lease_seconds=settings.lease_seconds,
            heartbeat_interval=settings.heartbeat_interval,
            claim_batch=claim_batch,
            limit=settings.limit,
        ),
        more_coming,
        stopping,
    )


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
        on_commit: Callable[[], None] | None = None,
    ) -> None:
        """`on_commit` is told after each group commit (a seeder alongside waits for room)."""
        self.db = db
        self.ai = ai
        self.on_commit = on_commit
        self.licenses: LicenseMatcher | None = None
        self.client = client
        self.settings = settings or CollectSettings()
        self.progress = progress
        self.worker = worker or worker_id()
        self.summary = CollectSummary()
        self.stop = stop or GracefulStop("crates in progress")
        self.queue = crates_queue(
            db,
            self.worker,
            self.settings,
            self.summary,
            more_coming,
            stopping=lambda: self.stop.requested,
        )
        self.handler = cast(CratesHandler, self.queue.handler)
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
            self._committed,
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
            self.total += await asyncio.to_thread(self.queue.queue.pending_count)
            if self.settings.limit is not None:
                self.total = min(self.total, self.settings.limit)
            self.licenses = await asyncio.to_thread(LicenseMatcher.load, self.db)
            # A stop during a database outage ends the waits for it at once (bounded stops).
            watch = asyncio.ensure_future(self.stop.event.wait())
            watch.add_done_callback(
                lambda w: None if w.cancelled() else self.db.outage.abandon(Interrupted)
            )
            await self.queue.open(shared, self._progress)
            try:
                stats = await self.loop.run()
            finally:
                watch.cancel()
                await self.queue.close()  # every lease still held goes back now
                self.summary.released = self.queue.released_rows
        self.summary.interrupted = stats.interrupted
        self.summary.given_back = stats.given_back_text
        self.summary.wall_seconds = stats.wall_seconds
        return self.summary

    def _progress(self) -> WorkerProgress:
        s = self.summary
        requests = sum(self.client.fetcher.stats.requests.values())
        return WorkerProgress(sum(s.outcomes.values()), s.crates, requests)

    @property
    def backlog(self) -> int:
        """Events this run counts on and has not finished: still to claim, held, or being
        collected (the total grows as a seeder alongside registers events; it is told after
        the seeder's commit, so this is negative while the collector is ahead of that)."""
        s = self.summary
        return self.total - sum(s.outcomes.values()) - s.waiting_events

    def _committed(self, stats: LoopStats) -> None:
        self._report(stats)
        if self.on_commit is not None:
            self.on_commit()

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
    ) -> tuple[list[Outcome], list[tuple[Any, ...]], tuple[dict[str, Any], dict[str, Any]] | None]:
        real = group[0].name
        todo = group
        outcomes: list[Outcome] = []
        if self.settings.skip_existing:
            existing = self.handler.existing.pop(group[0].group)  # read with the claim
            todo = [e for e in group if e.requeue or e.version not in existing]
            outcomes = [
                outcome(e, SKIPPED) for e in group if not e.requeue and e.version in existing
            ]
            if not todo:
                return outcomes, [], None
        try:
            entry = await self.client.index(real)
        except NotFound:
            return (
                outcomes + [outcome(e, NOT_FOUND, error="not in the index") for e in todo],
                [],
                None,
            )
        except RateLimited as exc:
            return outcomes + self._waits(todo, exc), [], None
        except (FetchError, IndexFormatError) as exc:
            return outcomes + self._failures(todo, f"index: {explain(exc)}", exc), [], None
        try:
            api = await self.client.api(entry.real_name)
        except RateLimited as exc:
            return outcomes + self._waits(todo, exc), [], None
        except (FetchError, ValueError) as exc:
            return outcomes + self._failures(todo, f"api: {explain(exc)}", exc), [], None
        now = utcnow()
        by_version = {v.vers: v for v in entry.versions}
        ai_ids: dict[str, str | None] = {}
        if self.ai is not None and api is not None:
            for text in {v.license for v in api.versions.values() if v.license}:
                ai_ids[text] = await self.ai.classify(text)
        versions: list[tuple[Any, ...]] = []
        unreadable: list[Claimed] = []
        for event in todo:
            found = by_version.get(event.version)
            if found is not None:
                row = version_row(entry.real_name, found, api, now, self.licenses, ai_ids)
                versions.append(row)
                outcomes.append(outcome(event, COLLECTED, yanked=found.yanked))
            elif entry.unreadable_reason(event.version) is not None:
                unreadable.append(event)
            else:
                outcomes.append(outcome(event, NOT_FOUND, error="version not in the index"))
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
        self.queue.this_run.add(events[0].group)
        self.summary.errors["index_line"] += 1
        outcomes = []
        for event in events:
            reason = entry.unreadable_reason(event.version) or ""
            self.summary.failures[f"{event.name}@{event.version}"] = reason[:300]
            outcomes.append(outcome(event, next_failure_state(event.state), error=reason))
        return outcomes

    def _waits(self, events: list[Claimed], exc: RateLimited) -> list[Outcome]:
        """Not attempted (the host asked for a pause longer than we may wait: its Retry-After,
        or our backoff after 429s): the events stay on their rung, not on the retry ladder,
        with the reason and the time they may go again, and the run claims nothing more."""
        reason = redact(exc.pause_text)
        until = exc.until or utcnow()
        self.queue.this_run.add(events[0].group)
        self.queue.hold(until, reason)
        self.summary.waiting[events[0].name] = reason
        return [Outcome.waits(e, reason, until) for e in events]

    def _failures(self, events: list[Claimed], reason: str, exc: Exception) -> list[Outcome]:
        kind = getattr(exc, "kind", "format")
        reason = redact(reason)  # stored and shown later, maybe where the secret is not known
        self.summary.errors[kind] += 1
        # before the write frees the events: no retry in this run
        self.queue.this_run.add(events[0].group)
        self.summary.failures[events[0].name] = reason[:300]
        return [outcome(e, next_failure_state(e.state), error=reason[:2000]) for e in events]
