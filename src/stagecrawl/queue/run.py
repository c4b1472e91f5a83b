"""One worker's run over a queue table, behind the engine's work-loop contract
(`engine.work.WorkQueue`: claim, complete, release, is_empty, is_finished).

A unit is the claimed rows of one group. A registry hands its handler in: what a result's
outcomes are, the rows it writes with them (in the finishing transaction, only for units whose
lease is still held), and optional reads after a claim. The run keeps the rest:

- leased tables: read-ahead claims (one claim transaction per `claim_batch` groups, handed out
  from memory, leased and renewed by the heartbeat, given back on close), claims that start
  where the last ended, stale leases of dead workers taken back at open, the worker row and
  its heartbeat, every lease given back at close;
- tables without leases: claims are reads, and the groups held by this run are kept out;
- both: a group that failed or was given back in this run waits for the next run (`ThisRun`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from sqlalchemy import Connection

from stagecrawl.errors import DatabaseUnavailable
from stagecrawl.queue.ladder import ThisRun
from stagecrawl.queue.sql import SqlQueue
from stagecrawl.queue.table import Claimed, Lease, Outcome, utcnow
from stagecrawl.queue.workers import Holder, WorkerProgress, Workers, stale_after

log = logging.getLogger("stagecrawl.queue")

R = TypeVar("R")
Unit = list[Claimed]
# A worker that waits for another's leases says why at most this often (seconds).
WAIT_LINE_EVERY = 30.0


class Handler(Generic[R]):
    """What a registry tells the queue about its results. Override `outcomes`; the others
    are optional."""

    def outcomes(self, result: R) -> Sequence[Outcome]:
        raise NotImplementedError

    def claimed(self, units: Sequence[Unit]) -> None:
        """Called (in a worker thread) with each batch of units just claimed: e.g. one read
        of what is already stored for all of them."""

    def prepare(self, results: Sequence[R]) -> None:
        """Called (in a worker thread) before the finishing transaction, for writes that have
        their own transactions (e.g. registering the rows a unit found)."""

    def write(self, conn: Connection, results: Sequence[R]) -> None:
        """The registry's own rows for these results, inside the finishing transaction."""

    def committed(self, results: Sequence[R]) -> None:
        """Called (in the worker thread) once the finishing transaction has committed."""

    def finished(self, results: Sequence[R], kept: Sequence[bool]) -> None:
        """After the commit: per result, whether it was written (False: lease lost)."""


@dataclass
class RunSettings:
    lease_seconds: float = 900.0
    heartbeat_interval: float = 5.0
    claim_batch: int = 32  # groups per claim transaction (read-ahead)
    limit: int | None = None  # rows to claim in this run at most


