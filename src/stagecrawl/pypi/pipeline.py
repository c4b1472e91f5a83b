"""The PyPI pipeline on the core: seeding (names → the seed queue → LIST events from each
project's Simple page), collecting (LIST → VERSION and PRODUCT through their owners), and
lock mode (pins → LIST events), each on the generic queue and the engine's work loop.

`collect` runs the seed queue alongside the LIST, as crates does, so `pypi crawl` collects the
first project while the others are still being seeded; the Simple page a seed fetched is
handed to the collector (PyPIClient.remember), so a crawled project costs one index request.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

from stagecrawl.engine.fetcher import Fetcher, FetchSettings
from stagecrawl.engine.git import GitRepo, select_tags
from stagecrawl.engine.progress import ProgressReporter
from stagecrawl.engine.ratelimit import Lane, Lanes, Limiter, Rate
from stagecrawl.engine.shutdown import GracefulStop, Interrupted
from stagecrawl.engine.work import LoopSettings, LoopStats, WorkLoop
from stagecrawl.errors import InputError, LimiterUnavailable
from stagecrawl.pypi import tables
from stagecrawl.pypi.client import API, FILES, FILES_HOST, INDEX, PyPIClient
from stagecrawl.pypi.locks import LockFile, locks_at_tag, parse_lock
from stagecrawl.pypi.names import name_problem, normalize
from stagecrawl.pypi.versions import is_valid, version_key
from stagecrawl.pypi.work import (
    FAILED,
    NOT_FOUND,
    WAITING,
    ProjectResult,
    collect_one,
    seed_one,
)
from stagecrawl.queue import (
    Claimed,
    Handler,
    Outcome,
    QueueRun,
    RunSettings,
    Waiting,
    WorkerProgress,
    utcnow,
    waiting_on,
    worker_id,
)
from stagecrawl.queue.events import (
    COLLECTED,
    LIST_CODES,
    SKIPPED,
    NewEvent,
    RegisterCounts,
)
from stagecrawl.queue.events import NOT_FOUND as EVENT_NOT_FOUND
from stagecrawl.queue.seeds import queue_seeds
from stagecrawl.sca.matcher import LicenseMatcher
from stagecrawl.storage.db import Database

log = logging.getLogger("stagecrawl.pypi")


@dataclass(frozen=True)
class PyPIEndpoints:
    """Where PyPI is and how fast each lane may go (burst 1: docs/operations.md)."""

    index_url: str
    api_url: str
    index_rate: float
    api_rate: float
    files_rate: float


def pypi_lanes(endpoints: PyPIEndpoints) -> Lanes:
    """The three lanes. The files lane is chosen by name for every core metadata URL,
    whatever host the Simple page points to (files.pythonhosted.org, a mirror)."""
    e = endpoints
    return Lanes(
        [
            Lane(INDEX, e.index_url, Rate(e.index_rate)),
            Lane(API, e.api_url.rstrip("/") + "/pypi/", Rate(e.api_rate)),
            Lane(FILES, FILES_HOST, Rate(e.files_rate)),
        ]
    )


def build_client(
    endpoints: PyPIEndpoints, fetch: FetchSettings, limiter: Limiter | None = None
) -> PyPIClient:
    """A client on its own fetcher (tests and benches; commands build the fetcher from the
    run's settings with components.build_fetcher and `pypi_lanes`)."""
    fetcher = Fetcher(fetch, pypi_lanes(endpoints), limiter)
    return PyPIClient(fetcher, endpoints.index_url, endpoints.api_url)


# -- seeding -------------------------------------------------------------------------------


def check_names(names: Sequence[str]) -> list[str]:
    """Every name valid, or one InputError naming the first bad one (nothing queued)."""
    for name in names:
        problem = name_problem(name.strip())
        if problem:
            raise InputError(problem)
    return [n.strip() for n in names]


def add_seeds(db: Database, names: Sequence[str], resync: bool = False) -> int:
    """Put names on PyPI's seed queue (pending); a name seeded before is asked again."""
    unique: dict[str, str] = {}
    for name in check_names(names):
        unique.setdefault(normalize(name), name)
    queue_seeds(db, tables.tables(db).seed, unique, resync)
    return len(unique)


@dataclass
class SeedReport:
    counts: RegisterCounts = field(default_factory=RegisterCounts)
    projects: dict[str, int] = field(default_factory=dict)  # name -> versions registered
    not_found: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    problems: dict[str, list[str]] = field(default_factory=dict)  # invalid versions, files
    waiting: dict[str, str] = field(default_factory=dict)  # not attempted (a pause): why
    released: int = 0  # seeds given back to the queue by a stop
    given_back: str = ""  # ... and why, in words (LoopStats.given_back_text)
    interrupted: bool = False

    @property
    def has_problems(self) -> bool:
        return bool(self.not_found or self.failed or self.waiting)

    def as_json(self) -> dict[str, Any]:
        return {
            "projects": dict(sorted(self.projects.items())),
            "versions_seen": sum(self.projects.values()),
            "new_events": self.counts.new,
            "merged_events": self.counts.merged,
            "requeued_events": self.counts.requeued,
            "not_found": sorted(self.not_found),
            "failed": dict(sorted(self.failed.items())),
            "waiting": dict(sorted(self.waiting.items())),
            "problems": dict(sorted(self.problems.items())),
            "released": self.released,
            "given_back": self.given_back,
            "interrupted": self.interrupted,
        }


@dataclass
class SeedResult:
    seed: Claimed
    state: int
    name: str | None = None
    versions: dict[str, bool] = field(default_factory=dict)  # version -> yanked
    problems: list[str] = field(default_factory=list)
    error: str | None = None
    not_before: datetime | None = None  # not attempted (a host's pause): waits until then


class SeedHandler(Handler[SeedResult]):
    def __init__(self, db: Database, report: SeedReport, resync_all: bool) -> None:
        self.db = db
        self.report = report
        self.resync_all = resync_all
        self.registered = 0

    def outcomes(self, result: SeedResult) -> Sequence[Outcome]:
        if result.not_before is not None:
            return [Outcome.waits(result.seed, result.error or "", result.not_before)]
        count = len(result.versions) if result.state == COLLECTED else None
        return [Outcome(result.seed, result.state, result.error, (("VERSIONS", count),))]

    def prepare(self, results: Sequence[SeedResult]) -> None:
        plain: list[NewEvent] = []
        again: list[NewEvent] = []
        for r in results:
            if r.name is None:
                continue
            target = again if (r.seed.requeue or self.resync_all) else plain
            target += [NewEvent(r.name, v, "seed", yanked=y) for v, y in r.versions.items()]
        counts = RegisterCounts()
        events = tables.event_list(self.db)
        if plain:
            counts.add(events.register(plain))
        if again:
            counts.add(events.register(again, resync=True))
        self.report.counts.add(counts)
        self.registered += counts.new + counts.requeued

    def finished(self, results: Sequence[SeedResult], kept: Sequence[bool]) -> None:
        for r in results:
            if r.name is not None:
                self.report.projects[r.name] = len(r.versions)
                if r.problems:
                    self.report.problems[r.name] = r.problems
            elif r.not_before is not None:
                self.report.waiting[r.seed.name] = r.error or ""
            elif r.state == EVENT_NOT_FOUND:
                self.report.not_found.append(r.seed.name)
            else:
                self.report.failed[r.seed.name] = r.error or ""


class Seeder:
    """Asks the Simple API for each queued name, on the work loop."""

    def __init__(
        self,
        db: Database,
        client: PyPIClient,
        stop: GracefulStop,
        concurrency: int,
        resync_all: bool = False,
        on_commit: Callable[[LoopStats], None] | None = None,
        grace_period: float = 10.0,
    ) -> None:
        self.report = SeedReport()
        self.client = client
        self.handler = SeedHandler(db, self.report, resync_all)
        self.queue = QueueRun(tables.seed_queue(db), self.handler, "pypi-seeder")
        self.loop = WorkLoop(
            self.queue,
            self._process,
            LoopSettings(concurrency=concurrency, commit_batch=256, grace_period=grace_period),
            stop,
            on_commit,
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
        outcome = await seed_one(self.client, seed.name)
        if outcome.state == NOT_FOUND:
            return SeedResult(seed, EVENT_NOT_FOUND, error=outcome.error)
        if outcome.state == WAITING and outcome.until is not None:
            # Not attempted (the index host asked for a pause longer than we may wait): the
            # seed waits off the ladder, and this run asks nothing more.
            reason = outcome.error or ""
            self.queue.this_run.add(seed.group)
            self.queue.hold(outcome.until, reason)
            return SeedResult(seed, seed.state, error=reason, not_before=outcome.until)
        if outcome.state == FAILED or outcome.page is None:
            self.queue.this_run.add(seed.group)
            log.warning("seeding %s failed: %s", seed.name, outcome.error)
            return SeedResult(
                seed, LIST_CODES.after_failure(seed.state), error=(outcome.error or "")[:2000]
            )
        page = outcome.page
        self.client.remember(page)
        invalid = [
            f"{r.version}: not a PEP 440 version (kept)"
            for r in page.project.releases
            if not is_valid(r.version)
        ]
        return SeedResult(
            seed,
            COLLECTED,
            page.project.name,
            {r.version: r.yanked for r in page.project.releases},
            list(page.project.problems) + invalid,
        )


# -- collecting ----------------------------------------------------------------------------


@dataclass
class CollectSettings:
    concurrency: int = 8
    lease_seconds: float = 900.0
    skip_existing: bool = True
    limit: int | None = None
    grace_period: float = 30.0
    commit_batch: int = 32
    commit_linger: float = 0.0
    heartbeat_interval: float = 5.0


@dataclass
class CollectSummary:
    outcomes: Counter[int] = field(default_factory=Counter)
    projects: int = 0
    yanked: int = 0
    unknown_dependencies: int = 0
    lost_leases: int = 0
    released: int = 0
    given_back: str = ""  # on a stop, the causes in words (LoopStats.given_back_text)
    interrupted: bool = False
    failures: dict[str, str] = field(default_factory=dict)
    problems: dict[str, list[str]] = field(default_factory=dict)
    # project -> why it was not attempted (a host's pause): it waits, off the retry ladder
    waiting: dict[str, str] = field(default_factory=dict)
    waiting_events: int = 0

    @property
    def failed(self) -> int:
        return sum(n for state, n in self.outcomes.items() if state >= LIST_CODES.first_failure)

    def as_json(self) -> dict[str, Any]:
        return {
            "projects_written": self.projects,
            "collected": self.outcomes[COLLECTED],
            "skipped": self.outcomes[SKIPPED],
            "not_found": self.outcomes[EVENT_NOT_FOUND],
            "yanked": self.yanked,
            "unknown_dependencies": self.unknown_dependencies,
            "failed": self.failed,
            "failures": dict(sorted(self.failures.items())),
            "waiting": dict(sorted(self.waiting.items())),
            "problems": dict(sorted(self.problems.items())),
            "lost_leases": self.lost_leases,
            "released": self.released,
            "given_back": self.given_back,
            "interrupted": self.interrupted,
        }


@dataclass
class CollectResult:
    group: list[Claimed]
    outcomes: list[Outcome]
    project: ProjectResult | None = None


class CollectHandler(Handler[CollectResult]):
    def __init__(self, db: Database, settings: CollectSettings, summary: CollectSummary) -> None:
        self.db = db
        self.settings = settings
        self.summary = summary
        self.versions = tables.versions(db)
        self.products = tables.products(db)
        self.existing: dict[str, set[str]] = {}

    def outcomes(self, result: CollectResult) -> Sequence[Outcome]:
        return result.outcomes

    def claimed(self, units: Sequence[list[Claimed]]) -> None:
        if self.settings.skip_existing:
            keys = [unit[0].group for unit in units]
            self.existing.update(self.versions.existing(keys))

    def write(self, conn: Connection, results: Sequence[CollectResult]) -> None:
        versions = [row for r in results if r.project for row in r.project.version_rows]
        products = [r.project.product_row for r in results if r.project and r.project.product_row]
        if versions:
            self.versions.upsert(conn, versions)
        if products:
            self.products.upsert(conn, products)

    def finished(self, results: Sequence[CollectResult], kept: Sequence[bool]) -> None:
        s = self.summary
        for result, written in zip(results, kept, strict=True):
            if not written:
                s.lost_leases += 1
                log.warning("lease lost for %s: another worker has it", result.group[0].name)
                continue
            for done in result.outcomes:
                if done.not_before is not None:
                    s.waiting_events += 1  # not attempted: neither done nor failed
                    continue
                s.outcomes[done.state] += 1
                if done.state >= LIST_CODES.first_failure and done.error:
                    s.failures[result.group[0].name] = done.error
            if result.project is not None and result.project.collected is not None:
                s.projects += 1
                rows = result.project.version_rows
                s.yanked += sum(1 for row in rows if row["YANKED"])
                s.unknown_dependencies += sum(1 for row in rows if row["DEPENDENCIES"] is None)
                if result.project.collected.problems:
                    s.problems[result.project.name] = result.project.collected.problems


class Collector:
    """One worker: claims projects from PyPI's LIST and collects them on the work loop."""

    def __init__(
        self,
        db: Database,
        client: PyPIClient,
        settings: CollectSettings,
        stop: GracefulStop,
        progress: ProgressReporter | None = None,
        licenses: LicenseMatcher | None = None,
        more_coming: Callable[[], bool] = lambda: False,
    ) -> None:
        self.db = db
        self.client = client
        self.settings = settings
        self.licenses = licenses
        self.progress = progress
        self.summary = CollectSummary()
        self.worker = worker_id()
        self.handler = CollectHandler(db, settings, self.summary)
        s = settings
        self.queue = QueueRun(
            tables.event_list(db).queue,
            self.handler,
            self.worker,
            RunSettings(
                lease_seconds=s.lease_seconds,
                heartbeat_interval=s.heartbeat_interval,
                claim_batch=4 * s.concurrency,
                limit=s.limit,
            ),
            more_coming,
            stopping=lambda: stop.requested,
        )
        self.loop = WorkLoop(
            self.queue,
            self._process,
            LoopSettings(
                concurrency=s.concurrency,
                commit_batch=s.commit_batch,
                commit_linger=s.commit_linger,
                grace_period=s.grace_period,
            ),
            stop,
            self._report,
        )
        self.total = 0

    def add_to_total(self, events: int) -> None:
        self.total += events
        self._report(None)

    async def run(self) -> CollectSummary:
        fetcher = self.client.fetcher
        shared = type(fetcher.limiter).__name__ == "RedisLimiter"
        self.total += await asyncio.to_thread(self.queue.queue.pending_count)
        if self.settings.limit is not None:
            self.total = min(self.total, self.settings.limit)
        await self.queue.open(shared, self._progress)
        try:
            stats = await self.loop.run()
        finally:
            await self.queue.close()
            self.summary.released = self.queue.released_rows
        self.summary.interrupted = stats.interrupted
        self.summary.given_back = stats.given_back_text
        return self.summary

    def _progress(self) -> WorkerProgress:
        s = self.summary
        requests = sum(self.client.fetcher.stats.requests.values())
        return WorkerProgress(sum(s.outcomes.values()), s.projects, requests)

    def _report(self, _stats: LoopStats | None) -> None:
        if self.progress is None:
            return
        s = self.summary
        requests = self.client.fetcher.stats.requests
        self.progress.update(
            sum(s.outcomes.values()),
            self.total,
            {
                "projects": s.projects,
                "failed": s.failed,
                "index-req": requests.get(INDEX, 0),
                "api-req": requests.get(API, 0),
                "files-req": requests.get(FILES, 0),
            },
        )

    async def _process(self, group: list[Claimed]) -> CollectResult:
        name = group[0].name
        todo = group
        outcomes: list[Outcome] = []
        if self.settings.skip_existing:
            # Compared by PEP 440 equality: a lock's pin `3.13.0` is the `3.13` PyPI lists and
            # we stored, so it is skipped, not collected again on every run.
            stored = {version_key(v) for v in self.handler.existing.pop(group[0].group, set())}
            todo = [e for e in group if e.requeue or version_key(e.version) not in stored]
            outcomes = [
                Outcome(e, SKIPPED)
                for e in group
                if not e.requeue and version_key(e.version) in stored
            ]
        if not todo:
            return CollectResult(group, outcomes)
        try:
            result = await collect_one(
                self.client, name, {e.version for e in todo}, utcnow(), self.licenses
            )
        except LimiterUnavailable:
            raise
        except Exception as exc:  # a bug must not lose the batch: the ladder takes it
            log.error("collecting %s failed unexpectedly: %r", name, exc)
            result = ProjectResult(name, FAILED, f"unexpected {type(exc).__name__}: {exc}")
        if result.state == NOT_FOUND:
            outcomes += [Outcome(e, EVENT_NOT_FOUND, result.error) for e in todo]
            return CollectResult(group, outcomes)
        if result.state == WAITING and result.until is not None:
            # Not attempted (a host asked for a pause longer than we may wait): the events
            # stay on their rung with the reason and their time, and the run claims nothing
            # more.
            reason = result.error or ""
            self.queue.this_run.add(group[0].group)
            self.queue.hold(result.until, reason)
            self.summary.waiting[name] = reason
            outcomes += [Outcome.waits(e, reason, result.until) for e in todo]
            return CollectResult(group, outcomes)
        if result.state == FAILED:
            self.queue.this_run.add(group[0].group)
            outcomes += [
                Outcome(e, LIST_CODES.after_failure(e.state), (result.error or "")[:2000])
                for e in todo
            ]
            return CollectResult(group, outcomes)
        listed = result.listed
        for e in todo:
            if e.version in result.missing:
                outcomes.append(Outcome(e, EVENT_NOT_FOUND, "not on the Simple page"))
            else:
                yanked = listed.get(version_key(e.version), False)
                outcomes.append(Outcome(e, COLLECTED, None, (("YANKED", yanked),)))
        return CollectResult(group, outcomes, result)


# -- the phases as commands run them -------------------------------------------------------


@dataclass
class CollectReport:
    seed: SeedReport | None = None
    collect: CollectSummary | None = None
    requests: dict[str, int] = field(default_factory=dict)
    rate_limited: dict[str, int] = field(default_factory=dict)
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
        collect = self.collect is not None and bool(
            self.collect.failed or self.collect.outcomes[EVENT_NOT_FOUND]
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
        return document


def _traffic(report: CollectReport, client: PyPIClient) -> None:
    stats = client.fetcher.stats
    report.requests = {lane: n for lane, n in stats.requests.items() if n}
    report.rate_limited = {lane: n for lane, n in stats.rate_limited.items() if n}


def waiting(db: Database) -> Waiting | None:
    """What waits for a pause on PyPI's seed queue and LIST (the latest time wins)."""
    return waiting_on([tables.seed_queue(db), tables.event_list(db).queue])


async def seed(
    db: Database,
    client: PyPIClient,
    names: Sequence[str],
    stop: GracefulStop,
    concurrency: int = 8,
    resync: bool = False,
    grace_period: float = 10.0,
) -> CollectReport:
    """Queue the names, then register every version each Simple page lists."""
    await asyncio.to_thread(add_seeds, db, names, resync)
    seeder = Seeder(db, client, stop, concurrency, grace_period=grace_period)
    report = CollectReport(seed=await seeder.run())
    _traffic(report, client)
    report.waiting = await asyncio.to_thread(waiting, db)
    return report


async def collect(
    db: Database,
    client: PyPIClient,
    settings: CollectSettings,
    stop: GracefulStop,
    names: Sequence[str] = (),
    resync: bool = False,
    progress: ProgressReporter | None = None,
    licenses: LicenseMatcher | None = None,
) -> CollectReport:
    """Collect PyPI's LIST with the seed queue worked alongside (`crawl` = names given)."""
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

    seeder = Seeder(
        db, client, stop, settings.concurrency, on_commit=seeded, grace_period=settings.grace_period
    )
    collector = Collector(
        db,
        client,
        settings,
        stop,
        progress,
        licenses,
        more_coming=lambda: not seeder.finished.is_set(),
    )
    seeding = asyncio.ensure_future(seeder.run())
    collecting = asyncio.ensure_future(collector.run())
    both = {seeding, collecting}
    try:
        await asyncio.wait(both, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in both:
            if not task.done():
                task.cancel()
        await asyncio.gather(*both, return_exceptions=True)
    for task in (seeding, collecting):
        error = None if task.cancelled() else task.exception()
        if error is not None:
            raise error
    report = CollectReport(seed=seeding.result(), collect=collecting.result())
    _traffic(report, client)
    report.waiting = await asyncio.to_thread(waiting, db)
    return report


# -- lock mode -----------------------------------------------------------------------------


@dataclass
class LockInput:
    label: str
    kind: str = ""
    pins: int = 0
    new_events: int = 0
    unpinned: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "lock": self.kind,
            "pins": self.pins,
            "new_events": self.new_events,
            "unpinned": self.unpinned,
            "skipped": self.skipped,
            "error": self.error,
        }


@dataclass
class LockReport:
    inputs: list[LockInput] = field(default_factory=list)
    interrupted: bool = False

    @property
    def problems(self) -> bool:
        return any(i.error or i.unpinned for i in self.inputs)

    def as_json(self) -> dict[str, Any]:
        return {
            "inputs": [i.as_json() for i in self.inputs],
            "new_events": sum(i.new_events for i in self.inputs),
            "interrupted": self.interrupted,
        }


def read_lockfile(path: Path) -> LockFile:
    """A lock file from disk, parsed (InputError: one line, nothing registered)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    return parse_lock(text, path.name, str(path))


async def lock_files(
    repo: str | None,
    tags: Sequence[str],
    pattern: str | None,
    all_tags: bool,
    lockfile: Path | None,
    cache_dir: Path,
    stop: GracefulStop,
) -> list[tuple[str, list[LockFile] | str]]:
    """(label, lock files or the error) per input: one lock file, or each chosen tag of a
    repository (a tag without any lock file is an error for that tag: no resolver)."""
    if (repo is None) == (lockfile is None):
        raise InputError("give either a repository or --lockfile PATH")
    if lockfile is not None:
        return [(str(lockfile), [read_lockfile(lockfile)])]
    assert repo is not None
    if not (tags or pattern or all_tags):
        raise InputError("say which tags: --tag T (repeatable), --tags-matching GLOB or --all-tags")
    git = GitRepo(repo, cache_dir, stop)
    await git.sync()
    chosen = select_tags(await git.tags(), list(tags), pattern, all_tags)
    if not chosen:
        raise InputError(f"no tag of {repo} matches {pattern!r}")
    found: list[tuple[str, list[LockFile] | str]] = []
    for tag in chosen:
        if stop.requested:
            raise Interrupted("lock reading stopped")
        label = f"{git.label}@{tag}"
        try:
            locks = await locks_at_tag(git, tag)
        except InputError as exc:
            found.append((label, str(exc)))
            continue
        found.append((label, locks or f"{label}: no lock file at the top of the tree"))
    return found


def register_locks(
    db: Database, inputs: list[tuple[str, list[LockFile] | str]], now: datetime | None = None
) -> LockReport:
    """Register each pin as a LIST event (source `lock`, tagged with its input's label); the
    collect that follows asks the Simple API, the authority, which versions exist."""
    report = LockReport()
    events = tables.event_list(db)
    for label, found in inputs:
        if isinstance(found, str):
            report.inputs.append(LockInput(label, error=found))
            continue
        for lock in found:
            entry = LockInput(
                lock.where, lock.kind, len(lock.pins()), 0, lock.unpinned, lock.skipped
            )
            counts = events.register(
                NewEvent(r.name, r.version, "lock", False, lock.kind, (label,)) for r in lock.pins()
            )
            entry.new_events = counts.new
            report.inputs.append(entry)
    return report
