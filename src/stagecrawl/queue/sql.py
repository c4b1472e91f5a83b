"""A durable work queue over any declared SQL table: claim with a lease, renew, release, lease
expiry, complete (with the registry's own rows, in the same transaction), and the ladder.

Claims run in a short transaction: `SELECT … FOR UPDATE SKIP LOCKED` on MySQL/MariaDB and
PostgreSQL, under SQLite's `BEGIN IMMEDIATE` write lock (one writer); claimed rows get the
holder and the lease's end. A finishing write only touches rows whose lease it still holds.
Every writing transaction goes through `Database.transaction` (re-done whole after a deadlock).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Hashable, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from sqlalchemy import (
    Connection,
    Select,
    Table,
    and_,
    bindparam,
    false,
    func,
    literal,
    or_,
    select,
    true,
    union,
    update,
)
from sqlalchemy.sql.elements import BindParameter, ColumnElement

from stagecrawl.pauses import Waiting
from stagecrawl.queue.reads import QueueReads, snapshot
from stagecrawl.queue.table import Claimed, Outcome, QueueTable, utcnow
from stagecrawl.storage.bulk import execute_keyed
from stagecrawl.storage.db import Database, in_keys, in_values
from stagecrawl.storage.reads import EngineReads

# Rows per `UPDATE … WHERE id IN (…)` (within every backend's bound on parameters).
IN_CHUNK = 1000


def waiting_on(queues: Sequence[SqlQueue]) -> Waiting | None:
    """What waits on these queues of one database (a registry's seed queue and its LIST),
    together: the rows added up, the latest time and its reason (the one a rerun waits for)."""
    if not queues:
        return None
    with queues[0].db.reads() as r:
        return Waiting.merge([q.waiting(r) for q in queues])


class SqlQueue(QueueReads):
    """One queue table of one database: claims, leases and outcomes (its status reads are
    QueueReads', one portable SQL text each)."""

    def __init__(self, db: Database, spec: QueueTable, table: Table | None = None) -> None:
        """`table`: the declared table named `spec.table`; by default the database's own
        (`Database.metadata`)."""
        super().__init__(spec)
        self.db = db
        self.table = db.metadata.tables[spec.table] if table is None else table
        assert self.table.name == spec.table, (self.table.name, spec.table)
        self.indexed_claims = self._has_claim_indexes()
        # SQLite's claim reads, built once per shape (see `_claim_reads`)
        self._claim_reads: dict[tuple[bool, bool, bool], Select[Any]] = {}

    def _has_claim_indexes(self) -> bool:
        """The table has an index led by (state, group), and one led by (requeue, group) if it
        declares a requeue column: then a claim reads each claimable rung, and the requeued
        rows, in group order straight from these indexes (`claim`), and its cost does not grow
        with the finished rows. Without them a claim is one query over the group order."""
        s = self.spec
        leads = {tuple(c.name for c in index.columns)[:2] for index in self.table.indexes}
        if (s.state, s.group) not in leads:
            return False
        return s.requeue is None or (s.requeue, s.group) in leads

    def _c(self, name: str) -> ColumnElement[Any]:
        return self.table.c[name]

    # -- what is claimable ------------------------------------------------------------------
    def _wanted(self) -> ColumnElement[bool]:
        """Rows on the claimable rungs, or finished ones asked again (requeue)."""
        s = self.spec
        wanted: ColumnElement[bool] = self._c(s.state).in_(self.codes.claimable)
        if s.requeue is not None:
            wanted = or_(wanted, self._c(s.requeue).is_(True))
        return wanted

    def _arms(self) -> list[ColumnElement[bool]]:
        """`_wanted` as conditions each index can serve in group order: one per claimable rung
        (`state = code`), and the requeued rows (`requeue = true`; they may be on a claimable
        rung too: the same row from two arms is read once, see `_merge`)."""
        s = self.spec
        arms: list[ColumnElement[bool]] = [
            self._c(s.state) == code for code in self.codes.claimable
        ]
        if s.requeue is not None:
            arms.append(self._c(s.requeue) == true())
        return arms

    def _claimable(
        self, now: datetime, exclude: Collection[str], wanted: ColumnElement[bool] | None = None
    ) -> ColumnElement[bool]:
        s = self.spec
        condition = self._wanted() if wanted is None else wanted
        if s.not_before is not None:
            not_before = self._c(s.not_before)
            condition = and_(condition, or_(not_before.is_(None), not_before <= now))
        if s.leased:
            assert s.until is not None
            until = self._c(s.until)
            condition = and_(condition, or_(until.is_(None), until < now))
        if exclude:
            condition = and_(condition, self._c(s.group).not_in(sorted(exclude)))
        return condition

    def _columns(self) -> tuple[ColumnElement[Any], ...]:
        s = self.spec
        return (
            self._c(s.id),
            self._c(s.group),
            self._c(s.state),
            self._c(s.requeue) if s.requeue else false(),
            self._c(s.name) if s.name else self._c(s.group),
            self._c(s.version) if s.version else literal(""),
        )

    @staticmethod
    def _claimed(rows: Sequence[Any]) -> list[Claimed]:
        return [
            Claimed(key, str(group), int(state), bool(requeue), str(name), str(version))
            for key, group, state, requeue, name, version in rows
        ]

    # -- claims -----------------------------------------------------------------------------
    def claim(
        self,
        worker: str,
        groups: int,
        lease_seconds: float,
        exclude: Collection[str] | None = None,
        max_rows: int | None = None,
        after: str | None = None,
    ) -> list[Claimed]:
        """Lease the claimable rows of up to `groups` whole groups, skipping rows other workers
        hold, in group order.

        `after` (the last group this worker claimed) starts the search there: without a
        starting point every claim would step over all the finished rows before the first
        claimable one (a claim's cost growing with the work done). When nothing is claimable
        from there on, the search starts again from the first group. `exclude` (the groups
        that failed in this run, `ThisRun`) is read once the transaction has begun, and again
        after the rows are read: a failure written meanwhile keeps its group out."""

        def work(conn: Connection) -> list[Claimed]:
            return self.claim_on(conn, worker, groups, lease_seconds, exclude, max_rows, after)

        return self.db.transaction(work)

    def claim_on(
        self,
        conn: Connection,
        worker: str,
        groups: int,
        lease_seconds: float,
        exclude: Collection[str] | None = None,
        max_rows: int | None = None,
        after: str | None = None,
    ) -> list[Claimed]:
        """`claim` inside the caller's writing transaction (leased when it commits)."""
        s = self.spec
        assert s.holder and s.until, f"{self.table.name} has no lease columns"
        now = utcnow()
        until = now + timedelta(seconds=lease_seconds)
        excluded = snapshot(exclude)
        if self.db.is_sqlite:
            rows = self._pick_sqlite(conn, now, excluded, groups, max_rows, after)
        else:
            claimable = self._claimable(now, excluded)
            arms = self._arm_conditions(now, excluded)
            rows = self._pick_locking(conn, claimable, arms, groups, max_rows, after)
        if exclude:
            rows = [r for r in rows if r[1] not in exclude]
        if rows:
            values: dict[str, Any] = {s.holder: worker, s.until: until}
            if s.claimed_at:
                values[s.claimed_at] = now
            shape = ("lease", self.table, tuple(values))
            bound = {f"v_{k}": v for k, v in values.items()}
            keys = [r[0] for r in rows]
            for start in range(0, len(keys), IN_CHUNK):
                chunk = keys[start : start + IN_CHUNK]
                execute_keyed(conn, shape, lambda: self._set_keyed(values), chunk, bound)
        return self._claimed(rows)

    def _set_keyed(self, values: dict[str, Any]) -> Any:
        """UPDATE of the rows whose ids are `KEYS` (`execute_keyed`), each column of `values`
        from its bind `v_<column>`."""
        return (
            update(self.table)
            .where(in_keys(self._c(self.spec.id)))
            .values({k: bindparam(f"v_{k}") for k in values})
        )

    def peek(
        self, limit: int, exclude: Collection[str] | None = None, after: str | None = None
    ) -> list[Claimed]:
        """The first `limit` claimable rows in group order, read without a lease (a queue
        without lease columns: its caller keeps what it holds out with `exclude`); from
        `after` (the last group its caller read: held or done, so not read again) on, from
        the start when none is found there (`_read_arms`, as a claim reads).

        The cursor is why a long run's reads cost the same at its end as at its start: the
        seed table has no index on its state, and names are seeded in name order, so a read
        from the start walked past every name already done (10,000 seeds, 9,000 done:
        1.5 ms a read; 100,000: 11.7 ms, where the cursor reads a handful of rows)."""
        group = self._c(self.spec.group)
        claimable = self._claimable(utcnow(), snapshot(exclude))

        def window(condition: ColumnElement[bool]) -> Select[Any]:
            return select(*self._columns()).where(condition).order_by(group).limit(limit)

        # db.read: redone whole after a lost connection, within the outage bound
        rows = self.db.read(lambda conn: self._read_arms(conn, window, [claimable], after)[0])
        return self._claimed(rows)

    def _arm_conditions(
        self, now: datetime, excluded: Collection[str]
    ) -> list[ColumnElement[bool]]:
        """What a claim reads, one query each: the claimable rows through the claim indexes
        (`indexed_claims`: one arm per rung and the requeued rows), else in one."""
        if not self.indexed_claims:
            return [self._claimable(now, excluded)]
        return [self._claimable(now, excluded, arm) for arm in self._arms()]

    def _read_arms(
        self,
        conn: Connection,
        window: Callable[[ColumnElement[bool]], Select[Any]],
        arms: Sequence[ColumnElement[bool]],
        after: str | None,
    ) -> list[Sequence[Any]]:
        """Each arm's window, from `after` on; when that finds nothing, from the start."""
        group = self._c(self.spec.group)
        parts: list[Sequence[Any]] = []
        for start in [after, None] if after else [None]:
            parts = [
                conn.execute(
                    window(arm if start is None else and_(arm, group >= literal(start)))
                ).all()
                for arm in arms
            ]
            if any(parts):
                break
        return parts

    def _pick_sqlite(
        self,
        conn: Connection,
        now: datetime,
        excluded: list[str],
        groups: int,
        max_rows: int | None,
        after: str | None,
    ) -> Sequence[Any]:
        """One writer, under the write lock: every claimable row of the first `groups` groups
        in order from `after` (from the first group when none is claimable from there on), in
        one statement (`_claim_reads`)."""
        values: dict[str, Any] = {"claim_now": now, "claim_groups": groups}
        if excluded:
            values["claim_exclude"] = excluded
        if max_rows is not None:
            values["claim_rows"] = max_rows
        for start in [after, None] if after else [None]:
            query = self._claim_read(start is not None, bool(excluded), max_rows is not None)
            if start is not None:
                values["claim_after"] = start
            rows = conn.execute(query, values).all()
            if rows:
                return rows
        return []

    def _claim_read(self, after: bool, exclude: bool, max_rows: bool) -> Select[Any]:
        """SQLite's claim read, built once per shape and then only bound (building and
        compiling it again for every claim cost more than running it):

            SELECT <row> FROM t WHERE <claimable> AND grp IN (
                SELECT grp FROM (SELECT DISTINCT grp FROM t WHERE <arm 1> [AND grp >= :after]
                                 ORDER BY grp LIMIT :groups)
                UNION … one such window per arm (`_arms`: each read through its own index)
                ORDER BY grp LIMIT :groups)
            ORDER BY grp, id [LIMIT :rows]

        The windows' union ordered by the database (its collation) is the first `groups`
        groups of all arms, each among the first `groups` of its own arm."""
        shape = (after, exclude, max_rows)
        query = self._claim_reads.get(shape)
        if query is not None:
            return query
        s = self.spec
        group, key = self._c(s.group), self._c(s.id)
        now: BindParameter[Any] = bindparam("claim_now")
        kept_out: BindParameter[Any] | None = (
            bindparam("claim_exclude", expanding=True) if exclude else None
        )

        def claimable(wanted: ColumnElement[bool]) -> ColumnElement[bool]:
            condition = wanted
            if s.not_before is not None:
                not_before = self._c(s.not_before)
                condition = and_(condition, or_(not_before.is_(None), not_before <= now))
            if s.leased:
                assert s.until is not None
                until = self._c(s.until)
                condition = and_(condition, or_(until.is_(None), until < now))
            if kept_out is not None:
                condition = and_(condition, group.not_in(kept_out))
            return condition

        arms = self._arms() if self.indexed_claims else [self._wanted()]
        windows: list[Select[Any]] = []
        for arm in arms:
            condition = claimable(arm)
            if after:
                condition = and_(condition, group >= bindparam("claim_after"))
            window = (
                select(group)
                .where(condition)
                .distinct()
                .order_by(group)
                .limit(bindparam("claim_groups"))
                .subquery()
            )
            windows.append(select(window.c[0]))
        first = union(*windows).subquery() if len(windows) > 1 else windows[0].subquery()
        names = select(first.c[0]).order_by(first.c[0]).limit(bindparam("claim_groups"))
        query = (
            select(*self._columns())
            .where(claimable(self._wanted()), group.in_(names))
            .order_by(group, key)
        )
        if max_rows:
            query = query.limit(bindparam("claim_rows"))
        self._claim_reads[shape] = query
        return query

    def _pick_locking(
        self,
        conn: Connection,
        claimable: ColumnElement[bool],
        arms: Sequence[ColumnElement[bool]],
        groups: int,
        max_rows: int | None,
        after: str | None,
    ) -> Sequence[Any]:
        """MySQL/MariaDB and PostgreSQL: a window of claimable rows nobody else has locked, in
        group order, locked as it is read (FOR UPDATE SKIP LOCKED; FOR UPDATE allows no
        DISTINCT), one per arm, merged. Its first `groups` groups are taken; a full window
        may have cut its last group short, so that one is left for the next claim, unless it
        is the only one: then the rest of its rows are read too."""
        group, key = self._c(self.spec.group), self._c(self.spec.id)
        limit = groups * 64
        parts = self._read_arms(
            conn,
            lambda arm: (
                select(*self._columns())
                .where(arm)
                .order_by(group, key)
                .limit(limit)
                .with_for_update(skip_locked=True)
            ),
            arms,
            after,
        )
        if not any(parts):
            return []
        rows, cut = self._merge(conn, parts, limit)
        names = list(dict.fromkeys(r[1] for r in rows))
        if cut and len(names) > 1:
            names = names[:-1]
        elif cut:
            rows = conn.execute(
                select(*self._columns())
                .where(claimable, group == literal(names[0]))
                .order_by(key)
                .with_for_update(skip_locked=True)
            ).all()
        taken = set(names[:groups])
        picked = [r for r in rows if r[1] in taken]
        return picked if max_rows is None else picked[:max_rows]

    def _merge(
        self, conn: Connection, parts: Sequence[Sequence[Any]], limit: int
    ) -> tuple[Sequence[Any], bool]:
        """The arms' windows as one, in (group, id) order, cut to `limit` rows when any arm
        filled its window (then the rows past the shortest full arm's end are unknown, and
        the last group may be cut short: the second value). Every group before the last one
        is whole: each full arm reaches at least that far."""
        found = [part for part in parts if part]
        full = any(len(part) >= limit for part in found)
        if len(found) == 1:
            return found[0], full
        by_id: dict[Any, Any] = {}
        for part in found:
            for row in part:
                by_id.setdefault(row[0], row)  # a requeued row on a claimable rung: once
        # Ordered by the database (its collation, not Python's), read from rows this
        # transaction has locked already.
        key, group = self._c(self.spec.id), self._c(self.spec.group)
        order = conn.execute(
            select(key).where(in_values(key, list(by_id))).order_by(group, key)
        ).scalars()
        rows = [by_id[k] for k in order]
        return (rows[:limit], True) if full else (rows, False)

    # -- leases -----------------------------------------------------------------------------
    def renew(self, worker: str, lease_seconds: float) -> int:
        """Extend every live lease `worker` holds (its heartbeat): only a dead worker loses
        them."""
        s = self.spec
        assert s.holder and s.until
        now = utcnow()
        statement = (
            update(self.table)
            .where(self._c(s.holder) == literal(worker), self._c(s.until) >= literal(now))
            .values({s.until: now + timedelta(seconds=lease_seconds)})
        )
        return self.db.transaction(lambda conn: int(conn.execute(statement).rowcount or 0))

    def release(self, worker: str, ids: Sequence[Hashable]) -> None:
        """Give claimed rows back untouched (a stop before they were processed)."""
        s = self.spec
        if not ids or not s.leased:
            return
        assert s.holder and s.until
        statement = (
            update(self.table)
            .where(in_values(self._c(s.id), list(ids)), self._c(s.holder) == literal(worker))
            .values(self._no_lease())
        )
        self.db.transaction(lambda conn: conn.execute(statement))

    def _no_lease(self) -> dict[str, Any]:
        s = self.spec
        assert s.holder and s.until
        values: dict[str, Any] = {s.holder: None, s.until: None}
        if s.claimed_at:
            values[s.claimed_at] = None
        return values

    def release_held(self, conn: Connection, worker: str) -> None:
        """Every lease `worker` holds goes back (inside the caller's transaction)."""
        s = self.spec
        if s.holder and s.until:
            conn.execute(
                update(self.table)
                .where(self._c(s.holder) == literal(worker))
                .values(self._no_lease())
            )

    def release_worker(self, conn: Connection, worker: str) -> int:
        """Free every lease `worker` holds (a dead worker's, inside the caller's transaction);
        returns how many."""
        s = self.spec
        if not (s.holder and s.until):
            return 0
        statement = (
            update(self.table).where(self._c(s.holder) == literal(worker)).values(self._no_lease())
        )
        return int(conn.execute(statement).rowcount or 0)

    def next_lease_expiry(self, exclude: Collection[str] | None = None) -> datetime | None:
        """When the earliest lease held on unfinished work runs out, if any. A worker that
        finds nothing to claim waits for it, so a dead worker's rows are done."""
        s = self.spec
        if not s.until:
            return None
        until = self._c(s.until)
        condition = and_(self._wanted(), until >= literal(utcnow()))
        if exclude:
            condition = and_(condition, self._c(s.group).not_in(snapshot(exclude)))
        query = select(func.min(until)).where(condition)
        value = self.db.read(lambda conn: conn.execute(query).scalar())  # redone if lost
        return value if isinstance(value, datetime) else None

    def release_stale(self, live: ColumnElement[Any] | None) -> int:
        """Free the leases of holders not in `live` (a subquery of live worker ids), or every
        lease when `live` is None (SQLite: one writer, and this is it)."""
        s = self.spec
        if not (s.holder and s.until):
            return 0
        holder = self._c(s.holder)
        condition: ColumnElement[bool] = holder.is_not(None)
        if live is not None:
            condition = and_(condition, holder.not_in(live))
        statement = update(self.table).where(condition).values(self._no_lease())
        return self.db.transaction(lambda conn: int(conn.execute(statement).rowcount or 0))

    # -- finishing --------------------------------------------------------------------------
    def complete(
        self,
        worker: str | None,
        units: Sequence[Sequence[Outcome]],
        write: Callable[[Connection, list[int]], None] | None = None,
        ids: Sequence[Sequence[Hashable]] | None = None,
    ) -> list[bool]:
        """Finish a batch of units in one transaction: for each unit whose every row this
        worker still leases (`ids`, default its outcomes' rows), `write(conn, kept)` writes
        the registry's own rows for the kept units' indexes, and their outcomes are recorded.
        Returns, per unit, whether it was kept (False: the lease went to another worker,
        which writes it). Re-done whole after a deadlock (`Database.transaction`)."""
        keys = ids if ids is not None else [[o.event.id for o in unit] for unit in units]

        def work(conn: Connection) -> list[bool]:
            if self.spec.leased and worker is not None:
                held = self.held(conn, worker, [k for unit in keys for k in unit])
                kept = [all(k in held for k in unit) for unit in keys]
            else:
                kept = [True] * len(units)
            indexes = [n for n, ok in enumerate(kept) if ok]
            if write is not None:
                write(conn, indexes)
            self.finish(conn, [o for n in indexes for o in units[n]])
            return kept

        return self.db.transaction(work)

    def held(self, conn: Connection, worker: str, ids: Sequence[Hashable]) -> set[Hashable]:
        """Which of `ids` `worker` still leases (locked on a server until the commit)."""
        s = self.spec
        assert s.holder and s.until
        if not ids:
            return set()

        holder, until = self._c(s.holder), self._c(s.until)

        def build() -> Select[Any]:
            query = select(self._c(s.id)).where(
                in_keys(self._c(s.id)),
                holder == bindparam("h_worker"),
                until >= bindparam("h_now"),
            )
            return query if self.db.is_sqlite else query.with_for_update()

        values = {"h_worker": worker, "h_now": utcnow()}
        held: set[Hashable] = set()
        for start in range(0, len(ids), IN_CHUNK):
            chunk = ids[start : start + IN_CHUNK]
            held.update(execute_keyed(conn, ("held", self.table), build, chunk, values).scalars())
        return held

    def finish(self, conn: Connection, outcomes: Sequence[Outcome]) -> None:
        """Record outcomes (inside the caller's transaction): the state, the reason, the
        outcome's own values; the lease is cleared; a requeue clears itself once the row is
        done, and stays asked while the row fails.

        Outcomes with the same values (nearly all: collected, yanked or not) are one UPDATE
        … WHERE id IN (…): pymysql's executemany sends an UPDATE row by row, one round trip
        each, and on every backend a few statements beat thousands of rows' worth."""
        s = self.spec
        now = utcnow()
        failing = self.codes.failing
        same: dict[tuple[Any, ...], list[Hashable]] = defaultdict(list)
        for o in outcomes:
            # A requeue stays asked while the row fails, or waits without an attempt.
            requeue = o.event.requeue and (o.state in failing or o.not_before is not None)
            same[(o.state, o.error, requeue, o.values, o.not_before)].append(o.event.id)
        for (state, error, requeue, extra, not_before), same_ids in same.items():
            values: dict[str, Any] = {s.state: state, s.reason: error, s.updated: now}
            if s.requeue:
                values[s.requeue] = requeue
            if s.not_before:
                values[s.not_before] = not_before  # cleared by any other outcome
            if s.holder and s.until:
                values.update(self._no_lease())
            values.update(extra)
            shape = ("finish", self.table, tuple(values))
            bound = {f"v_{k}": v for k, v in values.items()}
            for start in range(0, len(same_ids), IN_CHUNK):
                chunk = same_ids[start : start + IN_CHUNK]
                execute_keyed(conn, shape, partial(self._set_keyed, values), chunk, bound)

    # -- reading ----------------------------------------------------------------------------
    def claimable_now(self, exclude: Collection[str]) -> bool:
        """Whether any row is claimable now, by a plain read that skips nothing: a claim skips
        the rows another worker's claim is taking at that moment (SKIP LOCKED), whose leases
        are not committed yet."""
        query = select(self._c(self.spec.id)).where(self._claimable(utcnow(), exclude)).limit(1)
        return self.db.read(lambda conn: conn.execute(query).first() is not None)

    def pending_count(self) -> int:
        """Rows claimable now or later (held ones included)."""
        query = select(func.count()).where(self._wanted())
        return int(self.db.read(lambda conn: conn.execute(query).scalar_one()))  # redone if lost

    def leases_now(self) -> dict[str, int]:
        """Live leases per holder, read now."""
        return self.db.read(lambda conn: self.leases(EngineReads(conn)))  # redone if lost
