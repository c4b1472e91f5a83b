"""Collecting a registry's LIST: claimed units → the registry's `collect_one` → VERSION and
PRODUCT rows through its owners, on the one work loop — the same for every registry.

The LIST is a durable queue of the generic queue package (stagecrawl.queue): a unit is one
package's claimed events (so a package costs what one collection costs, whoever takes it), a
result is what that package produced, and a batch of results is written in one transaction
with each unit lease-checked. The queue keeps this worker's row in TB_STAGECRAWL_WORKER and
its heartbeat, which renews its leases.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

from stagecrawl.engine.filelock import exclusive
from stagecrawl.engine.progress import ProgressReporter
from stagecrawl.engine.shutdown import GracefulStop, Interrupted
from stagecrawl.engine.work import LoopSettings, LoopStats, WorkLoop
from stagecrawl.errors import (
    FetchError,
    LimiterUnavailable,
    NotFound,
    RateLimited,
    UnreadableAnswer,
)
from stagecrawl.kernel.declaration import Words
from stagecrawl.kernel.failures import REASON_MAX, explain_failure
from stagecrawl.kernel.registry import CollectContext, Collected, Registry, SourceFailed
from stagecrawl.queue import (
    Claimed,
    Handler,
    Outcome,
    QueueRun,
    RunSettings,
    WorkerProgress,
    utcnow,
    worker_id,
)
from stagecrawl.queue.events import COLLECTED, LIST_CODES, NOT_FOUND, SKIPPED
from stagecrawl.sca.ai import AiLicenseClient
from stagecrawl.sca.matcher import LicenseMatcher
from stagecrawl.secrets import redact
from stagecrawl.settings import DEFAULTS, Settings
from stagecrawl.storage.bounds import row_problem, weight
from stagecrawl.storage.db import Database

log = logging.getLogger("stagecrawl.collect")
SHOWN_REASON = 300  # a failure's reason in a report: the first part (status has it whole)
TICK_SECONDS = 1.0  # progress refreshed this often between commits


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
    """The collector's knobs, from the run's settings (`from_settings`): one default each,
    the settings table's."""

    concurrency: int = DEFAULTS.concurrency
    claim_ahead: int = DEFAULTS.claim_ahead  # units held ready beyond the workers; 0 = concurrency
    lease_seconds: float = DEFAULTS.lease_seconds
    skip_existing: bool = True
    limit: int | None = None
    grace_period: float = DEFAULTS.grace_period
    heartbeat_interval: float = DEFAULTS.heartbeat_seconds
    commit_batch: int = DEFAULTS.commit_batch  # units per transaction at most (group commit)
    commit_bytes: int = DEFAULTS.commit_bytes  # their rows' text waiting for it at most
    commit_linger: float = DEFAULTS.commit_linger  # seconds a partial batch may wait
    poll_interval: float = 1.0

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")

    @classmethod
    def from_settings(
        cls, s: Settings, limit: int | None = None, skip_existing: bool = True
    ) -> CollectSettings:
        return cls(
            concurrency=s.concurrency,
            claim_ahead=s.claim_ahead,
            lease_seconds=s.lease_seconds,
            skip_existing=skip_existing,
            limit=limit,
            grace_period=s.grace_period,
            heartbeat_interval=s.heartbeat_seconds,
            commit_batch=s.commit_batch,
            commit_bytes=s.commit_bytes,
            commit_linger=s.commit_linger,
        )


@dataclass
class CollectSummary:
    words: Words
    outcomes: Counter[int] = field(default_factory=Counter)
    units: int = 0  # units whose rows were written
    yanked: int = 0
    lost_leases: int = 0
    released: int = 0
    given_back: str = ""  # on a stop, the causes in words (LoopStats.given_back_text)
    interrupted: bool = False
    errors: Counter[str] = field(default_factory=Counter)  # failures by kind
    wall_seconds: float = 0.0
    failures: dict[str, str] = field(default_factory=dict)  # unit -> last reason (this run)
    # unit -> what of its source could not be read (lines skipped, versions kept invalid)
    problems: dict[str, list[str]] = field(default_factory=dict)
    # unit -> why it was not attempted (a host's pause): it waits, off the retry ladder
    waiting: dict[str, str] = field(default_factory=dict)
    waiting_events: int = 0
    counts: Counter[str] = field(default_factory=Counter)  # the registry's own

    @property
    def failed(self) -> int:
        return sum(n for state, n in self.outcomes.items() if state >= LIST_CODES.first_failure)

    @property
    def done(self) -> int:
        return sum(self.outcomes.values())

    def as_json(self) -> dict[str, Any]:
        w = self.words
        return {
            f"{w.units}_written": self.units,
            "collected": self.outcomes[COLLECTED],
            "skipped": self.outcomes[SKIPPED],
            "not_found": self.outcomes[NOT_FOUND],
            "yanked": self.yanked,
            **{k: self.counts[k] for k in sorted(self.counts)},
            "failed": self.failed,
            "failures": dict(sorted(self.failures.items())),
            w.problems_key: dict(sorted(self.problems.items())),
            "waiting": dict(sorted(self.waiting.items())),
            "lost_leases": self.lost_leases,
            "released": self.released,
            "given_back": self.given_back,
            "interrupted": self.interrupted,
            "wall_seconds": round(self.wall_seconds, 3),
        }


