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
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from sqlalchemy import Connection

from stagecrawl.errors import DatabaseUnavailable
from stagecrawl.queue.ladder import ThisRun
from stagecrawl.queue.sql import SqlQueue
from stagecrawl.queue.table import Claimed, Outcome
from stagecrawl.queue.workers import WorkerProgress, Workers

log = logging.getLogger("stagecrawl.queue")

R = TypeVar("R")
Unit = list[Claimed]


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
    ) -> None:
        self.queue = queue
        self.handler = handler
        self.worker = worker
        self.settings = settings or RunSettings()
        self.more_coming = more_coming
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
        live = None if self.queue.db.is_sqlite else self.workers.live_ids()
        freed = await asyncio.to_thread(self.queue.release_stale, live)
        if freed:
            log.info("took back %d rows claimed by a worker that is gone", freed)
        await asyncio.to_thread(self.workers.register, self.worker, shared_limit)
        self._heartbeat = asyncio.create_task(self._beat_forever())

    async def close(self) -> None:
        """Every lease still held (read ahead and never handed out too) goes back now."""
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
        self.workers.beat(self.worker, self._progress())
        self.queue.renew(self.worker, self.settings.lease_seconds)

    async def _beat_forever(self) -> None:
        # Beat well inside the lease, so a live worker never loses what it holds.
        interval = min(self.settings.heartbeat_interval, self.settings.lease_seconds / 3)
        while True:
            await asyncio.sleep(interval)
            try:
                await asyncio.to_thread(self._beat)
            except DatabaseUnavailable:
                return  # past the outage bound: the run stops and says why, once
            except Exception as exc:  # a missed beat is retried; the lease has room for it
                log.warning("heartbeat failed: %s", str(exc).splitlines()[0])

    # -- the work-loop contract -------------------------------------------------------------
    async def claim(self, limit: int) -> list[Unit]:
        if not self.leased:
            # The set to keep out is made here, on the loop's thread, where it changes.
            units = await asyncio.to_thread(self._peek, limit, self._kept_out())
            self._held.update(unit[0].group for unit in units)
            return units
        if len(self._ready) < limit:
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
        rows = self.queue.peek(limit, kept_out)
        units = _groups(rows)
        if units:
            self.handler.claimed(units)
        return units

    def _claim_ahead(self, groups: int) -> None:
        max_rows: int | None = None
        if self.settings.limit is not None:
            max_rows = self.settings.limit - self.claimed_rows
            if max_rows <= 0:
                return
        rows = self.queue.claim(
            self.worker,
            groups,
            self.settings.lease_seconds,
            self.this_run,  # live: read inside the claim's transaction
            max_rows,
            self._after,
        )
        if not rows:
            return
        self.claimed_rows += len(rows)
        self._after = rows[-1].group
        units = _groups(rows)
        self.handler.claimed(units)
        self._ready.extend(units)

    async def complete(self, results: Sequence[R]) -> None:
        kept = await asyncio.to_thread(self._complete, results)
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

        def write(conn: Connection, indexes: list[int]) -> None:
            handler.write(conn, [results[n] for n in indexes])

        return self.queue.complete(self.worker if self.leased else None, units, write)

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
            return not await asyncio.to_thread(self.queue.peek, 1, self._kept_out())
        return await asyncio.to_thread(self.queue.pending_count) == 0

    async def is_finished(self) -> bool:
        if self.more_coming():
            return False  # another producer is still adding rows
        if not self.leased:
            return not self._held and await self.is_empty()
        if self.settings.limit is not None and self.claimed_rows >= self.settings.limit:
            return True
        # Another worker holds unfinished rows: wait for it to write them, or for its lease
        # to run out (it died) and take them over.
        expiry = await asyncio.to_thread(self.queue.next_lease_expiry, self.this_run.snapshot())
        return expiry is None


def _groups(rows: Sequence[Claimed]) -> list[Unit]:
    """Claimed rows (in group order) as one unit per group."""
    units: dict[str, Unit] = {}
    for row in rows:
        units.setdefault(row.group, []).append(row)
    return list(units.values())
