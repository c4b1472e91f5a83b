"""Refresh, for every registry: ask the source again about stored packages, on the work loop.

The registry says which packages a refresh asks about (`refresh_targets`) and asks one
(`refresh_one`: None or an unchanged reason when nothing changed, e.g. a 304 to a
conditional GET). A changed listing registers only its new events, flips the yanked flags
that changed (LIST and VERSION), brings PRODUCT's figures up to date and keeps what the next
refresh compares with (the registry's `save_refresh_state`), all in one transaction: the
validator is stored only with the change it implies.

A host that asks for a pause longer than the run may wait (a long Retry-After, our backoff
after 429s, a spent budget) is not a failure: that package, and every one not asked yet, is
not asked and waits (`waiting`); what it stored is unchanged, so the next refresh asks again.

The collect that follows runs whenever events are pending, not only when this refresh found
new ones: a refresh stopped in its collect phase leaves events pending whose listings were
already applied, and its rerun, finding nothing new, must still collect them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from stagecrawl.components import effective, open_database
from stagecrawl.engine.progress import ProgressReporter
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.engine.work import LoopSettings, MemoryQueue, WorkLoop
from stagecrawl.errors import FetchError, NotFound, RateLimited, UnreadableAnswer
from stagecrawl.kernel.collecting import CollectSettings
from stagecrawl.kernel.declaration import Words
from stagecrawl.kernel.failures import explain_failure
from stagecrawl.kernel.phases import CollectReport, ai_client, collect, started
from stagecrawl.kernel.registry import Listing, RefreshTarget, Registry
from stagecrawl.queue import NotAsked, Waiting, utcnow
from stagecrawl.queue.events import NewEvent
from stagecrawl.secrets import redact
from stagecrawl.settings import Settings
from stagecrawl.storage.bounds import RowSet, row_problem
from stagecrawl.storage.db import Database


@dataclass
class RefreshReport:
    words: Words
    checked: int = 0
    # unchanged, by how the registry knew (a 304: not_modified; the same content: same_content)
    unchanged: Counter[str] = field(default_factory=Counter)
    changed: list[str] = field(default_factory=list)
    new_events: int = 0
    yanked_changes: int = 0
    gone: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    # the packages not asked (a host's pause): not failures, asked again next run
    not_asked: NotAsked = field(default_factory=NotAsked)
    # package -> what of its changed listing could not be read (the readable rest is used)
    problems: dict[str, list[str]] = field(default_factory=dict)
    interrupted: bool = False
    not_checked: int = 0  # left when a stop came; the next refresh asks them
    plan: str = ""  # how the registry chose what to ask (a feed, serials), if it did

    @property
    def has_problems(self) -> bool:
        problems = self.words.problems_fail and bool(self.problems)
        return bool(self.failed or self.gone or problems or self.not_asked.reasons)

    def as_json(self) -> dict[str, object]:
        return {
            "checked": self.checked,
            "not_modified": self.unchanged["not_modified"],
            **{k: n for k, n in sorted(self.unchanged.items()) if k != "not_modified"},
            "changed": self.changed,
            "new_events": self.new_events,
            "yanked_changes": self.yanked_changes,
            "gone": sorted(self.gone),
            "failed": dict(sorted(self.failed.items())),
            "waiting": dict(sorted(self.not_asked.reasons.items())),
            self.words.problems_key: dict(sorted(self.problems.items())),
            "interrupted": self.interrupted,
            "not_checked": self.not_checked,
            **({"plan": self.plan} if self.plan else {}),
        }


async def refresh(
    db: Database,
    registry: Registry[Any],
    client: Any,
    names: Sequence[str],
    stop: GracefulStop | None = None,
    settings: LoopSettings | None = None,
) -> RefreshReport:
    """Ask the source about every stored package (or `names`), on the work loop."""
    report = RefreshReport(registry.decl.words)

    async def check(target: RefreshTarget) -> Listing | None:
        if report.not_asked.holds(target.name):  # nothing can be sent before the pause ends
            return None
        try:
            answer = await registry.refresh_one(client, target)
        except RateLimited as exc:  # not attempted: not checked, not failed
            report.not_asked.hold(target.name, exc.until or utcnow(), redact(exc.pause_text))
            return None
        except NotFound:
            report.checked += 1
            report.gone.append(target.name)
            return None
        except (FetchError, UnreadableAnswer) as exc:
            report.checked += 1
            report.failed[target.name] = explain_failure(exc)
            return None
        report.checked += 1
        if answer is None or isinstance(answer, str):
            report.unchanged[answer or "not_modified"] += 1
            return None
        extra = [RowSet(registry.tables(db).product, [registry.refresh_extra(answer)])]
        if too_long := registry.listing_problem(answer) or row_problem(extra):
            report.failed[target.name] = too_long  # this package alone, never its batch
            return None
        if answer.problems:
            report.problems[answer.name] = answer.problems
        return answer

    def commit(listings: Sequence[Listing | None]) -> None:
        for listing in listings:
            if listing is not None:
                apply_change(db, registry, listing, report)

    plan = await registry.refresh_plan(client, db, list(names))
    targets = plan.targets
    report.plan = plan.note
    queue: MemoryQueue[RefreshTarget, Listing | None] = MemoryQueue(targets, commit)
    loop = WorkLoop(queue, check, settings or LoopSettings(), stop)
    stats = await loop.run()
    report.interrupted = stats.interrupted
    report.not_checked = queue.released + len(targets) - stats.claimed
    report.changed.sort()
    whole = not (report.interrupted or report.not_checked or report.failed)
    if plan.save is not None and whole and not report.not_asked.reasons:
        # the feed's cursor moves only with the work it implies (every target applied)
        await asyncio.to_thread(db.transaction, plan.save)
    return report


def apply_change(
    db: Database, registry: Registry[Any], listing: Listing, report: RefreshReport
) -> None:
    """A changed listing: its events registered (new ones pending, YANKED refreshed on the
    others), then VERSION's yanked flags, PRODUCT's version facts and the registry's refresh
    state in one transaction."""
    counts = registry.event_list(db).register(
        NewEvent(listing.name, version, "seed", yanked=yanked)
        for version, yanked in listing.versions.items()
    )
    report.new_events += counts.new
    report.changed.append(listing.name)
    now = utcnow()
    key = registry.product_key(listing.name)
    pairs = list(listing.versions.items())
    versions, products = registry.versions(db), registry.products(db)

    def work(conn: Connection) -> int:
        flipped = versions.flip_yanked(conn, key, listing.versions, now)
        products.set_versions(conn, key, pairs, now, registry.refresh_extra(listing))
        registry.save_refresh_state(conn, db, listing)
        return flipped

    report.yanked_changes += db.transaction(work)


@dataclass
class RefreshRunReport:
    """`<registry> refresh`: the re-check, then (optionally) the collect it led to."""

    refresh: RefreshReport
    collected: CollectReport | None = None
    settings: dict[str, Any] = field(default_factory=dict)  # what the run's parts used
    requests: dict[str, int] = field(default_factory=dict)  # per lane, refresh and collect
    rate_limited: dict[str, int] = field(default_factory=dict)  # 429s per lane, the same

    @property
    def problems(self) -> bool:
        return self.refresh.has_problems or bool(self.collected and self.collected.problems)

    @property
    def waiting(self) -> Waiting | None:
        """What waits for a pause: the packages refresh did not ask, and the events the
        collect after it did not attempt (the latest time wins)."""
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
        # the whole run's, refresh and collect: said whether or not anything was collected
        document["requests"] = dict(sorted(self.requests.items()))
        document["rate_limited"] = dict(sorted(self.rate_limited.items()))
        document["settings"] = self.settings
        return document


async def run_refresh(
    registry: Registry[Any],
    s: Settings,
    stop: GracefulStop,
    names: Sequence[str],
    then_collect: bool = True,
    progress: Callable[[], ProgressReporter] | None = None,
) -> RefreshRunReport:
    async with started(registry, s) as (fetcher, client):
        database = open_database(s)
        loop = LoopSettings(concurrency=s.concurrency, grace_period=s.grace_period)
        checked = await refresh(database, registry, client, list(names), stop, loop)
        loops = {"refresh": loop}
        report = RefreshRunReport(checked)
        settings = CollectSettings.from_settings(s)
        pending = await asyncio.to_thread(registry.event_list(database).queue.pending_count)
        if then_collect and pending and not stop.requested:
            bar = progress() if progress is not None else None
            with bar or contextlib.nullcontext():
                report.collected = await collect(
                    database,
                    registry,
                    client,
                    settings,
                    stop,
                    progress=bar,
                    ai=ai_client(s, fetcher),
                )
            loops.update(report.collected.loops)
        report.settings = effective(fetcher, loops) | {"lease_seconds": settings.lease_seconds}
        report.requests = {lane: n for lane, n in fetcher.stats.requests.items() if n}
        report.rate_limited = {lane: n for lane, n in fetcher.stats.rate_limited.items() if n}
    return report
