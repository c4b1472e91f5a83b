"""Seeding the LIST and collecting it: the crates pipeline's two stages.

The LIST table is the durable queue (see queue.py), so the crates worker does not use the
engine's file frontier; it uses the engine's fetcher, limiter and progress, and claims whole
crates so each costs one index request and one API request, written in one transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import socket
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import bindparam, delete, func, literal, select, update

from stagecrawl.crates.api import ApiCrate, parse_time
from stagecrawl.crates.client import CratesClient, IndexEntry
from stagecrawl.crates.index import IndexFormatError, IndexVersion
from stagecrawl.crates.licenses import AiLicenseClient, LicenseMatcher
from stagecrawl.crates.names import identity_key, product_key, validate_name
from stagecrawl.crates.queue import (
    CLAIMABLE,
    COLLECTED,
    GAVE_UP,
    NOT_FOUND,
    SKIPPED,
    Claimed,
    NewEvent,
    Outcome,
    RegisterCounts,
    claim,
    next_failure_state,
    next_lease_expiry,
    register,
    release,
    release_stale_leases,
    renew_leases,
    utcnow,
)
from stagecrawl.crates.semver import latest_version
from stagecrawl.engine.progress import ProgressReporter
from stagecrawl.engine.ratelimit import origin_of
from stagecrawl.engine.redis_limiter import RedisLimiter
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.errors import FetchError, NotFound, RateLimited, StorageError
from stagecrawl.storage.db import Database, dumps, upsert

log = logging.getLogger("stagecrawl.crates")

LANGUAGE, REPOSITORY = "rust", "Cargo"
ProductRows = tuple[dict[str, Any], dict[str, Any]]  # PRODUCT row, index-state row
CRATES_IO_PAGE = "https://crates.io/crates/"


@contextlib.contextmanager
def single_sqlite_writer(db: Database) -> Iterator[None]:
    """SQLite has one writer: a second `collect` on the same file is refused, not queued."""
    path = db.sqlite_path
    if not path or path == ":memory:":
        yield
        return
    lock_path = f"{path}.collect.lock"
    with open(lock_path, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StorageError(
                f"another stagecrawl collect is running on {path}; SQLite takes one writer —"
                " for several workers use MySQL/MariaDB or PostgreSQL (--db) and --redis-url"
            ) from None
        yield


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


# -- seeding ----------------------------------------------------------------------------------
@dataclass
class SeedReport:
    counts: RegisterCounts = field(default_factory=RegisterCounts)
    crates: dict[str, int] = field(default_factory=dict)  # real name -> versions registered
    not_found: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)


async def seed_crates(
    db: Database, client: CratesClient, names: Sequence[str], resync: bool = False
) -> SeedReport:
    """Register every version of each name, as the index spells and lists them."""
    for name in names:
        validate_name(name)  # all names are checked before the first request
    report = SeedReport()

    async def one(name: str) -> None:
        try:
            entry = await client.index(name)
        except NotFound:
            report.not_found.append(name)
            return
        except (FetchError, IndexFormatError) as exc:
            report.failed[name] = str(exc)
            return
        events = [
            NewEvent(entry.real_name, v.vers, "seed", yanked=v.yanked) for v in entry.versions
        ]
        counts = await asyncio.to_thread(register, db, events, resync)
        report.counts.add(counts)
        report.crates[entry.real_name] = len(events)

    unique = {identity_key(n): n for n in reversed(names)}  # first spelling given wins
    await asyncio.gather(*(one(n) for n in reversed(unique.values())))
    return report


# -- collecting -------------------------------------------------------------------------------
@dataclass
class CollectSettings:
    concurrency: int = 8
    claim_crates: int = 0  # crates per claim; 0 = the concurrency
    lease_seconds: float = 900.0
    skip_existing: bool = True
    limit: int | None = None
    grace_period: float = 30.0
    handle_signals: bool = True
    heartbeat_interval: float = 5.0


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

    @property
    def failed(self) -> int:
        return sum(n for state, n in self.outcomes.items() if state >= 30)


def version_row(
    real: str,
    version: IndexVersion,
    api: ApiCrate | None,
    now: Any,
    licenses: LicenseMatcher | None = None,
    ai_ids: dict[str, str | None] | None = None,
) -> dict[str, Any]:
    api_version = api.versions.get(version.vers) if api else None
    released = api_version.created_at if api_version else None
    license_text = api_version.license if api_version else None
    standard = licenses.standardise(license_text) if licenses else None
    return {
        "LANGUAGE": LANGUAGE,
        "REPOSITORY": REPOSITORY,
        "PRODUCT_KEY": product_key(real),
        "VERSION": version.vers,
        "NAME": real,
        "DESCRIPTION": api.description if api else None,
        "LICENSE": license_text,
        "STANDARD_LICENSE": standard.standard_license if standard else None,
        "LICENSE_IDS": standard.license_ids if standard else None,
        "LICENSE_EXPRESSION": standard.expression if standard else None,
        "LICENSE_AI": (ai_ids or {}).get(license_text or ""),
        "DEPENDENCIES": dumps(version.dependencies()),
        "FEATURES": dumps(version.features),
        "CHECKSUM": version.cksum,
        "YANKED": version.yanked,
        "RUST_VERSION": version.rust_version,
        "LINKS": version.links,
        "URL": f"{CRATES_IO_PAGE}{real}/{version.vers}",
        "SCM": _scm(api),
        "DOWNLOADS": api_version.downloads if api_version else None,
        "RELEASE_DATE": released or parse_time(version.pubtime),
        "PROCESSED": COLLECTED,
        "LAST_UPDATED": now,
    }


def product_row(entry: IndexEntry, api: ApiCrate | None, now: Any) -> dict[str, Any]:
    pairs = [(v.vers, v.yanked) for v in entry.versions]
    return {
        "LANGUAGE": LANGUAGE,
        "REPOSITORY": REPOSITORY,
        "PRODUCT_KEY": product_key(entry.real_name),
        "NAME": entry.real_name,
        "DESCRIPTION": api.description if api else None,
        "LATEST_VERSION": latest_version(pairs),
        "COMP_STATUS": "ACTIVE" if any(not y for _, y in pairs) else "YANKED",
        "URL": CRATES_IO_PAGE + entry.real_name,
        "SCM": _scm(api),
        "KEYWORDS": dumps(api.keywords) if api else None,
        "CATEGORIES": dumps(api.categories) if api else None,
        "DOWNLOADS": api.downloads if api else None,
        "VERSION_COUNT": len(pairs),
        "LAST_UPDATED": now,
    }


def index_state_row(entry: IndexEntry, now: Any) -> dict[str, Any]:
    """What refresh needs to ask the index "changed since?" next time."""
    return {
        "PRODUCT_KEY": product_key(entry.real_name),
        "NAME": entry.real_name,
        "ETAG": entry.validators.etag,
        "LAST_MODIFIED": entry.validators.last_modified,
        "CONTENT_SHA256": entry.sha256,
        "CHECKED_AT": now,
    }


def _scm(api: ApiCrate | None) -> str | None:
    if api is None:
        return None
    return dumps(
        {"repository": api.repository, "homepage": api.homepage, "documentation": api.documentation}
    )


class Collector:
    def __init__(
        self,
        db: Database,
        client: CratesClient,
        settings: CollectSettings | None = None,
        progress: ProgressReporter | None = None,
        worker: str | None = None,
        ai: AiLicenseClient | None = None,
    ) -> None:
        self.db = db
        self.ai = ai
        self.licenses: LicenseMatcher | None = None
        self.client = client
        self.settings = settings or CollectSettings()
        self.progress = progress
        self.worker = worker or worker_id()
        self.summary = CollectSummary()
        # A second signal exits at once: every crate is written in one transaction.
        self._stop = GracefulStop("crates in progress")
        self._stopping = self._stop.event
        self._failed_crates: set[str] = set()
        self._claimed_events = 0
        self._total = 0
        self._in_flight = 0  # crate groups queued or being processed
        self._finished = asyncio.Event()  # set whenever a group is done

    def request_stop(self) -> None:
        self._stop.request()

    def pending_count(self) -> int:
        table = self.db.list
        with self.db.engine.connect() as conn:
            return int(
                conn.execute(
                    select(func.count()).where(
                        table.c.PROCESSED.in_(CLAIMABLE) | table.c.RESYNC.is_(True)
                    )
                ).scalar_one()
            )

    async def run(self) -> CollectSummary:
        with single_sqlite_writer(self.db):
            shared = isinstance(self.client.fetcher.limiter, RedisLimiter)
            if not self.db.is_sqlite and not shared:
                log.warning(
                    "no --redis-url: this worker has its own rate bucket; N workers together"
                    " send up to N times the configured rate"
                )
            freed = await asyncio.to_thread(release_stale_leases, self.db, self.db.is_sqlite)
            if freed:
                log.info("took back %d events claimed by a worker that is gone", freed)
            await asyncio.to_thread(self._register_worker, shared)
            heartbeat = asyncio.create_task(self._heartbeat())
            try:
                return await self._run()
            finally:
                heartbeat.cancel()
                await asyncio.gather(heartbeat, return_exceptions=True)
                await asyncio.to_thread(self._unregister_worker)

    def _register_worker(self, shared: bool) -> None:
        now = utcnow()
        with self.db.engine.begin() as conn:
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

    def _beat(self) -> None:
        requests = sum(self.client.fetcher.stats.requests.values())
        with self.db.engine.begin() as conn:
            conn.execute(
                update(self.db.worker)
                .where(self.db.worker.c.WORKER_ID == literal(self.worker))
                .values(
                    HEARTBEAT=utcnow(),
                    EVENTS_DONE=sum(self.summary.outcomes.values()),
                    CRATES_DONE=self.summary.crates,
                    REQUESTS=requests,
                )
            )

    async def _heartbeat(self) -> None:
        # Beat well inside the lease, so a live worker never loses what it holds.
        interval = min(self.settings.heartbeat_interval, self.settings.lease_seconds / 3)
        while True:
            await asyncio.sleep(interval)
            await asyncio.to_thread(self._beat)
            await asyncio.to_thread(renew_leases, self.db, self.worker, self.settings.lease_seconds)

    def _unregister_worker(self) -> None:
        with self.db.engine.begin() as conn:
            conn.execute(
                delete(self.db.worker).where(self.db.worker.c.WORKER_ID == literal(self.worker))
            )

    async def _run(self) -> CollectSummary:
        started = time.monotonic()
        self._total = await asyncio.to_thread(self.pending_count)
        self.licenses = await asyncio.to_thread(LicenseMatcher.load, self.db)
        if self.settings.limit is not None:
            self._total = min(self._total, self.settings.limit)
        groups: asyncio.Queue[list[Claimed] | None] = asyncio.Queue(self.settings.concurrency)
        workers = [
            asyncio.create_task(self._work(groups)) for _ in range(self.settings.concurrency)
        ]
        with self._stop.on_signals(self.settings.handle_signals):
            await self._claim_loop(groups)
            if self._stopping.is_set():
                leftover: list[bytes] = []
                while not groups.empty():
                    group = groups.get_nowait()
                    if group:
                        leftover.extend(e.id for e in group)
                        self._in_flight -= 1
                await asyncio.to_thread(release, self.db, self.worker, leftover)
                self.summary.released += len(leftover)
            for _ in workers:
                await groups.put(None)
            timeout = self.settings.grace_period if self._stopping.is_set() else None
            _done, late = await asyncio.wait(workers, timeout=timeout)
            for task in late:
                task.cancel()
        self.summary.interrupted = self._stop.requested
        self.summary.wall_seconds = time.monotonic() - started
        return self.summary

    async def _claim_loop(self, groups: asyncio.Queue[list[Claimed] | None]) -> None:
        settings = self.settings
        while not self._stopping.is_set():
            max_events: int | None = None
            if settings.limit is not None:
                max_events = settings.limit - self._claimed_events
                if max_events <= 0:
                    break
            await self._wait_out_cooldowns()
            claimed = await asyncio.to_thread(
                claim,
                self.db,
                self.worker,
                settings.claim_crates or settings.concurrency,
                settings.lease_seconds,
                set(self._failed_crates),
                max_events,
            )
            if not claimed:
                if self._in_flight == 0:
                    expiry = await asyncio.to_thread(
                        next_lease_expiry, self.db, set(self._failed_crates)
                    )
                    if expiry is None:
                        break
                    # Another worker holds unfinished events: wait for it to write them, or
                    # for its lease to run out (it died) and take them over.
                    wait = (expiry - utcnow()).total_seconds() + 1
                    await self._sleep_unless_stopped(min(2.0, max(0.2, wait)))
                    continue
                self._finished.clear()
                await self._finished.wait()
                continue
            self._claimed_events += len(claimed)
            by_crate: dict[str, list[Claimed]] = defaultdict(list)
            for event in claimed:
                by_crate[event.crate_name].append(event)
            for group in by_crate.values():
                self._in_flight += 1
                await groups.put(group)
                if self._stopping.is_set():
                    break

    async def _sleep_unless_stopped(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _wait_out_cooldowns(self) -> None:
        """After a RateLimited failure, claim nothing for that origin until its cooldown ends."""
        limiter = self.client.fetcher.limiter
        for origin in (self.client.api_url, self.client.index_url):
            remaining = await limiter.cooldown_remaining(origin_of(origin))
            if remaining > 0:
                log.info("origin %s cooling down for %.0fs", origin_of(origin), remaining)
                await self.client.fetcher.clock.sleep(remaining)

    async def _work(self, groups: asyncio.Queue[list[Claimed] | None]) -> None:
        while True:
            group = await groups.get()
            if group is None:
                return
            try:
                outcomes, versions, product = await self._collect(group)
                written = await asyncio.to_thread(self._write, group, outcomes, versions, product)
                if written:
                    for outcome in outcomes:
                        self.summary.outcomes[outcome.processed] += 1
                        if outcome.processed >= 30:
                            self._failed_crates.add(group[0].crate_name)
                    self.summary.yanked += sum(1 for v in versions if v["YANKED"])
                    self.summary.crates += 1
                else:
                    self.summary.lost_leases += 1
                    log.warning("lease lost for %s: another worker has it", group[0].name)
            finally:
                self._in_flight -= 1
                self._finished.set()
                self._report()

    def _report(self) -> None:
        if self.progress is None:
            return
        s = self.summary
        done = sum(s.outcomes.values())
        self.progress.update(
            done,
            self._total,
            {
                "crates": s.crates,
                "not-found": s.outcomes[NOT_FOUND],
                "failed": s.failed,
                "index-req": self.client.index_requests,
                "api-req": self.client.api_requests,
            },
        )

    async def _collect(
        self, group: list[Claimed]
    ) -> tuple[list[Outcome], list[dict[str, Any]], ProductRows | None]:
        real = group[0].name
        todo = group
        outcomes: list[Outcome] = []
        if self.settings.skip_existing:
            existing = await asyncio.to_thread(self._existing_versions, product_key(real))
            todo = [e for e in group if e.resync or e.version not in existing]
            outcomes = [Outcome(e, SKIPPED) for e in group if e not in todo]
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
            return outcomes + self._failures(todo, f"index: {exc}", exc), [], None
        try:
            api = await self.client.api(entry.real_name)
        except (FetchError, ValueError) as exc:
            return outcomes + self._failures(todo, f"api: {exc}", exc), [], None
        now = utcnow()
        by_version = {v.vers: v for v in entry.versions}
        ai_ids: dict[str, str | None] = {}
        if self.ai is not None and api is not None:
            for text in {v.license for v in api.versions.values() if v.license}:
                ai_ids[text] = await self.ai.classify(text)
        versions: list[dict[str, Any]] = []
        for event in todo:
            found = by_version.get(event.version)
            if found is None:
                outcomes.append(Outcome(event, NOT_FOUND, error="version not in the index"))
                continue
            versions.append(version_row(entry.real_name, found, api, now, self.licenses, ai_ids))
            outcomes.append(Outcome(event, COLLECTED, yanked=found.yanked))
        return outcomes, versions, (product_row(entry, api, now), index_state_row(entry, now))

    def _failures(self, events: list[Claimed], reason: str, exc: Exception) -> list[Outcome]:
        kind = getattr(exc, "kind", "format")
        self.summary.errors[kind] += 1
        if isinstance(exc, RateLimited):
            log.warning("rate limited: %s", exc)
        return [Outcome(e, next_failure_state(e.processed), error=reason[:2000]) for e in events]

    def _existing_versions(self, key: str) -> set[str]:
        table = self.db.version
        with self.db.engine.connect() as conn:
            rows = conn.execute(
                select(table.c.VERSION).where(
                    table.c.LANGUAGE == literal(LANGUAGE),
                    table.c.REPOSITORY == literal(REPOSITORY),
                    table.c.PRODUCT_KEY == literal(key),
                )
            )
            return {r[0] for r in rows}

    def _write(
        self,
        group: list[Claimed],
        outcomes: list[Outcome],
        versions: list[dict[str, Any]],
        product: ProductRows | None,
    ) -> bool:
        """VERSION + PRODUCT + LIST state for one crate, in one transaction, under our lease."""
        table = self.db.list
        ids = [e.id for e in group]
        now = utcnow()
        with self.db.engine.begin() as conn:
            held = select(table.c.ID).where(
                table.c.ID.in_(ids),
                table.c.CLAIMED_BY == literal(self.worker),
                table.c.CLAIMED_UNTIL >= literal(now),
            )
            if not self.db.is_sqlite:
                held = held.with_for_update()
            if len(conn.execute(held).all()) != len(ids):
                conn.rollback()
                return False
            if versions:
                upsert(conn, self.db.version, versions)
            if product is not None:
                upsert(conn, self.db.product, [product[0]])
                upsert(conn, self.db.index_state, [product[1]])
            conn.execute(
                update(table)
                .where(table.c.ID == bindparam("b_id"))
                .values(
                    PROCESSED=bindparam("b_processed"),
                    YANKED=func.coalesce(bindparam("b_yanked"), table.c.YANKED),
                    LAST_ERROR=bindparam("b_error"),
                    RESYNC=bindparam("b_resync"),
                    CLAIMED_BY=None,
                    CLAIMED_UNTIL=None,
                    LAST_UPDATED=now,
                ),
                [
                    {
                        "b_id": o.event.id,
                        "b_processed": o.processed,
                        "b_yanked": o.yanked,
                        "b_error": o.error,
                        # a failed resync stays asked for; a done one clears itself
                        "b_resync": o.event.resync
                        and (o.processed >= 30 and o.processed != GAVE_UP),
                    }
                    for o in outcomes
                ],
            )
        return True