class QueueRun(Generic[R]):
    def __init__(
        self,
        queue: SqlQueue,
        handler: Handler[R],
        worker: str,
        settings: RunSettings | None = None,
        more_coming: Callable[[], bool] = lambda: False,
        stopping: Callable[[], bool] | None = None,
    ) -> None:
        """`stopping` says the run's stop was asked; given, a commit on SQLite tops the
        read-ahead up until then (`_top_up_wanted`)."""
        self.queue = queue
        self.handler = handler
        self.worker = worker
        self.settings = settings or RunSettings()
        self.more_coming = more_coming
        self.stopping = stopping
        # One claim at a time tops up the read-ahead (a claim of the feeder's and one inside
        # a commit may run in two threads at once): `_claimed_rows`, `_after` and `_ready`
        # change together.
        self._claiming = threading.Lock()
        # Set while a commit that tops the read-ahead up runs: a claim waits for it rather
        # than for the write lock it holds.
        self._committing: asyncio.Future[None] | None = None
        self.this_run = ThisRun()  # failed or given back in this run: next try = next run
        self.leased = queue.spec.leased
        self.workers = Workers(queue.db)
        self.claimed_rows = 0
        self.released_rows = 0
        self.lost_leases = 0
        self._ready: deque[Unit] = deque()
        self._held: set[str] = set()  # tables without leases: the groups this run holds
        self._after: str | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._progress: Callable[[], WorkerProgress] = WorkerProgress
        # Set when work could not be attempted (a host asked for a pause longer than we may
        # wait): the run claims nothing more and ends once what it holds is done or given back.
        self.held_until: datetime | None = None
        self.held_because = ""
        self._shared_limit = False
        self._told_waiting = float("-inf")  # when the last "waiting: …" line was logged
        # Rows handed over by a producer of this process (`lease_terms`, `adopt`): open
        # between `open` and `close`; and whether the table had nothing more to claim when
        # last asked (the producer hands over what it registers, so claims can wait for it).
        self._adoptable = False
        self._claims_dry = False
        # Registrations of unleased rows told by `adopt` (its thread, not the claim's): a
        # short claim that read before the latest of them does not make the claims dry.
        self._unleased_told = 0
        # Take-backs of a dead worker's leases by this worker's heartbeat (its own thread),
        # and how many there had been when the latest claim began to read: rows freed after
        # that read are claimable though no claim has looked for them yet.
        self._taken_back = 0
        self._taken_back_at_claim = 0

    def hold(self, until: datetime, reason: str) -> None:
        """Claim nothing more in this run: nothing can be sent before `until`. What is
        claimed already still goes through (it waits too, without a request)."""
        if self.held_until is None:
            # (the command says it once, in its summary line)
            log.debug("%s: claiming nothing more in this run", reason)
        if self.held_until is None or until > self.held_until:
            self.held_until, self.held_because = until, reason

    # -- lifecycle --------------------------------------------------------------------------
    async def open(
        self,
        shared_limit: bool = False,
        progress: Callable[[], WorkerProgress] = WorkerProgress,
    ) -> None:
        """Take back the leases of dead workers, write this worker's row, start beating."""
        if not self.leased:
            return
        self._progress = progress
        self._shared_limit = shared_limit
        if self.queue.db.is_sqlite:  # one writer, and this is it: every lease is a dead one's
            freed = await asyncio.to_thread(self.queue.release_stale, None)
        else:
            freed = await asyncio.to_thread(self._take_back_dead)
            # leases whose holder has no worker row at all (its row was cleared)
            freed += await asyncio.to_thread(self.queue.release_stale, self.workers.ids())
        if freed:
            log.info("took back %d rows claimed by a worker that is gone", freed)
        await asyncio.to_thread(
            self.workers.register, self.worker, shared_limit, stale_after(self._interval)
        )
        self._heartbeat = asyncio.create_task(self._beat_forever())
        self._adoptable = True

    @property
    def _interval(self) -> float:
        # Beat well inside the lease, so a live worker never loses what it holds.
        return min(self.settings.heartbeat_interval, self.settings.lease_seconds / 3)

    def _take_back_dead(self) -> int:
        """Free the leases of every worker silent longer than its own bound (a few of its
        heartbeat intervals): run at start and on every heartbeat, so a dead worker's work
        goes on within seconds, whoever notices first."""
        with self.queue.db.reading() as conn:
            dead = self.workers.dead(conn, utcnow())
        freed = 0
        for worker, heartbeat in dead:
            if worker == self.worker:
                continue
            rows = self.workers.take_back(self.queue, worker, heartbeat)
            if rows:
                log.warning(
                    "took back %d rows leased by worker %s (no heartbeat since %s UTC)",
                    rows,
                    worker,
                    f"{heartbeat:%H:%M:%S}",
                )
            freed += rows
        if freed:
            self._taken_back += 1
        return freed

    async def close(self) -> None:
        """Every lease still held (read ahead and never handed out too) goes back now."""
        # (first: a registration that began before this takes its lease under the database's
        # write lock, which the release below waits for, so that lease goes back too)
        self._adoptable = False
        self.released_rows += sum(len(unit) for unit in self._ready)
        self._ready.clear()
        if not self.leased:
            return
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)

        def work(conn: Connection) -> None:
            self.queue.release_held(conn, self.worker)
            self.workers.unregister(conn, self.worker)

        await asyncio.to_thread(self.queue.db.transaction, work)

    def _beat(self) -> None:
        if not self.workers.beat(self.worker, self._progress()):
            # Silent too long (a stalled machine): another worker took this one's leases
            # back. What it finishes now is not written (the lease check); it goes on with
            # new claims under a new row.
            log.warning(
                "this worker was silent longer than %d s: its leases were taken back",
                stale_after(self._interval),
            )
            self.workers.register(self.worker, self._shared_limit, stale_after(self._interval))
        self.queue.renew(self.worker, self.settings.lease_seconds)
        self._take_back_dead()

    async def _beat_forever(self) -> None:
        interval = self._interval
        while True:
            await asyncio.sleep(interval)
            try:
                await asyncio.to_thread(self._beat)
            except DatabaseUnavailable:
                return  # past the outage bound: the run stops and says why, once
            except Exception as exc:  # a missed beat is retried; the lease has room for it
                log.warning("heartbeat failed: %s", str(exc).splitlines()[0])

    # -- rows handed over ---------------------------------------------------------------------
    def lease_terms(self) -> Lease | None:
        """The lease under which a producer running alongside in this process (a seeder) may
        register new rows for this run, inside its registering transaction, or None. The
        rows come leased to this worker, and `adopt` puts them among the claimed ones after
        the commit: the claim that would read them back and lease them is not needed (on a
        crawl it cost as much as registering them). SQLite only, where this is the one
        writer (one collect a file) and the registering transaction holds the write lock
        from its start; a kill -9 leaves the rows leased to a dead worker, and the next run
        takes every lease back when it opens, as for rows it claimed. None once closing, on a
        stop, a hold, or with a row limit (counted by claims)."""
        if not (self._adoptable and self.leased and self.queue.db.is_sqlite):
            return None
        if self.settings.limit is not None or self.held_until is not None:
            return None
        if self.stopping is None or self.stopping():
            return None
        return Lease(self.worker, self.settings.lease_seconds, self.this_run)

    def adopt(self, lease: Lease | None, others: bool) -> None:
        """After the commit of a producer's registration, under `lease_terms` (`lease`) or
        not (None: no terms were given): its leased rows are this run's claimed rows (the
        handler reads what it reads for claimed units first; in a worker thread). `others`:
        it registered rows it did not lease (merged old ones, a requeue, all of them without
        a lease), which the next claim must look for."""
        if others:
            self._unleased_told += 1
            self._claims_dry = False
        if lease is None:
            return
        units = _groups(lease.rows)
        if not units:
            return
        self.handler.claimed(units)
        self.claimed_rows += len(lease.rows)
        if not self._adoptable:  # closed meanwhile: its close gave the leases back
            self.released_rows += len(lease.rows)
            return
        self._ready.extend(units)

    def _dry(self) -> bool:
        """Nothing claimable was found last time and a producer alongside is still at work,
        handing over what it registers: the table need not be asked again until it ends (or
        registers rows it did not hand over)."""
        return self._claims_dry and self.more_coming()

    # -- the work-loop contract -------------------------------------------------------------
    async def claim(self, limit: int) -> list[Unit]:
        if self.held_until is not None:
            return []
        if not self.leased:
            # The set to keep out is made here, on the loop's thread, where it changes.
            units = await asyncio.to_thread(self._peek, limit, self._kept_out())
            self._held.update(unit[0].group for unit in units)
            return units
        if len(self._ready) < limit and self._committing is not None:
            # A commit in flight holds (or waits for) the write lock a claim would wait for,
            # and tops the read-ahead up before it lets go of it (`_top_up_wanted`).
            await asyncio.shield(self._committing)
        if len(self._ready) < limit and not self._dry():
            # Top up in bulk: the loop reads a short answer as "the queue ran short".
            wanted = max(limit - len(self._ready), self.settings.claim_batch)
            await asyncio.to_thread(self._claim_ahead, wanted)
        taken: list[Unit] = []
        while self._ready and len(taken) < limit:
            taken.append(self._ready.popleft())
        return taken

    def _kept_out(self) -> set[str]:
        return {*self._held, *self.this_run}

    def _peek(self, limit: int, kept_out: set[str]) -> list[Unit]:
        rows = self.queue.peek(limit, kept_out, self._after)
        units = _groups(rows)
        if units:
            self._after = rows[-1].group  # the next read goes on from here (`SqlQueue.peek`)
            self.handler.claimed(units)
        return units

    def _claim_ahead(self, groups: int) -> None:
        with self._claiming:
            max_rows = self._rows_left()
            if max_rows is not None and max_rows <= 0:
                return
            told = self._unleased_told  # before the read: what it may not have seen comes after
            self._taken_back_at_claim = self._taken_back
            rows = self.queue.claim(
                self.worker,
                groups,
                self.settings.lease_seconds,
                self.this_run,  # live: read inside the claim's transaction
                max_rows,
                self._after,
            )
            self._take(rows, groups, told)

    def _rows_left(self) -> int | None:
        """Rows this run may still claim (None: no limit)."""
        if self.settings.limit is None:
            return None
        return self.settings.limit - self.claimed_rows

    def _take(self, rows: Sequence[Claimed], asked: int, told: int) -> None:
        """Claimed rows (for `asked` groups, read after `told` registrations of unleased rows)
        into the read-ahead (under `_claiming`), once the handler has read what it reads for
        them."""
        units = _groups(rows)
        # Dry only if no registration was told since the read began: one told meanwhile may
        # have committed after the read, and nothing would tell the claims again.
        self._claims_dry = len(units) < asked and told == self._unleased_told
        if not rows:
            return
        self.claimed_rows += len(rows)
        self._after = rows[-1].group
        self.handler.claimed(units)
        self._ready.extend(units)

    def _top_up_wanted(self) -> int:
        """Groups to claim inside a commit's transaction, if any: on SQLite, where each
        transaction waits for the database's one write lock, the read-ahead is topped up to
        two claim batches by the commit that already holds it, so the feeder's claims (up to
        the workers' room, often more than one batch) find their units ready instead of
        waiting for the lock themselves, on the crawl's critical path. SQLite has one worker
        (one collect a file): what it holds ahead keeps no other worker waiting, and what a
        killed one held is taken back when the next run opens. Nothing after a stop, a
        hold, or at the run's limit."""
        if not (self.leased and self.queue.db.is_sqlite):
            return 0
        if self.stopping is None or self.stopping() or self.held_until is not None:
            return 0
        if self._dry():
            return 0
        left = self._rows_left()
        if left is not None and left <= 0:
            return 0
        return max(0, 2 * self.settings.claim_batch - len(self._ready))

    async def complete(self, results: Sequence[R]) -> None:
        tops_up = self._top_up_wanted() > 0 or self._committing is not None
        if tops_up:
            self._committing = asyncio.get_running_loop().create_future()
        try:
            kept = await asyncio.to_thread(self._complete, results)
        finally:
            if tops_up and self._committing is not None:
                self._committing.set_result(None)
                self._committing = None
        for result in results:
            outcomes = self.handler.outcomes(result)
            if outcomes:
                self._held.discard(outcomes[0].event.group)
        self.lost_leases += kept.count(False)
        self.handler.finished(results, kept)

    def _complete(self, results: Sequence[R]) -> list[bool]:
        handler = self.handler
        handler.prepare(results)
        units = [handler.outcomes(r) for r in results]
        # A claim already under way in another thread tops up the read-ahead itself: this
        # commit does not wait for it (it holds the write lock that claim waits for).
        topping = self._top_up_wanted() > 0 and self._claiming.acquire(blocking=False)
        claimed: list[Claimed] = []
        asked = [0]
        told = [self._unleased_told]

        def write(conn: Connection, indexes: list[int]) -> None:
            handler.write(conn, [results[n] for n in indexes])
            if topping:
                told[0] = self._unleased_told
                wanted = asked[0] = self._top_up_wanted()
                claimed[:] = (
                    self.queue.claim_on(
                        conn,
                        self.worker,
                        wanted,
                        self.settings.lease_seconds,
                        self.this_run,
                        self._rows_left(),
                        self._after,
                    )
                    if wanted
                    else []
                )

        try:
            kept = self.queue.complete(self.worker if self.leased else None, units, write)
            if topping and asked[0]:
                self._take(claimed, asked[0], told[0])  # committed: leased now
        finally:
            if topping:
                self._claiming.release()
        handler.committed(results)
        return kept

    async def release(self, units: Sequence[Unit]) -> None:
        # A group given back (a stop, a crash) is not claimed again in this run: a crash must
        # not turn into a loop of claims.
        self.this_run.update(unit[0].group for unit in units if unit)
        self._held.difference_update(unit[0].group for unit in units if unit)
        ids = [row.id for unit in units for row in unit]
        await asyncio.to_thread(self.queue.release, self.worker, ids)
        self.released_rows += len(ids)

    async def is_empty(self) -> bool:
        if not self.leased:
            return not await asyncio.to_thread(self.queue.peek, 1, self._kept_out(), self._after)
        return await asyncio.to_thread(self.queue.pending_count) == 0

    async def is_finished(self) -> bool:
        if self.held_until is not None:
            return True  # nothing can be sent before then: the rest waits for the next run
        if self.more_coming():
            return False  # another producer is still adding rows
        if not self.leased:
            return not self._held and await self.is_empty()
        if self.settings.limit is not None and self.claimed_rows >= self.settings.limit:
            return True
        # Another worker holds unfinished rows: wait for it to write them, or take them back
        # as soon as its heartbeat says it is dead (not when its lease runs out).
        holders = await asyncio.to_thread(self._holders, self.this_run.snapshot())
        if not holders:
            # Finished, unless this worker's heartbeat took a dead worker's rows back after
            # the last claim began to read (they were leased then, and nobody holds them now):
            # the next claim takes them. Nor while rows are claimable now: the last claim
            # skipped them because another worker's claim, not committed yet, was taking them
            # (two workers started together: the second ended at once with nothing done).
            if self._taken_back_at_claim != self._taken_back:
                return False
            return not await asyncio.to_thread(self.queue.claimable_now, self._kept_out())
        now = utcnow()
        dead = [h for h in holders if h.worker != self.worker and h.dead(now)]
        if dead:
            await asyncio.to_thread(self._take_back, dead)
            return False  # claimable now
        self._say_why_waiting([h for h in holders if h.worker != self.worker], now)
        return False

    def _holders(self, exclude: list[str]) -> list[Holder]:
        with self.queue.db.reads() as r:
            return self.workers.holders(r, self.queue, exclude)

    def _take_back(self, dead: Sequence[Holder]) -> None:
        for holder in dead:
            if holder.heartbeat is None:
                rows = self.workers.take_back_orphan(self.queue, holder.worker)
            else:
                rows = self.workers.take_back(self.queue, holder.worker, holder.heartbeat)
            if rows:
                log.warning("took back %s", holder.describe(utcnow()).split(";")[0])

    def _say_why_waiting(self, holders: Sequence[Holder], now: datetime) -> None:
        """One line, now and then, on why a worker with nothing to claim does not end."""
        if not holders:
            return
        moment = time.monotonic()
        if moment - self._told_waiting < WAIT_LINE_EVERY:
            return
        self._told_waiting = moment
        log.info("waiting: %s", "; ".join(h.describe(now) for h in holders[:3]))


def _groups(rows: Sequence[Claimed]) -> list[Unit]:
    """Claimed rows (in group order) as one unit per group."""
    units: dict[str, Unit] = {}
    for row in rows:
        units.setdefault(row.group, []).append(row)
    return list(units.values())
