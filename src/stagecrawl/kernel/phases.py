"""A registry's phases as the commands run them, written once for every registry.

`seed` asks the source about queued names; `collect` runs the LIST through the collector and,
alongside it, any names still on the seed queue (new ones, or the seed ladder's retries), so
a crawl starts collecting the first package while the others are still being seeded and ends
at about the slowest lane's floor. The `run_*` functions are the commands' entry points:
settings in, report out (cli/ only parses and renders).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from stagecrawl.components import build_fetcher, effective, open_database
from stagecrawl.engine.clock import Clock
from stagecrawl.engine.fetcher import Fetcher
from stagecrawl.engine.progress import ProgressReporter
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.engine.work import LoopSettings, LoopStats
from stagecrawl.kernel.collecting import Collector, CollectSettings, CollectSummary
from stagecrawl.kernel.registry import Registry
from stagecrawl.kernel.seeding import Seeder, SeedReport, add_seeds
from stagecrawl.queue import Waiting, waiting_on
from stagecrawl.queue.events import NOT_FOUND
from stagecrawl.sca.ai import AiLicenseClient
from stagecrawl.settings import DEFAULTS, Settings
from stagecrawl.storage.db import Database


@dataclass
class CollectReport:
    """What a seed, collect or crawl run did, for the summary, JSON output and exit code."""

    seed: SeedReport | None = None
    collect: CollectSummary | None = None
    requests: dict[str, int] = field(default_factory=dict)  # per lane
    rate_limited: dict[str, int] = field(default_factory=dict)  # 429s per lane
    ai_calls: int | None = None
    ai_warnings: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)  # what the run's parts used
    loops: dict[str, LoopSettings] = field(default_factory=dict)  # the work loops that ran
    # work not attempted that waits for a time still to come (a host's pause, our budget),
    # on the LIST and the seed queue together, after the run
    waiting: Waiting | None = None

    @property
    def interrupted(self) -> bool:
        return bool(
            (self.seed and self.seed.interrupted) or (self.collect and self.collect.interrupted)
        )

    @property
    def problems(self) -> bool:
        seed = self.seed is not None and self.seed.has_problems
        c = self.collect
        collect = c is not None and bool(
            c.failed or c.outcomes[NOT_FOUND] or (c.words.problems_fail and c.problems)
        )
        return seed or collect or self.waiting is not None

    def as_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {}
        if self.seed is not None:
            document["seed"] = self.seed.as_json()
        if self.collect is not None:
            document["collect"] = self.collect.as_json()
        if self.waiting is not None:
            document["waiting"] = self.waiting.as_json()
        document["requests"] = dict(sorted(self.requests.items()))
        document["rate_limited"] = dict(sorted(self.rate_limited.items()))
        if self.ai_calls is not None:
            document["ai"] = {"calls": self.ai_calls, "warnings": self.ai_warnings}
        if self.settings:
            document["settings"] = self.settings
        return document


def waiting(db: Database, registry: Registry[Any]) -> Waiting | None:
    """What waits for a pause on the seed queue and the LIST (the latest time wins)."""
    return waiting_on([registry.seed_queue(db), registry.event_list(db).queue])


def _traffic(report: CollectReport, fetcher: Fetcher, ai: AiLicenseClient | None) -> None:
    stats = fetcher.stats
    report.requests = {lane: n for lane, n in stats.requests.items() if n}
    report.rate_limited = {lane: n for lane, n in stats.rate_limited.items() if n}
    if ai is not None:
        report.ai_calls, report.ai_warnings = ai.calls, ai.warnings


def fetcher_of(client: Any) -> Fetcher:
    found: Fetcher = getattr(client, "fetcher")  # noqa: B009 -- every client has one
    return found


async def seed(
    db: Database,
    registry: Registry[Any],
    client: Any,
    names: Sequence[str],
    stop: GracefulStop,
    resync: bool = False,
    progress: ProgressReporter | None = None,
    grace_period: float = DEFAULTS.grace_period,
    concurrency: int = DEFAULTS.concurrency,
) -> CollectReport:
    """Queue the names, then register every version the source lists for each."""
    queued = await asyncio.to_thread(add_seeds, db, registry, names, resync)

    def on_commit(stats: LoopStats) -> None:
        if progress is not None:
            progress.update(stats.completed, max(queued, stats.claimed), {})

    seeder = Seeder(
        db, registry, client, stop, concurrency, on_commit=on_commit, grace_period=grace_period
    )
    report = CollectReport(seed=await seeder.run(), loops={"seed": seeder.loop.settings})
    _traffic(report, fetcher_of(client), None)
    report.waiting = await asyncio.to_thread(waiting, db, registry)
    return report


async def collect(
    db: Database,
    registry: Registry[Any],
    client: Any,
    settings: CollectSettings,
    stop: GracefulStop,
    names: Sequence[str] = (),
    resync: bool = False,
    progress: ProgressReporter | None = None,
    ai: AiLicenseClient | None = None,
) -> CollectReport:
    """Collect the LIST; the seed queue (these names, and earlier seeds still waiting) is
    worked alongside, and its events are collected as they are registered."""
    if names:
        await asyncio.to_thread(add_seeds, db, registry, names, resync)
    collector: Collector | None = None
    seen = 0

    def seeded(_stats: LoopStats) -> None:
        nonlocal seen
        if collector is not None:
            collector.add_to_total(seeder.handler.registered - seen)
            collector.loop.wake()
        seen = seeder.handler.registered

    def room_to_seed() -> bool:
        """Backpressure: the seeder asks the source no further ahead of the collector than
        `backlog_bound` events. Every answer the seeder fetched waits in the client's run
        cache until the collector has used it; a seeder far ahead (it does much less per
        unit) filled the cache past its bound, so answers were dropped and asked for again
        (1.6 index requests per crate at 3,000 crates), and held memory growing with the
        crawl. The backlog is the collector's (events it was told of and has not finished;
        none when it is idle: what is left is, e.g., another worker's) and the seeder's own
        (versions fetched and not yet committed, which the collector is told of after)."""
        if collector is None or collecting.done():
            return True
        told = 0 if collector.loop.idle else collector.backlog
        return told + seeder.handler.in_hand < backlog_bound

    seeder = Seeder(
        db,
        registry,
        client,
        stop,
        settings.concurrency,
        on_commit=seeded,
        grace_period=settings.grace_period,
        may_claim=room_to_seed,
    )
    collector = Collector(
        db,
        registry,
        client,
        settings,
        progress,
        ai=ai,
        stop=stop,
        more_coming=lambda: not seeder.finished.is_set(),
        on_commit=seeder.loop.wake,
    )
    # What the collector holds at most (in progress, claimed ahead, two commit batches), at
    # twice a typical package's 30 versions: it never waits for the seeder, and the answers
    # waiting for it stay well inside the run cache.
    # On SQLite the seeder registers new events leased to the collector, which takes them
    # without a claim (`QueueRun.lease_terms`).
    seeder.handler.hand_to = collector.queue
    held = settings.concurrency + (settings.claim_ahead or settings.concurrency)
    backlog_bound = 64 * (held + 2 * settings.commit_batch)
    # Two phases side by side, each on its own work loop; the collector waits for the seeder
    # (more_coming) before it decides the queue is finished.
    seeding = asyncio.ensure_future(seeder.run())
    collecting = asyncio.ensure_future(collector.run())
    both = {seeding, collecting}
    try:
        await asyncio.wait(both, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in both:  # one phase failed (or this run was cancelled): the other ends too
            if not task.done():
                task.cancel()
        await asyncio.gather(*both, return_exceptions=True)
    for task in (seeding, collecting):
        error = None if task.cancelled() else task.exception()
        if error is not None:
            raise error
    seed_report, summary = seeding.result(), collecting.result()
    loops = {"seed": seeder.loop.settings, "collect": collector.loop.settings}
    report = CollectReport(seed=seed_report, collect=summary, loops=loops)
    _traffic(report, fetcher_of(client), ai)
    report.waiting = await asyncio.to_thread(waiting, db, registry)
    return report


# ---- The commands' entry points: settings in, report out (cli/ only parses and renders) ----


async def check_limiter(fetcher: Fetcher) -> None:
    """A shared rate limit that cannot be reached at the start is a configuration error (one
    line, exit 2, the URL's password masked), found before anything is opened or asked."""
    check = getattr(fetcher.limiter, "check", None)
    if check is not None:
        await check()


def registry_fetcher(registry: Registry[Any], s: Settings, clock: Clock | None = None) -> Fetcher:
    """The registry's fetcher: its settings checked, its lanes (and the AI classifier's, when
    one is configured), the limiter they name (on `clock`: tests run pacing in scaled time)."""
    from stagecrawl.engine.ratelimit import Lane, Rate

    registry.check_settings(s)
    registry.configure(s)
    lanes = registry.lanes(s)
    if s.ai_license_url:
        lanes.add(Lane("ai", s.ai_license_url, Rate(s.ai_rate)))
    return build_fetcher(s, lanes, clock=clock)


def ai_client(s: Settings, fetcher: Fetcher) -> AiLicenseClient | None:
    """The AI license classifier on the fetcher's `ai` lane, when one is configured."""
    return AiLicenseClient(fetcher, s.ai_license_url) if s.ai_license_url else None


@contextlib.asynccontextmanager
async def started(registry: Registry[Any], s: Settings) -> AsyncIterator[tuple[Fetcher, Any]]:
    """A run's fetcher and the registry's client on it, the shared limit checked first."""
    async with registry_fetcher(registry, s) as fetcher:
        await check_limiter(fetcher)
        yield fetcher, registry.client(fetcher, s)


async def run_seed(
    registry: Registry[Any],
    s: Settings,
    names: Sequence[str],
    stop: GracefulStop,
    resync: bool = False,
    progress: ProgressReporter | None = None,
) -> CollectReport:
    """`<registry> seed`: register every version the source lists for each name."""
    async with started(registry, s) as (fetcher, client):
        database = open_database(s)  # after every check: a refused start creates nothing
        report = await seed(
            database, registry, client, names, stop, resync, progress, s.grace_period,
            s.concurrency,
        )  # fmt: skip
        report.settings = effective(fetcher, report.loops)
    return report


async def run_collect(
    registry: Registry[Any],
    s: Settings,
    stop: GracefulStop,
    names: Sequence[str] = (),
    resync: bool = False,
    limit: int | None = None,
    skip_existing: bool = True,
    progress: ProgressReporter | None = None,
) -> CollectReport:
    """`<registry> collect` (no names) and `<registry> crawl` (names seeded alongside)."""
    async with started(registry, s) as (fetcher, client):
        database = open_database(s)  # after every check: a refused start creates nothing
        settings = CollectSettings.from_settings(s, limit, skip_existing)
        ai = ai_client(s, fetcher)
        report = await collect(
            database, registry, client, settings, stop, names, resync, progress, ai
        )
        report.settings = effective(fetcher, report.loops)
        report.settings["lease_seconds"] = settings.lease_seconds
    return report
