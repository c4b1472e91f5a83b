"""Seeding: which crates to collect, turned into LIST events by asking the sparse index.

Names are first written to TB_STAGECRAWL_SEED (no network), then a work loop asks the index
for each and registers every version it lists as LIST events. The seed table is the seeds'
retry ladder: a crate whose index request failed stays there with its reason and is tried
again by the next `seed`, `crawl` or `collect`; a crate the index does not know is marked
not found. Registering is idempotent, so a seed redone after a crash changes nothing twice.

Seeding has no leases: two processes seeding the same name at once both ask the index and both
register the same events, which merge (one request wasted, nothing wrong).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from stagecrawl.crates.client import CratesClient, IndexEntry, explain
from stagecrawl.crates.index import IndexFormatError
from stagecrawl.crates.names import identity_key, validate_name
from stagecrawl.crates.queue import (
    COLLECTED,
    GAVE_UP,
    NOT_FOUND,
    Claimed,
    NewEvent,
    Outcome,
    RegisterCounts,
    event_list,
    next_failure_state,
    register,
    seed_queue,
    utcnow,
)
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.engine.work import LoopSettings, LoopStats, WorkLoop
from stagecrawl.errors import FetchError, InputError, LimiterUnavailable, NotFound, RateLimited
from stagecrawl.queue import Handler, Lease, QueueRun
from stagecrawl.queue.seeds import queue_seeds
from stagecrawl.secrets import redact
from stagecrawl.settings import DEFAULTS
from stagecrawl.storage.db import Database

log = logging.getLogger("stagecrawl.seed")
SEEDED = COLLECTED  # the seed row's "done" state


@dataclass
class SeedResult:
    seed: Claimed  # group = the identity key, name = as given, requeue = RESYNC
    entry: IndexEntry | None
    state: int
    error: str | None = None
    not_before: datetime | None = None  # not attempted (a host's pause): waits until then


@dataclass
class SeedReport:
    counts: RegisterCounts = field(default_factory=RegisterCounts)
    crates: dict[str, int] = field(default_factory=dict)  # real name -> versions registered
    not_found: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # on the seed ladder, with the reason
    waiting: dict[str, str] = field(default_factory=dict)  # not attempted (a pause): why
    gave_up: list[str] = field(default_factory=list)
    # crate -> its index file's unreadable lines, skipped (the readable ones are registered)
    index_problems: dict[str, list[str]] = field(default_factory=dict)
    released: int = 0
    given_back: str = ""  # on a stop, the causes in words (LoopStats.given_back_text)
    interrupted: bool = False

    @property
    def problems(self) -> bool:
        return bool(
            self.not_found or self.failed or self.gave_up or self.index_problems or self.waiting
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "crates": dict(sorted(self.crates.items())),
            "versions_seen": sum(self.crates.values()),
            "new_events": self.counts.new,
            "merged_events": self.counts.merged,
            "requeued_events": self.counts.requeued,
            "not_found": sorted(self.not_found),
            "failed": dict(sorted(self.failed.items())),
            "gave_up": sorted(self.gave_up),
            "waiting": dict(sorted(self.waiting.items())),
            "index_problems": dict(sorted(self.index_problems.items())),
            "released": self.released,
            "given_back": self.given_back,
            "interrupted": self.interrupted,
        }


def add_seeds(db: Database, names: Sequence[str], resync: bool = False) -> int:
    """Put names on the seed queue (pending). A name already seeded is asked again: the index
    may list new versions since. Returns how many names were queued."""
    unique: dict[str, str] = {}
    for name in names:
        unique.setdefault(identity_key(validate_name(name)), name)  # first spelling wins
    queue_seeds(db, db.seed, unique, resync)
    return len(unique)


# Events registered per statement group inside a seeding transaction (see SeedHandler.write).
EVENTS_PER_WRITE = 1024


def _slices(results: Sequence[SeedResult], most: int) -> Iterator[Sequence[SeedResult]]:
    """Consecutive runs of results with at most `most` listed versions together (a crate with
    more is a run of its own)."""
    start, versions = 0, 0
    for end, result in enumerate(results):
        listed = len(result.entry.versions) if result.entry is not None else 0
        if versions and versions + listed > most:
            yield results[start:end]
            start, versions = end, 0
        versions += listed
    if start < len(results):
        yield results[start:]


class SeedHandler(Handler[SeedResult]):
    """What seeding tells the generic queue: a name's new state (and how many versions the
    index listed), the LIST events it found, and the report. On SQLite the events are
    registered in the transaction that writes the names' states (it holds the one write lock
    from its start: one transaction a batch, not two, each waiting for the lock the collector
    alongside takes too); elsewhere in their own transactions before it (another process may
    register the same event meanwhile, and `register` then reads again and merges).
    Registering is idempotent: a batch redone after a crash changes nothing twice."""

    def __init__(self, db: Database, report: SeedReport, resync_all: bool = False) -> None:
        self.db = db
        self.report = report
        self.resync_all = resync_all
        self.registered = 0  # new LIST events, for a collector running alongside
        # versions in index files fetched and not yet registered and committed (what a
        # collector alongside does not know of yet: the seeder's backpressure counts it)
        self.in_hand = 0
        self._written: RegisterCounts | None = None  # by `write`, counted once committed
        # A collector alongside in this process, to which new events are handed over leased
        # (`QueueRun.lease_terms`), and the lease of the transaction being written.
        self.hand_to: QueueRun[Any] | None = None
        self._lease: Lease | None = None

    def outcomes(self, result: SeedResult) -> Sequence[Outcome]:
        if result.not_before is not None:
            return [Outcome.waits(result.seed, result.error or "", result.not_before)]
        versions = len(result.entry.versions) if result.entry else None
        return [Outcome(result.seed, result.state, result.error, (("VERSIONS", versions),))]

    def _events(self, results: Sequence[SeedResult]) -> tuple[list[NewEvent], list[NewEvent]]:
        """The events the index listed: (to register, to register asking a resync)."""
        events: list[NewEvent] = []
        resync: list[NewEvent] = []
        for result in results:
            if result.entry is None:
                continue
            target = resync if (result.seed.requeue or self.resync_all) else events
            real, listed = result.entry.real_name, result.entry.versions
            target += [NewEvent(real, v.vers, "seed", yanked=v.yanked) for v in listed]
        return events, resync

    def prepare(self, results: Sequence[SeedResult]) -> None:
        if self.db.is_sqlite:
            return  # registered in the finishing transaction (`write`)
        events, resync = self._events(results)
        counts = RegisterCounts()
        if events:
            counts.add(register(self.db, events))
        if resync:
            counts.add(register(self.db, resync, resync=True))
        self._count(counts)
        self._hand_over(None, counts)  # committed already, each in its own transaction

    def write(self, conn: Connection, results: Sequence[SeedResult]) -> None:
        """The batch's events are registered a slice of its crates at a time (in the one
        transaction): each event's row is built in memory before it is written, so a whole
        batch (a seeder at its backlog bound commits ~170 crates, 5,000 events of 30-version
        crates, up to its 256 crates of any size) held them all at once; a slice holds
        `EVENTS_PER_WRITE` (or one larger crate)."""
        if not self.db.is_sqlite:
            return  # registered before (`prepare`)
        queue = event_list(self.db)
        counts = RegisterCounts()
        lease = self._lease = self.hand_to.lease_terms() if self.hand_to is not None else None
        for part in _slices(results, EVENTS_PER_WRITE):
            events, resync = self._events(part)
            if events:
                counts.add(queue.register_on(conn, events, lease=lease))
            if resync:
                counts.add(queue.register_on(conn, resync, resync=True, lease=lease))
        self._written = counts

    def committed(self, results: Sequence[SeedResult]) -> None:
        lease, self._lease = self._lease, None
        if self._written is not None:
            self._hand_over(lease, self._written)

    def _hand_over(self, lease: Lease | None, counts: RegisterCounts) -> None:
        """Tell the collector alongside what was registered and committed: the rows leased
        to it, and whether there are others to claim. Unleased rows too (no terms: a row
        limit, a hold; MariaDB and PostgreSQL, registered in `prepare`), or a collector that
        found the LIST empty would not look again until the seeder ends (`_claims_dry`)."""
        if self.hand_to is None:
            return
        handed = 0 if lease is None else len(lease.rows)
        self.hand_to.adopt(lease, counts.new + counts.requeued > handed)

    def _count(self, counts: RegisterCounts) -> None:
        self.report.counts.add(counts)
        self.registered += counts.new + counts.requeued

    def finished(self, results: Sequence[SeedResult], kept: Sequence[bool]) -> None:
        if self._written is not None:  # committed with the names' states
            self._count(self._written)
            self._written = None
        report = self.report
        for r in results:
            if r.entry is not None:
                self.in_hand -= len(r.entry.versions)
                report.crates[r.entry.real_name] = len(r.entry.versions)
                if r.entry.problems:
                    report.index_problems[r.entry.real_name] = r.entry.problem_lines()
            elif r.not_before is not None:
                report.waiting[r.seed.name] = r.error or ""
            elif r.state == NOT_FOUND:
                report.not_found.append(r.seed.name)
            elif r.state == GAVE_UP:
                report.gave_up.append(r.seed.name)
                report.failed[r.seed.name] = r.error or ""
            else:
                report.failed[r.seed.name] = r.error or ""


class Seeder:
    """Asks the index for each queued name, on the work loop."""

    def __init__(
        self,
        db: Database,
        client: CratesClient,
        stop: GracefulStop,
        concurrency: int = DEFAULTS.concurrency,
        resync_all: bool = False,
        on_commit: Callable[[LoopStats], None] | None = None,
        grace_period: float = DEFAULTS.grace_period,
        may_claim: Callable[[], bool] | None = None,
    ) -> None:
        """`may_claim`: backpressure from a collector running alongside (see WorkLoop)."""
        self.report = SeedReport()
        self.client = client
        self.handler = SeedHandler(db, self.report, resync_all)
        # No leases on the seed table: claims are reads, the names this run holds are kept out.
        self.queue = QueueRun(seed_queue(db), self.handler, "seeder")
        self.loop = WorkLoop(
            self.queue,
            self._process,
            LoopSettings(concurrency=concurrency, commit_batch=256, grace_period=grace_period),
            stop,
            on_commit,
            may_claim,
        )
        self.finished = asyncio.Event()

    async def run(self) -> SeedReport:
        try:
            stats = await self.loop.run()
            self.report.interrupted = stats.interrupted
            self.report.given_back = stats.given_back_text
        finally:
            self.report.released = self.queue.released_rows
            self.finished.set()
        return self.report

    async def _process(self, unit: list[Claimed]) -> SeedResult:
        seed = unit[0]
        try:  # a name put on the seed table by other means than add_seeds: never asked
            validate_name(seed.name)
        except InputError as exc:
            self.queue.this_run.add(seed.group)
            log.warning("seed skipped: %s", exc)
            return SeedResult(seed, None, GAVE_UP, str(exc))
        try:
            entry = await self.client.index(seed.name)
        except NotFound:
            return SeedResult(seed, None, NOT_FOUND, "not in the index")
        except LimiterUnavailable:
            raise  # ends the run; the names not asked stay queued for the next one
        except RateLimited as exc:
            # Not attempted (the index host asked for a pause longer than we may wait): the
            # seed waits off the ladder, and this run asks nothing more.
            reason = redact(exc.pause_text)
            until = exc.until or utcnow()
            self.queue.this_run.add(seed.group)
            self.queue.hold(until, reason)
            return SeedResult(seed, None, seed.state, reason, until)
        except Exception as exc:  # a fetch failure, a file without one readable line, a bug
            # (the loop's contract: a unit's failure is its result, never a unit handed out
            # again and again)
            self.queue.this_run.add(seed.group)
            expected = isinstance(exc, FetchError | IndexFormatError)
            detail = explain(exc) if expected else f"unexpected {type(exc).__name__}: {exc}"
            reason = redact(f"index: {detail}")  # stored, shown by a later `status`
            log.warning("seeding %s failed: %s", seed.name, reason)
            state = next_failure_state(seed.state)  # the one ladder (stagecrawl.queue)
            return SeedResult(seed, None, state, reason[:2000])
        self.handler.in_hand += len(entry.versions)
        return SeedResult(seed, entry, SEEDED)
