"""The LIST table as a durable work queue: register events, claim them with a lease, finish.

PROCESSED ladder (docs/schema.md): 0 pending · 1 collected · 2 skipped, already in VERSION ·
4 not found in the index · 30–34 transient failure number 1–5 · 39 given up. RESYNC=1 makes a
finished event claimable again and clears itself when the event is done.

Claims run in a short transaction: `SELECT … FOR UPDATE SKIP LOCKED` on MySQL/MariaDB and
PostgreSQL, under SQLite's `BEGIN IMMEDIATE` write lock; claimed rows get CLAIMED_BY and
CLAIMED_UNTIL (the lease). A finishing write only touches rows whose lease it still holds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Table, and_, bindparam, func, literal, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.elements import ColumnElement

from stagecrawl.crates.names import event_id, identity_key
from stagecrawl.storage.bulk import executemany
from stagecrawl.storage.db import Database, in_values

PENDING, COLLECTED, SKIPPED, NOT_FOUND = 0, 1, 2, 4
TRANSIENT_FIRST, TRANSIENT_LAST, GAVE_UP = 30, 34, 39
CLAIMABLE = (PENDING, *range(TRANSIENT_FIRST, TRANSIENT_LAST + 1))
STATE_NAMES = {
    PENDING: "pending",
    COLLECTED: "collected",
    SKIPPED: "skipped (already in VERSION)",
    NOT_FOUND: "not found in the index",
    GAVE_UP: "given up",
    **{n: f"transient failure {n - 29}" for n in range(TRANSIENT_FIRST, TRANSIENT_LAST + 1)},
}


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None, microsecond=0)


def next_failure_state(processed: int) -> int:
    """One rung up the transient ladder: 0 → 30, 30 → 31 … 34 → 39 (given up)."""
    if TRANSIENT_FIRST <= processed < TRANSIENT_LAST:
        return processed + 1
    if processed in (TRANSIENT_LAST, GAVE_UP):
        return GAVE_UP
    return TRANSIENT_FIRST


@dataclass(frozen=True)
class NewEvent:
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


# Events per registering transaction: large, so a million events cost a few hundred commits and
# executemany calls, and within SQLite's 32,766 bound parameters for the `ID IN (…)` read.
REGISTER_CHUNK = 5000


def _tags_json(tags: Iterable[str]) -> str:
    unique = sorted(set(tags))
    # most events have no tags: no encoder call
    return json.dumps(unique, separators=(",", ":"), ensure_ascii=False) if unique else "[]"


def _merge_sources(existing: str, new: str) -> str:
    return ",".join(sorted(set(filter(None, existing.split(","))) | {new}))


def register(db: Database, events: Iterable[NewEvent], resync: bool = False) -> RegisterCounts:
    """Idempotent upsert of events: merges SOURCE and REF_TAGS, refreshes YANKED, and never
    resets a finished event unless `resync`."""
    by_id: dict[bytes, NewEvent] = {}
    for ev in events:
        key = event_id(ev.name, ev.version)
        if key in by_id:  # same event twice in one call: merge its tags
            prev = by_id[key]
            tags = sorted(set(prev.ref_tags) | set(ev.ref_tags))
            ev = NewEvent(
                prev.name, prev.version, prev.source, ev.yanked, prev.resolve_kind, tuple(tags)
            )
        by_id[key] = ev
    counts = RegisterCounts()
    ids = list(by_id)
    for start in range(0, len(ids), REGISTER_CHUNK):
        chunk = ids[start : start + REGISTER_CHUNK]
        try:
            counts.add(_register_chunk(db, chunk, by_id, resync))
        except IntegrityError:
            # Another process inserted some of these events between our read and our insert:
            # read again, and this time they are merged as existing rows.
            counts.add(_register_chunk(db, chunk, by_id, resync))
    return counts


def _register_chunk(
    db: Database, chunk: list[bytes], by_id: dict[bytes, NewEvent], resync: bool
) -> RegisterCounts:
    counts = RegisterCounts()
    table = db.list
    now = utcnow()
    with db.engine.begin() as conn:
        existing = {
            row.ID: row
            for row in conn.execute(
                select(
                    table.c.ID,
                    table.c.SOURCE,
                    table.c.REF_TAGS,
                    table.c.YANKED,
                    table.c.PROCESSED,
                    table.c.RESOLVE_KIND,
                ).where(in_values(table.c.ID, chunk))
            )
        }
        inserts: list[dict[str, Any]] = []
        updates: list[dict[str, Any]] = []
        for key in chunk:
            ev = by_id[key]
            row = existing.get(key)
            if row is None:
                inserts.append(
                    {
                        "ID": key,
                        "CRATE_NAME": identity_key(ev.name),
                        "NAME": ev.name,
                        "VERSION": ev.version,
                        "SOURCE": ev.source,
                        "RESOLVE_KIND": ev.resolve_kind,
                        "REF_TAGS": _tags_json(ev.ref_tags),
                        "YANKED": ev.yanked,
                        "PROCESSED": PENDING,
                        "RESYNC": False,
                        "TIMESTAMP": now,
                        "LAST_UPDATED": now,
                    }
                )
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
            executemany(conn, ("register-insert", tuple(inserts[0])), table.insert, inserts)
            counts.new += len(inserts)
        if updates:
            executemany(
                conn,
                ("register-update",),
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


@dataclass(frozen=True)
class Claimed:
    id: bytes
    crate_name: str
    name: str
    version: str
    processed: int
    resync: bool


@dataclass
class Outcome:
    """What a worker decided for one claimed event."""

    event: Claimed
    processed: int
    yanked: bool | None = None
    error: str | None = None


def claim(
    db: Database,
    worker: str,
    crates: int,
    lease_seconds: float,
    exclude_crates: set[str] | None = None,
    max_events: int | None = None,
    after: str | None = None,
) -> list[Claimed]:
    """Claim the claimable events of up to `crates` whole crates (so a crate costs one index
    and one API request, whoever takes it), skipping rows other workers hold.

    `after` (the last crate this worker claimed) starts the search there: the window is read
    in CRATE_NAME order, and without a starting point every claim would step over all the
    finished rows before the first claimable one (a claim's cost growing with the work done).
    When nothing is claimable from there on, the search starts again from the first crate."""
    table = db.list
    now = utcnow()
    columns = (
        table.c.ID,
        table.c.CRATE_NAME,
        table.c.NAME,
        table.c.VERSION,
        table.c.PROCESSED,
        table.c.RESYNC,
    )
    until = now + timedelta(seconds=lease_seconds)

    def work(conn: Connection) -> Sequence[Any]:
        # The caller adds a failed crate to `exclude_crates` before its failure is written,
        # and the set is live: read here, once the transaction has begun, it keeps such
        # crates out of the query.
        excluded = sorted(exclude_crates.copy()) if exclude_crates else []
        claimable = and_(
            or_(table.c.PROCESSED.in_(CLAIMABLE), table.c.RESYNC.is_(True)),
            or_(table.c.CLAIMED_UNTIL.is_(None), table.c.CLAIMED_UNTIL < now),
        )
        if excluded:
            claimable = and_(claimable, table.c.CRATE_NAME.not_in(excluded))
        rows = (
            _pick_sqlite(conn, table, claimable, columns, crates, max_events, after)
            if db.is_sqlite
            else _pick_locking(conn, table, claimable, columns, crates, max_events, after)
        )
        if exclude_crates:
            # On a server a failure can be written between the query's build and its run
            # (a locking read sees it); read again now, it was added before that write. A
            # crate excluded here is left unleased, for the next run.
            rows = [r for r in rows if r[1] not in exclude_crates]
        if rows:
            conn.execute(
                update(table)
                .where(in_values(table.c.ID, [r[0] for r in rows]))
                .values(CLAIMED_BY=worker, CLAIMED_UNTIL=until)
            )
        return rows

    rows = db.transaction(work)
    return [
        Claimed(key, crate, name, version, int(processed), bool(resync))
        for key, crate, name, version, processed, resync in rows
    ]


def _pick_sqlite(
    conn: Connection,
    table: Table,
    claimable: ColumnElement[bool],
    columns: Sequence[ColumnElement[Any]],
    crates: int,
    max_events: int | None,
    after: str | None,
) -> Sequence[Any]:
    """One writer, under the write lock: the first crates in order (read as names only),
    then every claimable event of them."""
    window = (
        select(table.c.CRATE_NAME)
        .where(claimable)
        .distinct()
        .order_by(table.c.CRATE_NAME)
        .limit(crates)
    )
    windows = [window.where(table.c.CRATE_NAME >= literal(after)), window] if after else [window]
    for candidate in windows:
        names = conn.execute(candidate).scalars().all()
        if names:
            break
    else:
        return []
    query = (
        select(*columns)
        .where(claimable, table.c.CRATE_NAME.in_(names))
        .order_by(table.c.CRATE_NAME, table.c.ID)
    )
    if max_events is not None:
        query = query.limit(max_events)
    return conn.execute(query).all()


def _pick_locking(
    conn: Connection,
    table: Table,
    claimable: ColumnElement[bool],
    columns: Sequence[ColumnElement[Any]],
    crates: int,
    max_events: int | None,
    after: str | None,
) -> Sequence[Any]:
    """MySQL/MariaDB and PostgreSQL: a window of claimable rows nobody else has locked, in
    crate order, locked as it is read (FOR UPDATE SKIP LOCKED; FOR UPDATE allows no
    DISTINCT). Its first `crates` crates are taken; a full window may have cut its last crate
    short, so that one is left for the next claim, unless it is the only one: then the rest
    of its events are read too."""
    limit = crates * 64
    window = (
        select(*columns)
        .where(claimable)
        .order_by(table.c.CRATE_NAME, table.c.ID)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    windows = [window.where(table.c.CRATE_NAME >= literal(after)), window] if after else [window]
    rows: Sequence[Any] = []
    for candidate in windows:
        rows = conn.execute(candidate).all()
        if rows:
            break
    else:
        return []
    names = list(dict.fromkeys(r[1] for r in rows))
    if len(rows) == limit and len(names) > 1:
        names = names[:-1]
    elif len(rows) == limit:
        rows = conn.execute(
            select(*columns)
            .where(claimable, table.c.CRATE_NAME == literal(names[0]))
            .order_by(table.c.ID)
            .with_for_update(skip_locked=True)
        ).all()
    taken = set(names[:crates])
    picked = [r for r in rows if r[1] in taken]
    return picked if max_events is None else picked[:max_events]


def renew_leases(db: Database, worker: str, lease_seconds: float) -> int:
    """Extend every lease this worker holds (its heartbeat): only a dead worker loses them."""
    table = db.list
    now = utcnow()
    statement = (
        update(table)
        .where(table.c.CLAIMED_BY == literal(worker), table.c.CLAIMED_UNTIL >= literal(now))
        .values(CLAIMED_UNTIL=now + timedelta(seconds=lease_seconds))
    )
    return db.transaction(lambda conn: int(conn.execute(statement).rowcount or 0))


def release(db: Database, worker: str, ids: Sequence[bytes]) -> None:
    """Give claimed events back untouched (shutdown before they were processed)."""
    if not ids:
        return
    table = db.list
    statement = (
        update(table)
        .where(table.c.ID.in_(list(ids)), table.c.CLAIMED_BY == literal(worker))
        .values(CLAIMED_BY=None, CLAIMED_UNTIL=None)
    )
    db.transaction(lambda conn: conn.execute(statement))


def next_lease_expiry(db: Database, exclude_crates: set[str] | None = None) -> datetime | None:
    """When the earliest lease held by another worker on unfinished work runs out, if any.
    A worker that finds nothing to claim waits for it, so a dead worker's events are done."""
    table = db.list
    now = utcnow()
    condition = and_(
        or_(table.c.PROCESSED.in_(CLAIMABLE), table.c.RESYNC.is_(True)),
        table.c.CLAIMED_UNTIL >= literal(now),
    )
    if exclude_crates:
        condition = and_(condition, table.c.CRATE_NAME.not_in(sorted(exclude_crates)))
    with db.reading() as conn:
        value = conn.execute(select(func.min(table.c.CLAIMED_UNTIL)).where(condition)).scalar()
    return value if isinstance(value, datetime) else None


def release_stale_leases(db: Database, everyone: bool, live_window: float = 60.0) -> int:
    """Free leases nobody can still be using: on SQLite (one writer, and this is it) all of
    them; elsewhere those of workers whose heartbeat stopped `live_window` seconds ago, so a
    restarted worker does not wait out a dead one's lease."""
    table, workers = db.list, db.worker
    now = utcnow()
    condition: ColumnElement[bool] = table.c.CLAIMED_BY.is_not(None)
    if not everyone:
        live = select(workers.c.WORKER_ID).where(
            workers.c.HEARTBEAT >= literal(now - timedelta(seconds=live_window))
        )
        condition = and_(condition, table.c.CLAIMED_BY.not_in(live))
    statement = update(table).where(condition).values(CLAIMED_BY=None, CLAIMED_UNTIL=None)
    return db.transaction(lambda conn: int(conn.execute(statement).rowcount or 0))
