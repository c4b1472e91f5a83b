"""Incremental refresh: ask the index whether known crates changed, with conditional GETs.

A 304 (or an unchanged body) costs nothing more and writes nothing. A changed file registers
only its new (crate, version) events, updates the yanked flags that changed (LIST and VERSION)
and the PRODUCT figures the index decides; the API is then called only for changed crates,
by the collect that follows.

A host that asks for a pause longer than the run may wait (a long Retry-After, our backoff
after 429s, a spent budget) is not a failure: that crate, and every one not asked yet, is not
asked and waits (`waiting`); its stored ETag is unchanged, so the next refresh asks again.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, select

from stagecrawl.crates.client import IndexEntry, explain, index_entry
from stagecrawl.crates.index import IndexFormatError
from stagecrawl.crates.names import index_path, product_key
from stagecrawl.crates.queue import NewEvent, register, utcnow
from stagecrawl.crates.rows import index_state_row
from stagecrawl.crates.tables import products, versions
from stagecrawl.engine.fetcher import Fetcher, Validators
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.engine.work import LoopSettings, MemoryQueue, WorkLoop
from stagecrawl.errors import FetchError, NotFound, RateLimited
from stagecrawl.queue import NotAsked
from stagecrawl.secrets import redact
from stagecrawl.settings import DEFAULTS
from stagecrawl.storage.bulk import upsert
from stagecrawl.storage.db import Database


@dataclass
class RefreshReport:
    checked: int = 0
    not_modified: int = 0
    unchanged_body: int = 0
    changed: list[str] = field(default_factory=list)
    new_events: int = 0
    yanked_changes: int = 0
    gone: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    # the crates not asked (a host's pause): not failures, asked again next run
    not_asked: NotAsked = field(default_factory=NotAsked)
    # crate -> its changed index file's unreadable lines, skipped (the readable ones are used)
    index_problems: dict[str, list[str]] = field(default_factory=dict)
    interrupted: bool = False
    not_checked: int = 0  # left when a stop came; the next refresh asks them

    def as_json(self) -> dict[str, object]:
        return {
            "checked": self.checked,
            "not_modified": self.not_modified,
            "same_content": self.unchanged_body,
            "changed": self.changed,
            "new_events": self.new_events,
            "yanked_changes": self.yanked_changes,
            "gone": sorted(self.gone),
            "failed": dict(sorted(self.failed.items())),
            "waiting": dict(sorted(self.not_asked.reasons.items())),
            "index_problems": dict(sorted(self.index_problems.items())),
            "interrupted": self.interrupted,
            "not_checked": self.not_checked,
        }


def known_crates(db: Database, names: list[str] | None) -> list[dict[str, Any]]:
    state = db.index_state
    query = select(state)
    if names:
        query = query.where(state.c.PRODUCT_KEY.in_([n.lower() for n in names]))
    with db.reading() as conn:
        return [dict(r._mapping) for r in conn.execute(query.order_by(state.c.PRODUCT_KEY))]


async def refresh(
    db: Database,
    fetcher: Fetcher,
    index_url: str,
    names: list[str] | None,
    stop: GracefulStop | None = None,
    concurrency: int = DEFAULTS.concurrency,
    grace_period: float = DEFAULTS.grace_period,
) -> RefreshReport:
    """Ask the index about every known crate (or `names`), on the work loop."""
    report = RefreshReport()
    base = index_url.rstrip("/") + "/"

    async def check(state: dict[str, Any]) -> IndexEntry | None:
        if report.not_asked.holds(state["NAME"]):  # nothing can be sent before the pause ends
            return None
        validators = Validators(state["ETAG"], state["LAST_MODIFIED"])
        try:
            result = await fetcher.get(
                base + index_path(state["NAME"]), lane="index", validators=validators
            )
        except RateLimited as exc:  # not attempted: not checked, not failed
            report.not_asked.hold(state["NAME"], exc.until or utcnow(), redact(exc.pause_text))
            return None
        except NotFound:
            report.checked += 1
            report.gone.append(state["NAME"])
            return None
        except FetchError as exc:
            report.checked += 1
            report.failed[state["NAME"]] = explain(exc)
            return None
        report.checked += 1
        if result.not_modified:
            report.not_modified += 1
            return None
        if hashlib.sha256(result.content).hexdigest() == state["CONTENT_SHA256"]:
            report.unchanged_body += 1
            return None
        try:
            entry = index_entry(result.content, result.validators, state["NAME"])
        except IndexFormatError as exc:
            report.failed[state["NAME"]] = str(exc)
            return None
        if entry.problems:
            report.index_problems[entry.real_name] = entry.problem_lines()
        return entry

    def commit(entries: Sequence[IndexEntry | None]) -> None:
        for entry in entries:
            if entry is not None:
                _apply_change(db, entry, report)

    known = await asyncio.to_thread(known_crates, db, names)
    queue: MemoryQueue[dict[str, Any], IndexEntry | None] = MemoryQueue(known, commit)
    settings = LoopSettings(concurrency=concurrency, grace_period=grace_period)
    loop = WorkLoop(queue, check, settings, stop)
    stats = await loop.run()
    report.interrupted = stats.interrupted
    report.not_checked = queue.released + len(known) - stats.claimed
    report.changed.sort()
    return report


def _apply_change(db: Database, entry: IndexEntry, report: RefreshReport) -> None:
    key = product_key(entry.real_name)
    counts = register(
        db, [NewEvent(entry.real_name, v.vers, "seed", yanked=v.yanked) for v in entry.versions]
    )
    report.new_events += counts.new
    report.changed.append(entry.real_name)
    now = utcnow()
    yanked = {v.vers: v.yanked for v in entry.versions}
    pairs = [(v.vers, v.yanked) for v in entry.versions]

    def work(conn: Connection) -> int:
        flipped = versions(db).flip_yanked(conn, key, yanked, now)
        products(db).set_versions(conn, key, pairs, now)
        upsert(conn, db.index_state, [index_state_row(entry, now)])
        return flipped

    report.yanked_changes += db.transaction(work)