@dataclass
class UnitResult:
    group: list[Claimed]
    outcomes: list[Outcome]
    collected: Collected | None = None
    weight: int = 0  # what its rows hold in memory till committed (`storage.bounds.weight`)


class CollectHandler(Handler[UnitResult]):
    """What collecting tells the generic queue: a unit's outcomes, its rows (written by the
    registry in the finishing transaction), one read of the versions already stored per
    claim (skip_existing), and the run's accounting."""

    def __init__(
        self,
        db: Database,
        registry: Registry[Any],
        settings: CollectSettings,
        summary: CollectSummary,
    ) -> None:
        self.db = db
        self.registry = registry
        self.settings = settings
        self.summary = summary
        self.versions = registry.versions(db)
        # group -> its versions already in VERSION (by the registry's version key), read
        # once per claim (skip_existing)
        self.existing: dict[str, set[Hashable]] = {}

    def outcomes(self, result: UnitResult) -> Sequence[Outcome]:
        return result.outcomes

    def claimed(self, units: Sequence[list[Claimed]]) -> None:
        if self.settings.skip_existing:
            # One read (no write lock) for the whole claim, not one per unit.
            keys = {self.registry.product_key(unit[0].name): unit[0].group for unit in units}
            found = self.versions.existing(list(keys))
            key_of = self.registry.version_key
            for key, group in keys.items():
                self.existing[group] = {key_of(v) for v in found.get(key, set())}

    def write(self, conn: Connection, results: Sequence[UnitResult]) -> None:
        rows = [r.collected.rows for r in results if r.collected is not None]
        if rows:
            self.registry.write(conn, self.db, rows)

    def finished(self, results: Sequence[UnitResult], kept: Sequence[bool]) -> None:
        summary = self.summary
        for result, written in zip(results, kept, strict=True):
            if not written:
                summary.lost_leases += 1
                log.warning("lease lost for %s: another worker has it", result.group[0].name)
                continue
            for done in result.outcomes:
                if done.not_before is not None:
                    summary.waiting_events += 1  # not attempted: neither done nor failed
                    continue
                summary.outcomes[done.state] += 1
            if result.collected is not None:
                summary.units += 1
                summary.yanked += result.collected.yanked_rows
                summary.counts.update(result.collected.counts)


def collect_queue(
    db: Database,
    registry: Registry[Any],
    worker: str,
    settings: CollectSettings,
    summary: CollectSummary,
    more_coming: Callable[[], bool] = lambda: False,
    stopping: Callable[[], bool] | None = None,
) -> QueueRun[UnitResult]:
    """The LIST behind the work-loop contract, for one worker: one claim transaction per
    `claim_ahead` units (the concurrency by default) rather than one per finished unit, and
    no more read ahead than that: a worker holds at most its concurrency plus `claim_ahead`
    units (and the finished ones waiting for their commit), so a worker that dies leaves
    little to take back and never sits on most of the queue."""
    return QueueRun(
        registry.event_list(db).queue,
        CollectHandler(db, registry, settings, summary),
        worker,
        RunSettings(
            lease_seconds=settings.lease_seconds,
            heartbeat_interval=settings.heartbeat_interval,
            claim_batch=settings.claim_ahead or settings.concurrency,
            limit=settings.limit,
        ),
        more_coming,
        stopping,
    )


