"""The crates pipeline's phases as the CLI and the demo run them, written once.

`seed` asks the index about queued names; `collect` runs the LIST through the collector and,
alongside it, any names still on the seed queue (new ones, or the seed ladder's retries), so
`crates crawl` starts collecting the first crate while the others are still being seeded and
ends at about the API's floor.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stagecrawl.components import download_fetcher, effective, open_database
from stagecrawl.crates.client import CratesClient
from stagecrawl.crates.config import ai_client, collect_settings, crates_fetcher, is_crates_io
from stagecrawl.crates.dbdump import DumpReport, load_dump
from stagecrawl.crates.licenses import AiLicenseClient
from stagecrawl.crates.lock import (
    LOCKFILE,
    GitRepo,
    LockedPackage,
    TagReport,
    cargo_home,
    lock_at_tag,
    parse_lockfile,
    register_lock,
    select_tags,
)
from stagecrawl.crates.queue import COLLECTED, NOT_FOUND, SKIPPED, event_list, seed_queue
from stagecrawl.crates.refresh import RefreshReport, refresh
from stagecrawl.crates.seeding import Seeder, SeedReport, add_seeds
from stagecrawl.crates.worker import Collector, CollectSettings, CollectSummary
from stagecrawl.engine.fetcher import Fetcher
from stagecrawl.engine.progress import ProgressReporter
from stagecrawl.engine.shutdown import GracefulStop, Interrupted
from stagecrawl.engine.work import LoopSettings, LoopStats
from stagecrawl.errors import ConfigError, InputError
from stagecrawl.queue import Waiting, waiting_on
from stagecrawl.settings import DEFAULTS, Settings, check_http_url
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
        seed = self.seed is not None and self.seed.problems
        collect = self.collect is not None and bool(
            self.collect.failed or self.collect.outcomes[NOT_FOUND] or self.collect.index_problems
        )
        return seed or collect or self.waiting is not None

    def as_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {}
        if self.seed is not None:
            document["seed"] = self.seed.as_json()
        if self.collect is not None:
            c = self.collect
            document["collect"] = {
                "crates_written": c.crates,
                "collected": c.outcomes[COLLECTED],
                "skipped": c.outcomes[SKIPPED],
                "not_found": c.outcomes[NOT_FOUND],
                "yanked": c.yanked,
                "failed": c.failed,
                "failures": dict(sorted(c.failures.items())),
                "index_problems": dict(sorted(c.index_problems.items())),
                "waiting": dict(sorted(c.waiting.items())),
                "lost_leases": c.lost_leases,
                "released": c.released,
                "given_back": c.given_back,
                "interrupted": c.interrupted,
                "wall_seconds": round(c.wall_seconds, 3),
            }
        if self.waiting is not None:
            document["waiting"] = self.waiting.as_json()
        document["requests"] = dict(sorted(self.requests.items()))
        document["rate_limited"] = dict(sorted(self.rate_limited.items()))
        if self.ai_calls is not None:
            document["ai"] = {"calls": self.ai_calls, "warnings": self.ai_warnings}
        if self.settings:
            document["settings"] = self.settings
        return document


def _waiting(db: Database) -> Waiting | None:
    """What waits for a pause on the seed queue and the LIST (the latest time wins)."""
    return waiting_on([seed_queue(db), event_list(db).queue])


def _traffic(report: CollectReport, client: CratesClient, ai: AiLicenseClient | None) -> None:
    stats = client.fetcher.stats
    report.requests = dict(stats.requests)
    report.rate_limited = {lane: n for lane, n in stats.rate_limited.items() if n}
    if ai is not None:
        report.ai_calls, report.ai_warnings = ai.calls, ai.warnings


async def seed(
    db: Database,
    client: CratesClient,
    names: Sequence[str],
    stop: GracefulStop,
    resync: bool = False,
    progress: ProgressReporter | None = None,
    grace_period: float = DEFAULTS.grace_period,
    concurrency: int = DEFAULTS.concurrency,
) -> CollectReport:
    """Queue the names, then register every version the index lists for each."""
    queued = await asyncio.to_thread(add_seeds, db, names, resync)

    def on_commit(stats: LoopStats) -> None:
        if progress is not None:
            progress.update(stats.completed, max(queued, stats.claimed), {})

    seeder = Seeder(db, client, stop, concurrency, on_commit=on_commit, grace_period=grace_period)
    report = CollectReport(seed=await seeder.run(), loops={"seed": seeder.loop.settings})
    _traffic(report, client, None)
    report.waiting = await asyncio.to_thread(_waiting, db)
    return report


async def collect(
    db: Database,
    client: CratesClient,
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
        await asyncio.to_thread(add_seeds, db, names, resync)
    collector: Collector | None = None
    seen = 0

    def seeded(_stats: LoopStats) -> None:
        nonlocal seen
        if collector is not None:
            collector.add_to_total(seeder.handler.registered - seen)
            collector.loop.wake()
        seen = seeder.handler.registered

    def room_to_seed() -> bool:
        """Backpressure: the seeder asks the index no further ahead of the collector than
        `backlog_bound` events. Every index file the seeder fetched waits in the run cache
        until the collector has used it; a seeder far ahead (it does much less per crate)
        filled the cache past its bound, so files were dropped and asked for again (1.6
        index requests per crate at 3,000 crates), and held memory growing with the crawl.
        The backlog is the collector's (events it was told of and has not finished; none
        when it is idle: what is left is, e.g., another worker's) and the seeder's own
        (versions fetched and not yet committed, which the collector is told of after)."""
        if collector is None or collecting.done():
            return True
        told = 0 if collector.loop.idle else collector.backlog
        return told + seeder.handler.in_hand < backlog_bound

    seeder = Seeder(
        db,
        client,
        stop,
        settings.concurrency,
        on_commit=seeded,
        grace_period=settings.grace_period,
        may_claim=room_to_seed,
    )
    collector = Collector(
        db,
        client,
        settings,
        progress,
        ai=ai,
        stop=stop,
        more_coming=lambda: not seeder.finished.is_set(),
        on_commit=seeder.loop.wake,
    )
    # What the collector holds at most (in progress, claimed ahead, two commit batches), at
    # twice a typical crate's 30 versions: it never waits for the seeder, and the files
    # waiting for it stay well inside the run cache (~2.4 KB each version as parsed: 80
    # crates of the defaults are ~12 MB of its 32 MB).
    # On SQLite the seeder registers new events leased to the collector, which takes them
    # without a claim (`QueueRun.lease_terms`).
    seeder.handler.hand_to = collector.queue
    held = settings.concurrency + (settings.claim_crates or settings.concurrency)
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
    _traffic(report, client, ai)
    report.waiting = await asyncio.to_thread(_waiting, db)
    return report


@dataclass
class LockInputs:
    """What lock mode reads: a repository's tags, or one lock file (checked before any
    registration, so a bad input changes nothing)."""

    label: str
    tags: list[str]
    repo: GitRepo | None = None
    lockfile_packages: list[LockedPackage] = field(default_factory=list)


async def lock_inputs(
    repo: str | None,
    tags: Sequence[str],
    pattern: str | None,
    all_tags: bool,
    lockfile: Path | None,
    label: str | None,
    cache_dir: Path,
    stop: GracefulStop | None = None,
) -> LockInputs:
    if (repo is None) == (lockfile is None):
        raise InputError("give either a repository or --lockfile PATH")
    if lockfile is not None and (tags or pattern or all_tags):
        # a lock file is one resolution already: a tag would be silently ignored
        raise InputError(
            "--tag, --tags-matching and --all-tags choose a repository's tags;"
            " with --lockfile give none (--label names its input)"
        )
    if lockfile is not None:
        try:
            text = lockfile.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read {lockfile}: {exc}") from None
        packages = parse_lockfile(text, str(lockfile))
        name = label or lockfile.resolve().parent.name or "lockfile"
        return LockInputs(name, [""], lockfile_packages=packages)
    assert repo is not None
    if not (tags or pattern or all_tags):
        raise InputError("say which tags: --tag T (repeatable), --tags-matching GLOB or --all-tags")
    git = GitRepo(repo, cache_dir, stop)
    await git.sync()
    chosen = select_tags(await git.tags(), list(tags), pattern, all_tags)
    if not chosen:
        raise InputError(f"no tag of {repo} matches {pattern!r}")
    return LockInputs(label or git.label, chosen, repo=git)


@dataclass
class LockReport:
    tags: list[TagReport] = field(default_factory=list)
    interrupted: bool = False
    settings: dict[str, Any] = field(default_factory=dict)  # what the run's parts used

    @property
    def problems(self) -> bool:
        return any(r.error or r.not_found or r.rejected for r in self.tags)

    def as_json(self) -> dict[str, Any]:
        return {
            "inputs": [
                {
                    "label": r.label,
                    "lock": r.kind,
                    "packages": r.packages,
                    "external_crates": r.external,
                    "new_events": r.new_events,
                    "not_found": list(r.not_found),
                    "index_failed": r.index_failed or {},
                    "rejected": dict(sorted(r.rejected.items())),
                    "error": r.error,
                }
                for r in self.tags
            ],
            "unique_crates": len(frozenset().union(*(r.crates for r in self.tags))),
            "new_events": sum(r.new_events for r in self.tags),
            "interrupted": self.interrupted,
            **({"settings": self.settings} if self.settings else {}),
        }


async def lock(
    open_db: Callable[[], Database],
    client: CratesClient | None,
    inputs: LockInputs,
    cache_dir: Path,
    index_url: str,
    pinned_only: bool,
    stop: GracefulStop,
) -> LockReport:
    """Register what each tag's (or the lock file's) resolved Cargo.lock uses. The database
    is opened on the first registration: an input that fails throughout creates nothing."""
    report = LockReport()
    db: Database | None = None
    home = cargo_home(cache_dir, index_url) if inputs.repo else None
    for tag in inputs.tags:
        if stop.requested:
            report.interrupted = True
            break
        tag_report = TagReport(f"{inputs.label}@{tag}" if inputs.repo else inputs.label)
        report.tags.append(tag_report)
        try:
            if inputs.repo is not None and home is not None:
                packages, tag_report.kind = await lock_at_tag(inputs.repo, tag, home)
            else:
                packages, tag_report.kind = inputs.lockfile_packages, LOCKFILE
            db = db or open_db()
            await register_lock(db, client, tag_report, packages, pinned_only, stop)
        except InputError as exc:
            tag_report.error = str(exc)
        except Interrupted:
            report.interrupted = True
            tag_report.error = "interrupted"
            break
    return report


# ---- The commands' entry points: settings in, report out (cli/ only parses and renders) ----


async def _check_limiter(fetcher: Fetcher) -> None:
    """A shared rate limit that cannot be reached at the start is a configuration error (one
    line, exit 2, the URL's password masked), found before anything is opened or asked."""
    check = getattr(fetcher.limiter, "check", None)
    if check is not None:
        await check()


async def run_seed(
    s: Settings,
    names: Sequence[str],
    stop: GracefulStop,
    resync: bool = False,
    progress: ProgressReporter | None = None,
) -> CollectReport:
    """`crates seed`: register every version the index lists for each name."""
    async with crates_fetcher(s) as fetcher:
        await _check_limiter(fetcher)
        # after every check: a refused start creates nothing
        database = open_database(s)
        client = CratesClient(fetcher, s.index_url, s.api_url)
        report = await seed(
            database, client, names, stop, resync, progress, s.grace_period, s.concurrency
        )
        report.settings = effective(fetcher, report.loops)
    return report


async def run_collect(
    s: Settings,
    stop: GracefulStop,
    names: Sequence[str] = (),
    resync: bool = False,
    limit: int | None = None,
    skip_existing: bool = True,
    progress: ProgressReporter | None = None,
) -> CollectReport:
    """`crates collect` (no names) and `crates crawl` (names seeded alongside)."""
    async with crates_fetcher(s) as fetcher:
        await _check_limiter(fetcher)
        # after every check: a refused start creates nothing
        database = open_database(s)
        client = CratesClient(fetcher, s.index_url, s.api_url)
        settings = collect_settings(s, limit, skip_existing)
        ai = ai_client(s, fetcher)
        report = await collect(database, client, settings, stop, names, resync, progress, ai)
        report.settings = effective(fetcher, report.loops)
        report.settings["lease_seconds"] = settings.lease_seconds
    return report


async def run_lock(
    s: Settings,
    stop: GracefulStop,
    repo: str | None,
    tags: Sequence[str],
    pattern: str | None,
    all_tags: bool,
    lockfile: Path | None,
    label: str | None,
    pinned_only: bool,
) -> LockReport:
    """`crates lock`: the inputs are checked (a bad lock file refused) before anything is asked
    or opened; then each tag's lock is registered."""
    cache = Path(s.cache_dir)
    if lockfile is not None:  # read from disk alone: nothing cloned or asked
        await lock_inputs(repo, tags, pattern, all_tags, lockfile, label, cache, stop)
    fetcher = crates_fetcher(s)  # settings checked before a repository is cloned
    async with fetcher:
        inputs = await lock_inputs(repo, tags, pattern, all_tags, lockfile, label, cache, stop)
        client = CratesClient(fetcher, s.index_url, s.api_url)
        report = await lock(
            lambda: open_database(s),
            client,
            inputs,
            cache,
            s.index_url,
            pinned_only,
            stop,
        )
        report.settings = effective(fetcher, {})
    return report


@dataclass
class RefreshRunReport:
    """`crates refresh`: the conditional re-check, then (optionally) the collect it led to."""

    refresh: RefreshReport
    collected: CollectReport | None = None
    settings: dict[str, Any] = field(default_factory=dict)  # what the run's parts used
    requests: dict[str, int] = field(default_factory=dict)  # per lane, refresh and collect

    @property
    def problems(self) -> bool:
        r = self.refresh
        return bool(r.failed or r.gone or r.index_problems or r.not_asked.reasons) or bool(
            self.collected and self.collected.problems
        )

    @property
    def waiting(self) -> Waiting | None:
        """What waits for a pause: the crates refresh did not ask, and the events the collect
        after it did not attempt (the latest time wins)."""
        collected = self.collected.waiting if self.collected is not None else None
        return Waiting.merge([self.refresh.not_asked.waiting, collected])

    @property
    def interrupted(self) -> bool:
        return self.refresh.interrupted or bool(self.collected and self.collected.interrupted)

    def as_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {"refresh": self.refresh.as_json()}
        if self.collected is not None:
            document.update(self.collected.as_json())
        waiting = self.waiting
        if waiting is not None:
            document["waiting"] = waiting.as_json()
        document["settings"] = self.settings
        return document


async def run_refresh(
    s: Settings,
    stop: GracefulStop,
    names: Sequence[str],
    then_collect: bool = True,
    progress: Callable[[], ProgressReporter] | None = None,
) -> RefreshRunReport:
    async with crates_fetcher(s) as fetcher:
        await _check_limiter(fetcher)
        database = open_database(s)
        checked = await refresh(
            database, fetcher, s.index_url, list(names), stop, s.concurrency, s.grace_period
        )
        loops = {"refresh": LoopSettings(concurrency=s.concurrency, grace_period=s.grace_period)}
        report = RefreshRunReport(checked)
        settings = collect_settings(s)
        if then_collect and checked.new_events and not stop.requested:
            client = CratesClient(fetcher, s.index_url, s.api_url)
            bar = progress() if progress is not None else None
            with bar or contextlib.nullcontext():
                report.collected = await collect(database, client, settings, stop, progress=bar)
            loops.update(report.collected.loops)
        report.settings = effective(fetcher, loops) | {"lease_seconds": settings.lease_seconds}
        report.requests = dict(fetcher.stats.requests)
    return report


async def run_dbdump(
    s: Settings,
    stop: GracefulStop,
    source: str,
    max_bytes: int,
    progress: ProgressReporter | None = None,
) -> DumpReport:
    """`crates dbdump`: download the dump (or read a local one), then load it."""
    with tempfile.TemporaryDirectory(prefix="stagecrawl-dl-") as tmp:
        if source.startswith(("http://", "https://")):
            check_http_url(source, "--source")
            if is_crates_io(source) and not (s.contact or "").strip():
                raise ConfigError(
                    "a contact is required: crates.io asks for one. Pass --contact"
                    " EMAIL-OR-URL or set STAGECRAWL_CONTACT."
                )
            path = Path(tmp) / "db-dump.tar.gz"
            async with download_fetcher(s, source) as fetcher:
                await stop.cancelling(fetcher.download(source, path, max_bytes, lane="download"))
        else:
            path = Path(source)
            if not path.is_file():
                raise InputError(f"dump {source} does not exist")
        database = open_database(s)

        def advance(_what: str, n: int) -> None:
            if progress is not None:
                progress.update(n, None, {})

        return await asyncio.to_thread(load_dump, database, path, advance)
