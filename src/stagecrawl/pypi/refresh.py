"""`pypi refresh`: ask the Simple API again about every stored project (or the names given)
with a conditional GET (the stored ETag): 304 costs nothing; a changed page registers its new
versions as LIST events (collected next), flips YANKED where a yank was made or reversed
(VERSION and LIST), and brings PRODUCT's LATEST_VERSION, COMP_STATUS, VERSION_COUNT, ETAG and
LAST_SERIAL (`_last-serial` / `X-PyPI-Last-Serial`) up to date.

A host that asks for a pause longer than the run may wait (a long Retry-After, our backoff
after 429s, a spent budget) is not a failure: the project, and every one not asked yet, is
not attempted and waits (`waiting`, `pause`); its stored ETag is unchanged, so the next
refresh asks again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection

from stagecrawl.engine.fetcher import Validators
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.errors import FetchError, NotFound, RateLimited
from stagecrawl.pypi import tables
from stagecrawl.pypi.client import PyPIClient, SimplePage
from stagecrawl.pypi.names import normalize
from stagecrawl.pypi.simple import SimpleFormatError
from stagecrawl.pypi.work import explain, pause
from stagecrawl.queue import NotAsked, Waiting, utcnow
from stagecrawl.queue.events import NewEvent
from stagecrawl.storage.db import Database

log = logging.getLogger("stagecrawl.pypi")


@dataclass
class RefreshReport:
    checked: int = 0
    unchanged: int = 0  # 304
    changed: int = 0
    new_events: int = 0
    yank_flips: int = 0
    not_found: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    # the projects not asked (a host's pause): not failures, asked again next run
    not_asked: NotAsked = field(default_factory=NotAsked)
    interrupted: bool = False

    @property
    def problems(self) -> bool:
        return bool(self.not_found or self.failed or self.not_asked.reasons)

    @property
    def pause(self) -> Waiting | None:
        """The projects not asked, as the queues say what waits: how many, until, why."""
        return self.not_asked.waiting

    def as_json(self) -> dict[str, Any]:
        return {
            "checked": self.checked,
            "unchanged": self.unchanged,
            "changed": self.changed,
            "new_events": self.new_events,
            "yank_flips": self.yank_flips,
            "not_found": sorted(self.not_found),
            "failed": dict(sorted(self.failed.items())),
            "waiting": dict(sorted(self.not_asked.reasons.items())),
            "interrupted": self.interrupted,
        }


def _apply(db: Database, page: SimplePage, report: RefreshReport) -> None:
    """A changed page: its events registered (new ones pending, YANKED refreshed on the
    others), then VERSION's yanked flags and PRODUCT's version facts in one transaction."""
    project = page.project
    listed = {r.version: r.yanked for r in project.releases}
    counts = tables.event_list(db).register(
        NewEvent(project.name, version, "seed", yanked=yanked) for version, yanked in listed.items()
    )
    report.new_events += counts.new
    versions, products = tables.versions(db), tables.products(db)
    now = utcnow()

    def write(conn: Connection) -> None:
        report.yank_flips += versions.flip_yanked(conn, project.name, listed, now)
        extra = {"ETAG": page.validators.etag, "LAST_SERIAL": page.last_serial}
        products.set_versions(conn, project.name, list(listed.items()), now, extra)

    db.transaction(write)


async def refresh(
    db: Database,
    client: PyPIClient,
    names: Sequence[str],
    stop: GracefulStop,
    concurrency: int = 8,
) -> RefreshReport:
    """Re-check the stored projects (all of them, or `names`)."""
    products = tables.products(db)
    with db.reading() as conn:
        etags: dict[str, Any] = products.column(conn, "ETAG")
    wanted = [normalize(n) for n in names] if names else sorted(etags)
    report = RefreshReport()
    gate = asyncio.Semaphore(concurrency)

    async def one(name: str) -> None:
        async with gate:
            if stop.requested:
                report.interrupted = True
                return
            if report.not_asked.holds(name):  # nothing can be sent before the pause ends
                return
            etag = etags.get(name)
            try:
                page = await client.simple(name, Validators(etag=etag) if etag else None)
            except RateLimited as exc:  # not attempted: not checked, not failed
                reason, until = pause(exc)
                report.not_asked.hold(name, until, reason)
                return
            except NotFound:
                report.checked += 1
                report.not_found.append(name)
                return
            except (FetchError, SimpleFormatError) as exc:
                report.checked += 1
                report.failed[name] = f"index: {explain(exc)}"
                log.warning("refreshing %s failed: %s", name, report.failed[name])
                return
            report.checked += 1
            if page is None:
                report.unchanged += 1
                return
            report.changed += 1
            await asyncio.to_thread(_apply, db, page, report)

    await asyncio.gather(*(one(name) for name in wanted))
    return report