class Collector:
    """One worker: claims units from the registry's LIST and collects them on the work loop."""

    def __init__(
        self,
        db: Database,
        registry: Registry[Any],
        client: Any,
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
        self.registry = registry
        self.ai = ai
        self.on_commit = on_commit
        self.licenses: LicenseMatcher | None = None
        self.client = client
        self.settings = settings or CollectSettings()
        self.progress = progress
        self.worker = worker or worker_id()
        self.words = registry.decl.words
        self.summary = CollectSummary(self.words)
        self.stop = stop or GracefulStop(f"{self.words.units} in progress")
        self.queue = collect_queue(
            db,
            registry,
            self.worker,
            self.settings,
            self.summary,
            more_coming,
            stopping=lambda: self.stop.requested,
        )
        handler = self.queue.handler
        assert isinstance(handler, CollectHandler)
        self.handler = handler
        s = self.settings
        self.loop = WorkLoop(
            self.queue,
            self._process,
            LoopSettings(
                concurrency=s.concurrency,
                claim_ahead=s.claim_ahead,
                commit_batch=s.commit_batch,
                commit_bytes=s.commit_bytes,
                commit_linger=s.commit_linger,
                grace_period=s.grace_period,
                poll_interval=s.poll_interval,
            ),
            self.stop,
            self._committed,
            weigh=lambda result: result.weight,
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
            fetcher = getattr(self.client, "fetcher")  # noqa: B009 -- every client has one
            shared = type(fetcher.limiter).__name__ == "RedisLimiter"
            if not self.db.is_sqlite and not shared:
                log.warning(
                    "no --redis-url: this worker has its own rate bucket; N workers together"
                    " send up to N times the configured rate"
                )
            self.total += await asyncio.to_thread(self.queue.queue.pending_count)
            if self.settings.limit is not None:
                self.total = min(self.total, self.settings.limit)
            reader = self.registry.license_reader
            self.licenses = await asyncio.to_thread(LicenseMatcher.load, self.db, reader)
            # A stop during a database outage ends the waits for it at once (bounded stops).
            watch = asyncio.ensure_future(self.stop.event.wait())
            watch.add_done_callback(
                lambda w: None if w.cancelled() else self.db.outage.abandon(Interrupted)
            )
            await self.queue.open(shared, self._progress)
            ticker = asyncio.ensure_future(self._tick())
            try:
                stats = await self.loop.run()
            finally:
                ticker.cancel()
                watch.cancel()
                await self.queue.close()  # every lease still held goes back now
                self.summary.released = self.queue.released_rows
        self.summary.interrupted = stats.interrupted
        self.summary.given_back = stats.given_back_text
        self.summary.wall_seconds = stats.wall_seconds
        return self.summary

    async def _tick(self) -> None:
        """Progress between commits: a unit of hundreds of versions takes minutes on a slow
        lane, and its requests show it moving (the bar's fields each second; off a terminal
        a line at least every 10 s)."""
        while True:
            await asyncio.sleep(TICK_SECONDS)
            self._report(None)

    def _progress(self) -> WorkerProgress:
        s = self.summary
        requests = sum(self.registry.requests(self.client).values())
        return WorkerProgress(s.done, s.units, requests)

    @property
    def backlog(self) -> int:
        """Events this run counts on and has not finished: still to claim, held, or being
        collected (the total grows as a seeder alongside registers events; it is told after
        the seeder's commit, so this is negative while the collector is ahead of that)."""
        s = self.summary
        return self.total - s.done - s.waiting_events

    def _committed(self, stats: LoopStats) -> None:
        self._report(stats)
        if self.on_commit is not None:
            self.on_commit()

    def _report(self, _stats: LoopStats | None) -> None:
        if self.progress is None:
            return
        s = self.summary
        requests = self.registry.requests(self.client)
        fields: dict[str, object] = {
            self.words.units: s.units,
            "not-found": s.outcomes[NOT_FOUND],
            "failed": s.failed,
            "in-progress": self.loop.in_flight,
        }
        fields.update({f"{lane}-req": requests.get(lane, 0) for lane in self.registry.lanes_shown})
        self.progress.update(s.done, self.total, fields)

    async def _process(self, group: list[Claimed]) -> UnitResult:
        try:
            return await self._collect(group)
        except LimiterUnavailable:
            # Pacing blind would break the shared rate: this ends the run (the work loop gives
            # every unit it holds back, and the command says why in one line, exit 1).
            raise
        except Exception as exc:
            # The work loop's contract: a unit's failure is its result. A unit that breaks
            # something unforeseen climbs the ladder with the reason instead of being handed
            # out again and again.
            log.error("collecting %s failed unexpectedly: %r", group[0].name, exc)
            return UnitResult(group, self._failures(group, explain_failure(exc), exc))

    async def _collect(self, group: list[Claimed]) -> UnitResult:
        name = group[0].name
        todo = group
        outcomes: list[Outcome] = []
        key_of = self.registry.version_key
        if self.settings.skip_existing:
            # Compared by the registry's version equality: PyPI's pin `3.13.0` is the `3.13`
            # it lists and we stored, so it is skipped, not collected again on every run.
            stored = self.handler.existing.pop(group[0].group, set())
            todo = [e for e in group if e.requeue or key_of(e.version) not in stored]
            outcomes = [
                Outcome(e, SKIPPED) for e in group if not e.requeue and key_of(e.version) in stored
            ]
            if not todo:
                return UnitResult(group, outcomes)
        context = CollectContext(utcnow(), self.licenses, self.ai)
        index = self.words.index
        try:
            collected = await self.registry.collect_one(
                self.client, name, [e.version for e in todo], context
            )
        except NotFound:
            return UnitResult(
                group, outcomes + [Outcome(e, NOT_FOUND, f"not in {index}") for e in todo]
            )
        except RateLimited as exc:
            return UnitResult(group, outcomes + self._waits(todo, exc))
        except SourceFailed as failed:
            if isinstance(failed.cause, RateLimited):
                return UnitResult(group, outcomes + self._waits(todo, failed.cause))
            if isinstance(failed.cause, NotFound) and failed.source == "index":
                not_found = [Outcome(e, NOT_FOUND, f"not in {index}") for e in todo]
                return UnitResult(group, outcomes + not_found)
            reason = f"{failed.source}: {explain_failure(failed.cause)}"
            return UnitResult(group, outcomes + self._failures(todo, reason, failed.cause))
        except (FetchError, UnreadableAnswer) as exc:  # expected: on the ladder with its reason
            return UnitResult(group, outcomes + self._failures(todo, explain_failure(exc), exc))
        row_sets = self.registry.row_sets(self.db, collected.rows)
        if too_long := row_problem(row_sets):
            # Before the batch: on PostgreSQL or strict MySQL it would abort every unit of
            # the batch, and of every rerun; here it fails this unit alone, with why.
            unfit = UnreadableAnswer(too_long)
            return UnitResult(group, outcomes + self._failures(todo, too_long, unfit))
        listed = collected.listed
        unreadable: list[Claimed] = []
        for event in todo:
            key = key_of(event.version)
            if key in listed:
                outcomes.append(Outcome(event, COLLECTED, None, (("YANKED", listed[key]),)))
            elif event.version in collected.unreadable:
                unreadable.append(event)
            else:
                outcomes.append(Outcome(event, NOT_FOUND, f"version not in {index}"))
        if collected.problems:
            self.summary.problems[name] = collected.problems
        if unreadable:
            outcomes += self._unreadable(collected, unreadable)
        return UnitResult(group, outcomes, collected, weight(row_sets))

    def _unreadable(self, collected: Collected, events: list[Claimed]) -> list[Outcome]:
        """Events whose version may be on an unreadable part of the source: not found is not
        known, so they climb the retry ladder with the reason (a fixed source collects them
        on a later run), and the unit is not retried in this run."""
        self.queue.this_run.add(events[0].group)
        self.summary.errors["unreadable"] += 1
        outcomes = []
        for event in events:
            reason = collected.unreadable[event.version]
            self.summary.failures[f"{event.name}@{event.version}"] = reason[:SHOWN_REASON]
            outcomes.append(
                Outcome(event, LIST_CODES.after_failure(event.state), reason[:REASON_MAX])
            )
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

    def _failures(self, events: list[Claimed], reason: str, exc: BaseException) -> list[Outcome]:
        kind = getattr(exc, "kind", "format")
        reason = redact(reason)  # stored and shown later, maybe where the secret is not known
        self.summary.errors[kind] += 1
        # before the write frees the events: no retry in this run
        self.queue.this_run.add(events[0].group)
        self.summary.failures[events[0].name] = reason[:SHOWN_REASON]
        return [Outcome(e, LIST_CODES.after_failure(e.state), reason[:REASON_MAX]) for e in events]
