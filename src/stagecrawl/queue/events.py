"""The organisation's LIST table (`TB_COMP_LIB_<X>_LIST`, one row per package version event)
as a queue, and registering events (an idempotent upsert). Its ladder codes and declaration
are queue/lists.py's (re-exported here), its status reads queue/reads.py's.

The same for every registry; the registry gives its identity rules (`identity`: the name as
the group key, `event_key`: the row id of name@version).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from sqlalchemy import Connection, Select, Table, bindparam, or_, select, update
from sqlalchemy.exc import IntegrityError

from stagecrawl.queue.lists import (
    CLAIMABLE,
    COLLECTED,
    GAVE_UP,
    LIST_CODES,
    NOT_FOUND,
    PENDING,
    SKIPPED,
    STATE_NAMES,
    TRANSIENT_FIRST,
    TRANSIENT_LAST,
    list_spec,
    seed_spec,
)
from stagecrawl.queue.reads import EventListReads
from stagecrawl.queue.sql import SqlQueue
from stagecrawl.queue.table import Claimed, Lease, utcnow
from stagecrawl.storage.bulk import compile_for, execute, execute_keyed, executemany
from stagecrawl.storage.db import Database, in_keys

__all__ = [
    "CLAIMABLE",
    "COLLECTED",
    "GAVE_UP",
    "LIST_CODES",
    "NOT_FOUND",
    "PENDING",
    "SKIPPED",
    "STATE_NAMES",
    "TRANSIENT_FIRST",
    "TRANSIENT_LAST",
    "EventList",
    "NewEvent",
    "RegisterCounts",
    "list_spec",
    "seed_spec",
]


class NewEvent(NamedTuple):
    """An event to register (a named tuple: a seeder makes one per version it is told of)."""

    name: str  # real spelling
    version: str
    source: str  # "seed" or "lock"
    yanked: bool = False
    resolve_kind: str | None = None
    ref_tags: Sequence[str] = ()


@dataclass
class RegisterCounts:
    new: int = 0
    merged: int = 0
    unchanged: int = 0
    requeued: int = 0

    def add(self, other: RegisterCounts) -> None:
        self.new += other.new
        self.merged += other.merged
        self.unchanged += other.unchanged
        self.requeued += other.requeued


# Events per registering transaction. The IDs are hashes, so a chunk's rows land all over the
# primary key's B-tree: each commit writes every key page it touched, up to one per event once
# the table is large. A large chunk touches each page for many events, which keeps a chunk's
# cost from growing with the table (with 5,000, chunks at 1M events cost 2-3 × the first ones).
REGISTER_CHUNK = 50_000
# Keys per `ID IN (…)` read of the existing rows: within every backend's bound on parameters
# (SQLite's 32,766 by default, PostgreSQL's 65,535).
READ_CHUNK = 10_000
# The columns of a new row, in the order `_register_chunk` builds them: the table's (the
# rows go to the driver as they are, `storage.bulk`).
# The key column's name is the registry's (`group`); the others are every LIST's.
_INSERTED_AFTER_KEY = ("NAME", "VERSION", "SOURCE", "RESOLVE_KIND", "REF_TAGS", "YANKED",
                       "PROCESSED", "RESYNC", "CLAIMED_BY", "CLAIMED_UNTIL", "CLAIMED_AT",
                       "TIMESTAMP", "LAST_UPDATED")  # fmt: skip


def _tags_json(tags: Iterable[str]) -> str:
    if not tags:  # most events have none (every seeded one): no set, no sort
        return "[]"
    unique = sorted(set(tags))
    # most events have no tags: no encoder call
    return json.dumps(unique, separators=(",", ":"), ensure_ascii=False) if unique else "[]"


def _merge_sources(existing: str, new: str) -> str:
    return ",".join(sorted(set(filter(None, existing.split(","))) | {new}))


class EventList(EventListReads):
    """One registry's LIST in one database: the queue, and registering events into it (its
    status reads, `sources`, are EventListReads')."""

    queue: SqlQueue

    def __init__(
        self,
        db: Database,
        table: Table,
        identity: Callable[[str], str],
        event_key: Callable[[str, str], bytes],
        group: str = "CRATE_NAME",
    ) -> None:
        """`group`: the table's key column (the registry's name for it)."""
        super().__init__(SqlQueue(db, list_spec(table.name, group), table))
        self.db = db
        self.table = table
        self.identity = identity
        self.event_key = event_key
        self._inserted = ("ID", group, *_INSERTED_AFTER_KEY)

    def register(self, events: Iterable[NewEvent], resync: bool = False) -> RegisterCounts:
        """Idempotent upsert of events: merges SOURCE and REF_TAGS, refreshes YANKED, and never
        resets a finished event unless `resync`."""
        by_id = self._by_id(events)
        counts = RegisterCounts()
        ids = list(by_id)
        for start in range(0, len(ids), REGISTER_CHUNK):
            chunk = ids[start : start + REGISTER_CHUNK]

            def work(conn: Connection, chunk: list[bytes] = chunk) -> RegisterCounts:
                return self._register_chunk(conn, chunk, by_id, resync)

            try:
                counts.add(self.db.transaction(work))
            except IntegrityError:
                # Another process inserted some of these events between our read and our
                # insert: read again, and this time they are merged as existing rows.
                counts.add(self.db.transaction(work))
        return counts

    def register_on(
        self,
        conn: Connection,
        events: Iterable[NewEvent],
        resync: bool = False,
        lease: Lease | None = None,
    ) -> RegisterCounts:
        """`register` inside the caller's transaction (all of it or nothing). Only where the
        transaction holds the database's one write lock from its start (SQLite's BEGIN
        IMMEDIATE): elsewhere another process may insert an event between the read and the
        insert, and only `register`, in transactions of its own, reads again and merges.
        With a `lease`, the new events are registered leased (see `Lease`)."""
        by_id = self._by_id(events)
        counts = RegisterCounts()
        ids = list(by_id)
        for start in range(0, len(ids), REGISTER_CHUNK):
            chunk = ids[start : start + REGISTER_CHUNK]
            counts.add(self._register_chunk(conn, chunk, by_id, resync, lease))
        return counts

    def _existing_read(self) -> Select[Any]:
        """The rows of the keys `KEYS` a registration merges into (`execute_keyed`)."""
        c = self.table.c
        return select(c.ID, c.SOURCE, c.REF_TAGS, c.YANKED, c.PROCESSED, c.RESOLVE_KIND).where(
            in_keys(c.ID)
        )

    def _by_id(self, events: Iterable[NewEvent]) -> dict[bytes, NewEvent]:
        """The events by row id; one event named twice is one, with both its tag lists."""
        by_id: dict[bytes, NewEvent] = {}
        for ev in events:
            key = self.event_key(ev.name, ev.version)
            if key in by_id:  # same event twice in one call: merge its tags
                prev = by_id[key]
                tags = sorted(set(prev.ref_tags) | set(ev.ref_tags))
                ev = NewEvent(
                    prev.name, prev.version, prev.source, ev.yanked, prev.resolve_kind, tuple(tags)
                )
            by_id[key] = ev
        return by_id

    def _register_chunk(
        self,
        conn: Connection,
        chunk: list[bytes],
        by_id: dict[bytes, NewEvent],
        resync: bool,
        lease: Lease | None = None,
    ) -> RegisterCounts:
        counts = RegisterCounts()
        table = self.table
        now = utcnow()
        existing = {
            row.ID: row
            for start in range(0, len(chunk), READ_CHUNK)
            for row in execute_keyed(
                conn,
                ("register-read", table),
                self._existing_read,
                chunk[start : start + READ_CHUNK],
                {},
            )
        }
        # New rows as tuples in `self._inserted` order, built in one pass (no dict a row): a
        # seeder registers every version it is told of.
        inserts: list[tuple[Any, ...]] = []
        updates: list[dict[str, Any]] = []
        identity = self.identity
        holder: str | None = None
        until: datetime | None = None
        if lease is not None:
            holder, until = lease.worker, now + timedelta(seconds=lease.seconds)
        for key in chunk:
            ev = by_id[key]
            row = existing.get(key)
            if row is None:
                group = identity(ev.name)
                leased = lease is not None and group not in lease.exclude
                tags = _tags_json(ev.ref_tags)
                inserts.append(
                    (key, group, ev.name, ev.version, ev.source, ev.resolve_kind, tags,
                     ev.yanked, PENDING, False, holder if leased else None,
                     until if leased else None, now if leased else None, now, now)
                )  # fmt: skip
                if leased:
                    assert lease is not None
                    lease.rows.append(Claimed(key, group, PENDING, False, ev.name, ev.version))
                continue
            source = _merge_sources(row.SOURCE, ev.source)
            old_tags = row.REF_TAGS or "[]"
            tags_json = (
                old_tags
                if old_tags == "[]" and not ev.ref_tags
                else _tags_json([*json.loads(old_tags), *ev.ref_tags])
            )
            kind = row.RESOLVE_KIND or ev.resolve_kind
            requeue = resync and row.PROCESSED not in CLAIMABLE
            changed = (
                source != row.SOURCE
                or tags_json != row.REF_TAGS
                or bool(row.YANKED) != ev.yanked
                or kind != row.RESOLVE_KIND
            )
            if not changed and not requeue:
                counts.unchanged += 1
                continue
            counts.merged += int(changed)
            counts.requeued += int(requeue)
            updates.append(
                {
                    "b_id": key,
                    "SOURCE": source,
                    "REF_TAGS": tags_json,
                    "YANKED": ev.yanked,
                    "RESOLVE_KIND": kind,
                    "RESYNC": bool(requeue),
                    "LAST_UPDATED": now,
                }
            )
        if inserts:
            compiled = compile_for(
                conn.dialect, ("register-insert", table), table.insert, self._inserted
            )
            execute(conn, compiled, inserts)
            counts.new += len(inserts)
        if updates:
            executemany(
                conn,
                ("register-update", table),
                lambda: (
                    update(table)
                    .where(table.c.ID == bindparam("b_id"))
                    .values(
                        SOURCE=bindparam("SOURCE"),
                        REF_TAGS=bindparam("REF_TAGS"),
                        YANKED=bindparam("YANKED"),
                        RESOLVE_KIND=bindparam("RESOLVE_KIND"),
                        RESYNC=or_(table.c.RESYNC, bindparam("RESYNC")),
                        LAST_UPDATED=bindparam("LAST_UPDATED"),
                    )
                ),
                updates,
            )
        return counts
