"""Seeding, for every registry: which packages to collect, turned into LIST events by asking
the registry's authoritative source (`Registry.seed_one`).

Names are first written to the registry's seed table (no network), then a work loop asks the
source for each and registers every version it lists as LIST events. The seed table is the
seeds' retry ladder: a name whose request failed stays there with its reason and is tried
again by the next `seed`, `crawl` or `collect`; a name the source does not know is marked not
found. Registering is idempotent, so a seed redone after a crash changes nothing twice.

Seeding has no leases: two processes seeding the same name at once both ask the source and
both register the same events, which merge (one request wasted, nothing wrong).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.engine.work import LoopSettings, LoopStats, WorkLoop
from stagecrawl.errors import InputError, LimiterUnavailable, NotFound, RateLimited
from stagecrawl.kernel.declaration import Words
from stagecrawl.kernel.failures import explain_failure
from stagecrawl.kernel.registry import Listing, Registry
from stagecrawl.queue import Claimed, Handler, Lease, Outcome, QueueRun, utcnow
from stagecrawl.queue.events import (
    COLLECTED,
    GAVE_UP,
    LIST_CODES,
    NOT_FOUND,
    NewEvent,
    RegisterCounts,
)
from stagecrawl.queue.seeds import queue_seeds
from stagecrawl.secrets import redact
from stagecrawl.settings import DEFAULTS
from stagecrawl.storage.db import Database

log = logging.getLogger("stagecrawl.seed")
SEEDED = COLLECTED  # the seed row's "done" state
# The seed table's batch: names whose events are registered in one transaction at most.
SEED_COMMIT_BATCH = 256


@dataclass
class SeedResult:
    seed: Claimed  # group = the identity key, name = as given, requeue = RESYNC
    listing: Listing | None
    state: int
    error: str | None = None
    not_before: datetime | None = None  # not attempted (a host's pause): waits until then


@dataclass
class SeedReport:
    words: Words
    counts: RegisterCounts = field(default_factory=RegisterCounts)
    units: dict[str, int] = field(default_factory=dict)  # real name -> versions registered
    not_found: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # on the seed ladder, with the reason
    waiting: dict[str, str] = field(default_factory=dict)  # not attempted (a pause): why
    gave_up: list[str] = field(default_factory=list)
    # name -> what of its listing could not be read (unreadable lines, invalid versions):
    # skipped or kept as the registry says, the rest registered
    problems: dict[str, list[str]] = field(default_factory=dict)
    released: int = 0
    given_back: str = ""  # on a stop, the causes in words (LoopStats.given_back_text)
    interrupted: bool = False

    @property
    def has_problems(self) -> bool:
        problems = self.words.problems_fail and bool(self.problems)
        return bool(self.not_found or self.failed or self.gave_up or problems or self.waiting)

    def as_json(self) -> dict[str, Any]:
        return {
            self.words.units: dict(sorted(self.units.items())),
            "versions_seen": sum(self.units.values()),
            "new_events": self.counts.new,
            "merged_events": self.counts.merged,
            "requeued_events": self.counts.requeued,
            "not_found": sorted(self.not_found),
            "failed": dict(sorted(self.failed.items())),
            "gave_up": sorted(self.gave_up),
            "waiting": dict(sorted(self.waiting.items())),
            self.words.problems_key: dict(sorted(self.problems.items())),
            "released": self.released,
            "given_back": self.given_back,
            "interrupted": self.interrupted,
        }


def add_seeds(
    db: Database, registry: Registry[Any], names: Sequence[str], resync: bool = False
) -> int:
    """Put names on the registry's seed queue (pending). A name already seeded is asked
    again: the source may list new versions since. Returns how many names were queued."""
    unique: dict[str, str] = {}
    for name in names:
        checked = registry.validate_name(name.strip())
        unique.setdefault(registry.identity(checked), checked)  # first spelling wins
    n = registry.decl.names
    queue_seeds(db, registry.tables(db).seed, unique, resync, n.group, n.case_sensitive)
    return len(unique)


# Events registered per statement group inside a seeding transaction (see SeedHandler.write).
EVENTS_PER_WRITE = 1024


def _slices(results: Sequence[SeedResult], most: int) -> Iterator[Sequence[SeedResult]]:
    """Consecutive runs of results with at most `most` listed versions together (a name with
    more is a run of its own)."""
    start, versions = 0, 0
    for end, result in enumerate(results):
        listed = len(result.listing.versions) if result.listing is not None else 0
        if versions and versions + listed > most:
            yield results[start:end]
            start, versions = end, 0
        versions += listed
    if start < len(results):
        yield results[start:]


class SeedHandler(Handler[SeedResult]):
    """What seeding tells the generic queue: a name's new state (and how many versions the
    source listed), the LIST events it found, and the report. On SQLite the events are
    registered in the transaction that writes the names' states (it holds the one write lock
    from its start: one transaction a batch, not two, each waiting for the lock the collector
    alongside takes too); elsewhere in their own transactions before it (another process may
    register the same event meanwhile, and `register` then reads again and merges).
    Registering is idempotent: a batch redone after a crash changes nothing twice."""

    def __init__(
        self, db: Database, registry: Registry[Any], report: SeedReport, resync_all: bool
    ) -> None:
        self.db = db
        self.registry = registry
        self.events = registry.event_list(db)
        self.report = report
        self.resync_all = resync_all
        self.registered = 0  # new LIST events, for a collector running alongside
        # versions in listings fetched and not yet registered and committed (what a
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
        versions = len(result.listing.versions) if result.listing else None
        return [Outcome(result.seed, result.state, result.error, (("VERSIONS", versions),))]

    def _events(self, results: Sequence[SeedResult]) -> tuple[list[NewEvent], list[NewEvent]]:
        """The events the source listed: (to register, to register asking a resync)."""
        events: list[NewEvent] = []
        resync: list[NewEvent] = []
        for result in results:
            if result.listing is None:
                continue
            target = resync if (result.seed.requeue or self.resync_all) else events
            real = result.listing.name
            target += [
                NewEvent(real, version, "seed", yanked=yanked)
                for version, yanked in result.listing.versions.items()
            ]
        return events, resync

    def prepare(self, results: Sequence[SeedResult]) -> None:
        if self.db.is_sqlite:
            return  # registered in the finishing transaction (`write`)
        events, resync = self._events(results)
        counts = RegisterCounts()
        if events:
            counts.add(self.events.register(events))
        if resync:
            counts.add(self.events.register(resync, resync=True))
        self._count(counts)
        self._hand_over(None, counts)  # committed already, each in its own transaction

    def write(self, conn: Connection, results: Sequence[SeedResult]) -> None:
        """The batch's events are registered a slice of its names at a time (in the one
        transaction): each event's row is built in memory before it is written, so a whole
        batch (a seeder at its backlog bound commits ~170 names, 5,000 events of
        30-version packages, up to its 256 names of any size) held them all at once; a
        slice holds `EVENTS_PER_WRITE` (or one larger package)."""
        if not self.db.is_sqlite:
            return  # registered before (`prepare`)
        counts = RegisterCounts()
        lease = self._lease = self.hand_to.lease_terms() if self.hand_to is not None else None
        for part in _slices(results, EVENTS_PER_WRITE):
            events, resync = self._events(part)
            if events:
                counts.add(self.events.register_on(conn, events, lease=lease))
            if resync:
                counts.add(self.events.register_on(conn, resync, resync=True, lease=lease))
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
            if r.listing is not None:
                self.in_hand -= len(r.listing.versions)
                report.units[r.listing.name] = len(r.listing.versions)
                if r.listing.problems:
                    report.problems[r.listing.name] = r.listing.problems
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
    """Asks the registry's source for each queued name, on the work loop."""

    def __init__(
        self,
        db: Database,
        registry: Registry[Any],
        client: Any,
        stop: GracefulStop,
        concurrency: int = DEFAULTS.concurrency,
        resync_all: bool = False,
        on_commit: Callable[[LoopStats], None] | None = None,
        grace_period: float = DEFAULTS.grace_period,
        may_claim: Callable[[], bool] | None = None,
    ) -> None:
        """`may_claim`: backpressure from a collector running alongside (see WorkLoop)."""
        self.registry = registry
        self.report = SeedReport(registry.decl.words)
        self.client = client
        self.handler = SeedHandler(db, registry, self.report, resync_all)
        # No leases on the seed table: claims are reads, the names this run holds are kept out.
        self.queue = QueueRun(registry.seed_queue(db), self.handler, f"{registry.decl.cli}-seeder")
        self.loop = WorkLoop(
            self.queue,
            self._process,
            LoopSettings(
                concurrency=concurrency, commit_batch=SEED_COMMIT_BATCH, grace_period=grace_period
            ),
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
        registry = self.registry
        try:  # a name put on the seed table by other means than add_seeds: never asked
            registry.validate_name(seed.name)
        except InputError as exc:
            self.queue.this_run.add(seed.group)
            log.debug("seed skipped: %s", exc)
            return SeedResult(seed, None, GAVE_UP, str(exc))
        try:
            listing = await registry.seed_one(self.client, seed.name)
        except NotFound:
            return SeedResult(seed, None, NOT_FOUND, f"not in {registry.decl.words.index}")
        except LimiterUnavailable:
            raise  # ends the run; the names not asked stay queued for the next one
        except RateLimited as exc:
            # Not attempted (the host asked for a pause longer than we may wait): the seed
            # waits off the ladder, and this run asks nothing more.
            reason = redact(exc.pause_text)
            until = exc.until or utcnow()
            self.queue.this_run.add(seed.group)
            self.queue.hold(until, reason)
            return SeedResult(seed, None, seed.state, reason, until)
        except Exception as exc:  # a fetch failure, an unreadable answer, a bug (the loop's
            # contract: a unit's failure is its result, never a unit handed out again and
            # again). Said once, in the command's report (and stored for `status`).
            self.queue.this_run.add(seed.group)
            source = registry.decl.words.listing_source
            reason = redact(f"{source}: {explain_failure(exc)}")
            log.debug("seeding %s failed: %s", seed.name, reason)
            state = LIST_CODES.after_failure(seed.state)  # the one ladder (stagecrawl.queue)
            return SeedResult(seed, None, state, reason[:2000])
        if too_long := registry.listing_problem(listing):
            # A value no LIST row can hold: the seed fails alone, with why, on the ladder
            # (in a batch, PostgreSQL or strict MySQL would abort every seed of it).
            self.queue.this_run.add(seed.group)
            return SeedResult(seed, None, LIST_CODES.after_failure(seed.state), too_long)
        self.handler.in_hand += len(listing.versions)
        return SeedResult(seed, listing, SEEDED)
