"""The one work loop of every pipeline: claim → N workers → one committer → complete/release.

    queue --claim--> [units] --> N workers (process) --> [results] --> committer
      ^                                                                  |
      +--------------- complete(batch) / release(unstarted) <------------+

A pipeline gives the loop two things: a `WorkQueue` (where the work is kept, durably or not)
and a `process` coroutine (one unit in, one result out; it must turn its own failures into a
result). The loop keeps a bounded number of units claimed ahead of the workers, batches results
into one `complete` call per batch (flushed by size or by a short time bound, so progress stays
live and a kill loses at most the open batch, which the queue hands out again), and ends when
the queue says it is finished and nothing is in flight.

On a stop request it claims nothing more, gives unstarted units back at once, and so do the
workers whose unit is only waiting (for a lane token, a budget window, a host cooldown, a retry
backoff: the fetcher ends those waits with `Unsent`, and nothing new is sent after the stop).
Only what is on the wire gets the grace period; the late ones are cancelled and given back
too: nothing is lost, nothing is left held, and a waiting unit climbs no retry ladder.

The contract is crawlee-python's RequestLoader/RequestManager trimmed to what a durable queue
with leases needs: claim (fetch_next_request, in batches), complete (mark_request_as_handled,
the retry ladder is the queue's business), release (reclaim_request), is_empty and is_finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from stagecrawl.engine.ratelimit import WaitReason
from stagecrawl.engine.shutdown import GracefulStop, Unsent, stopping_on
from stagecrawl.settings import DEFAULTS

log = logging.getLogger("stagecrawl.work")

U = TypeVar("U")  # a unit of work, as the queue hands it out
R = TypeVar("R")  # what processing one unit produced
U_contra = TypeVar("U_contra", contravariant=True)
R_contra = TypeVar("R_contra", contravariant=True)


class WorkQueue(Protocol[U, R_contra]):
    async def claim(self, limit: int) -> Sequence[U]:
        """Up to `limit` units to work on, held for this run (leased) until completed or
        released; [] when nothing is claimable right now."""
        ...

    async def complete(self, results: Sequence[R_contra]) -> None:
        """Record a batch of results durably (items, outcomes, the retry ladder)."""

    async def release(self, units: Sequence[U]) -> None:
        """Give claimed units back untouched (a stop before or during their processing)."""

    async def is_empty(self) -> bool:
        """Nothing claimable right now (work may still be held by someone, or still coming)."""
        ...

    async def is_finished(self) -> bool:
        """Nothing claimable and nothing that can become claimable in this run: the loop ends
        once its own in-flight work is committed."""
        ...


# A queue whose `complete` can make more work claimable (a crawl's frontier: the children
# found in a batch are claimable once it is committed) says so with a true class attribute
# `grows_on_complete`; the loop then does not hold a batch open while its workers starve.
GROWS_ON_COMPLETE = "grows_on_complete"


@dataclass
class LoopSettings:
    """Work-loop settings; the defaults of those in the settings table come from it."""

    concurrency: int = DEFAULTS.concurrency
    claim_ahead: int = 0  # units held ready beyond the workers; 0 = the concurrency
    commit_batch: int = DEFAULTS.commit_batch  # results per `complete` call at most
    # the weight (`WorkLoop`'s `weigh`) of the results waiting for a commit at most
    commit_bytes: int = DEFAULTS.commit_bytes
    commit_linger: float = DEFAULTS.commit_linger  # seconds a partial batch may wait
    grace_period: float = DEFAULTS.grace_period  # on-the-wire exchanges may finish after a stop
    poll_interval: float = 1.0  # seconds between claims when work is held elsewhere

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("concurrency must be at least 1")


@dataclass
class LoopStats:
    claimed: int = 0
    completed: int = 0
    batches: int = 0
    released: int = 0
    crashed: int = 0
    interrupted: bool = False
    wall_seconds: float = 0.0
    errors: Counter[str] = field(default_factory=Counter)
    # Given back on a stop, by why: "unstarted", what a unit was waiting for when the stop
    # came (a WaitReason: lane_rate, budget, cooldown, backoff, stop), or "grace_period" (on
    # the wire past the grace period, cancelled).
    given_back: Counter[str] = field(default_factory=Counter)
    # The same units by cause in words, naming the lane and who asked for a cooldown
    # ("waiting on our api lane", "waiting on the server's Retry-After"): `given_back_text`.
    given_back_why: Counter[str] = field(default_factory=Counter)

    @property
    def given_back_text(self) -> str:
        return given_back_text(self.given_back_why)


UNSTARTED = "not started"
PAST_GRACE = "past the grace period"


def waited_for(unsent: Unsent) -> str:
    """What a unit given back on a stop was waiting for, in words: ours (a lane's rate or
    budget, a backoff) is told apart from the server's (its Retry-After)."""
    lane = f"our {unsent.lane} lane" if unsent.lane else "our lane"
    reason = unsent.reason
    if reason is WaitReason.LANE_RATE:
        return f"waiting on {lane}"
    if reason is WaitReason.BUDGET:
        return f"waiting on {lane}'s budget"
    if reason is WaitReason.COOLDOWN:
        if unsent.source is WaitReason.BACKOFF:
            return "waiting on our backoff after a 429"
        return "waiting on the server's Retry-After"
    if reason is WaitReason.BACKOFF:
        return "waiting on our backoff after a failure"
    return "stopped before sending"


def given_back_text(why: Counter[str]) -> str:
    """ "given back: 3 waiting on our api lane, 1 waiting on the server's Retry-After, 2 past
    the grace period" (most first); "" when nothing was given back."""
    parts = [f"{n} {cause}" for cause, n in sorted(why.items(), key=lambda c: (-c[1], c[0])) if n]
    return f"given back: {', '.join(parts)}" if parts else ""


class WorkLoop(Generic[U, R]):
    def __init__(
        self,
        queue: WorkQueue[U, R],
        process: Callable[[U], Awaitable[R]],
        settings: LoopSettings | None = None,
        stop: GracefulStop | None = None,
        on_commit: Callable[[LoopStats], None] | None = None,
        may_claim: Callable[[], bool] | None = None,
        weigh: Callable[[R], int] | None = None,
    ) -> None:
        """`may_claim` is backpressure from whoever consumes what this loop produces (a
        seeder's events, collected alongside): while it says no, nothing more is claimed;
        `wake()` when it may say yes again (it is asked at the next poll otherwise).
        `weigh` says what a result holds in memory (its rows' text): while the results
        waiting for a commit weigh `commit_bytes`, they are committed at once and nothing
        more is claimed, so a slow database costs time, not memory (count alone let heavy
        units, a Go module's go.mods, pile up as commits slowed with the database's size)."""
        self.queue = queue
        self.process = process
        self.settings = settings or LoopSettings()
        self.stop = stop or GracefulStop()
        self.on_commit = on_commit
        self.may_claim = may_claim
        self.weigh = weigh
        self.stats = LoopStats()
        self._todo: asyncio.Queue[U | None] = asyncio.Queue()
        self._results: deque[tuple[R, int]] = deque()  # waiting for a commit, with its weight
        self._waiting_weight = 0  # of the results waiting for (or in) a commit
        # A result was added (one the lingering committer must see), or the workers are done.
        self._arrived = asyncio.Event()
        self._lingering = False  # the committer holds a partial batch open for company
        # There may be room to claim: a commit, a wake(), or the ready units ran out.
        self._room = asyncio.Event()
        self._workers_done = False
        self._outstanding = 0  # claimed and neither committed nor released
        self._uncommitted = 0  # processed, waiting for (or in) a commit
        self._drained = False  # the last claim found less than it asked for
        self._in_worker: dict[int, U] = {}
        self._committer_task: asyncio.Task[None]
        self._failure: BaseException | None = None  # what `process` raised: it ends the run
        self._grows = bool(getattr(queue, GROWS_ON_COMPLETE, False))

    @property
    def idle(self) -> bool:
        """The last claim found less than it asked for, and everything claimed is committed
        or given back: this loop waits for work."""
        return self._drained and self._outstanding == 0

    @property
    def in_flight(self) -> int:
        """Units in a worker's hands now."""
        return len(self._in_worker)

    def wake(self) -> None:
        """New work may be claimable (another producer registered some): claim now rather
        than at the next poll."""
        self._drained = False
        self._room.set()

    def fail(self, error: BaseException) -> None:
        """Something the run depends on failed beside the loop (a producer of its work):
        end the run as a unit whose processing raised does. `run` raises the first error."""
        if self._failure is None:
            self._failure = error
        self._room.set()

    async def run(self) -> LoopStats:
        started = time.monotonic()
        settings = self.settings
        # The workers' waits (the fetcher's) listen to this loop's stop.
        with stopping_on(self.stop):
            workers = [asyncio.create_task(self._worker(i)) for i in range(settings.concurrency)]
        self._committer_task = asyncio.create_task(self._committer())
        # The feeder waits on one event: a stop and a committer that ended set it too.
        self._committer_task.add_done_callback(lambda _task: self._room.set())
        stop_watch = asyncio.create_task(self._wake_on_stop())
        try:
            await self._feed()
        except Exception as exc:  # the queue failed under the feeder (its database is gone)
            self._failure = self._failure or exc
        finally:
            stop_watch.cancel()
            # A committer that failed (the database went away), a queue that failed or a unit
            # whose processing raised (a bug, or the shared rate limit lost) ends the run: what
            # is held is given back as far as the queue still can, what finished is committed,
            # and the first error is raised below. Every task is awaited, whatever failed, so
            # none ends with an exception nobody retrieved.
            failed = self._committer_task.done() or self._failure is not None
            try:
                await self._wind_down(workers, abort=failed)
            except Exception as exc:  # giving back failed too (the same outage, usually)
                self._failure = self._failure or exc
                for task in workers:
                    task.cancel()
                await asyncio.gather(*workers, return_exceptions=True)
            self._workers_done = True
            self._arrived.set()
            (committed,) = await asyncio.gather(self._committer_task, return_exceptions=True)
        if isinstance(committed, BaseException):
            raise committed  # the first failure when the committer had one: nothing after it
        if self._failure is not None:
            raise self._failure
        self.stats.interrupted = self.stop.requested
        self.stats.wall_seconds = time.monotonic() - started
        if self.stats.interrupted:
            why = self.stats.given_back_text
            log.warning(
                "stopped: %d unit(s) finished and written, %d given back%s",
                self.stats.completed,
                self.stats.released,
                f" ({why.removeprefix('given back: ')})" if why else "",
            )
        return self.stats

    async def _feed(self) -> None:
        settings = self.settings
        ahead = settings.claim_ahead or settings.concurrency
        capacity = settings.concurrency + ahead
        # Processed results waiting for a commit do not hold workers back (a slow commit must
        # not starve them): up to two batches of them ride on top of what the workers hold.
        # Beyond that the claiming waits, so a stalled database holds the crawl back.
        most = capacity + 2 * settings.commit_batch
        while not self.stop.requested and not self._committer_task.done() and self._failure is None:
            room = min(capacity - (self._outstanding - self._uncommitted), most - self._outstanding)
            if self._heavy():
                room = 0  # the waiting results hold their weight: a commit makes room
            # Claim in batches: once the ready units are used up (room for `ahead` more),
            # or for whatever room there is when the queue ran short last time.
            wanted = ahead if not self._drained else 1
            if room >= wanted and (self.may_claim is None or self.may_claim()):
                units = await self.queue.claim(room)
                self._drained = len(units) < room
                if units and not self.stop.requested and self._failure is None:
                    self._outstanding += len(units)
                    self.stats.claimed += len(units)
                    for unit in units:
                        self._todo.put_nowait(unit)
                    continue
                if units:  # a stop (or a failure) came while claiming: straight back
                    await self.queue.release(list(units))
                    return
                if self._lingering and self._no_company():
                    self._arrived.set()  # ran dry: what lingers may hold the next work
            if self._outstanding == 0 and await self.queue.is_finished():
                return
            # Wait for room (the workers used up the ready units, or a commit made some and
            # may have added work), or poll for work held elsewhere or still being produced.
            self._room.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(settings.poll_interval):
                    await self._room.wait()

    async def _wake_on_stop(self) -> None:
        await self.stop.event.wait()
        self._room.set()

    async def _wind_down(self, workers: list[asyncio.Task[None]], abort: bool) -> None:
        if self.stop.requested or abort:
            unstarted: list[U] = []
            while not self._todo.empty():
                unit = self._todo.get_nowait()
                if unit is not None:
                    unstarted.append(unit)
            await self._release(unstarted)
            self.stats.given_back["unstarted"] += len(unstarted)
            self.stats.given_back_why[UNSTARTED] += len(unstarted)
        for _ in workers:
            self._todo.put_nowait(None)
        grace = 0.0 if abort else self.settings.grace_period if self.stop.requested else None
        _done, late = await asyncio.wait(workers, timeout=grace)
        if late:
            held = list(self._in_worker.values())
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
            if held and self.stop.requested and not abort:  # a failure says why on its own
                log.warning(
                    "%d unit(s) did not finish within the grace period: given back", len(held)
                )
            await self._release(held)
            self.stats.given_back["grace_period"] += len(held)
            self.stats.given_back_why[PAST_GRACE] += len(held)

    async def _release(self, units: list[U]) -> None:
        if not units:
            return
        await self.queue.release(units)
        self._outstanding -= len(units)
        self.stats.released += len(units)
        if self._lingering and self._no_company():
            self._arrived.set()  # what lingers can have no more company: commit it now

    async def _worker(self, number: int) -> None:
        while True:
            unit = await self._todo.get()
            if unit is None:
                return
            self._in_worker[number] = unit
            try:
                result = await self.process(unit)
            except asyncio.CancelledError:
                raise
            except Unsent as unsent:
                # Stopped while waiting to send: nothing went out for it; back to the queue,
                # untouched (no failure, no ladder). The worker takes its end-of-work marker.
                self._in_worker.pop(number, None)
                await self._release([unit])
                self.stats.given_back[str(unsent.reason)] += 1
                self.stats.given_back_why[waited_for(unsent)] += 1
                continue
            except Exception as exc:
                # `process` turns every failure it expects into a result; anything else is a
                # bug or a lost shared resource, and ends the run rather than handing the same
                # unit out again and again.
                self.stats.crashed += 1
                self._in_worker.pop(number, None)
                await self._release([unit])
                if self._failure is None:
                    self._failure = exc
                    self._room.set()
                return
            self._in_worker.pop(number, None)
            weight = self.weigh(result) if self.weigh is not None else 0
            self._results.append((result, weight))
            self._waiting_weight += weight
            self._uncommitted += 1
            if (
                not self._lingering
                or len(self._results) >= self.settings.commit_batch
                or self._heavy()
                or self._no_company()
            ):
                self._arrived.set()
            if self._todo.empty() and not self._drained:
                self._room.set()  # the ready units are used up: the feeder claims more

    async def _committer(self) -> None:
        """Group commit: take every result that is waiting (up to `commit_batch`) and commit
        them together; results that arrive while a commit runs form the next batch. A partial
        batch waits at most `commit_linger` for company, and not at all when none can come:
        nothing is left in flight (the queue ran dry, the run or a stop is ending), so the
        last results of a run, or of a burst, are durable at once; nor when the queue ran dry
        and says a commit can give it more (`grows_on_complete`: a crawl's children become
        claimable once their parent's batch is committed), so idle workers get them at once.

        While a batch lingers, workers wake the committer only when it must go (full, or the
        last unit in flight finished), not once per result: one timer per batch."""
        settings = self.settings
        size, linger = settings.commit_batch, settings.commit_linger
        while True:
            if not self._results:
                if self._workers_done:
                    return
                self._arrived.clear()
                await self._arrived.wait()
                continue
            if (
                linger > 0
                and len(self._results) < size
                and not self._heavy()
                and not self._no_company()
            ):
                self._arrived.clear()
                self._lingering = True
                try:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(linger):
                            await self._arrived.wait()
                finally:
                    self._lingering = False
            taken = [self._results.popleft() for _ in range(min(size, len(self._results)))]
            await self._commit([result for result, _ in taken], sum(w for _, w in taken))

    def _heavy(self) -> bool:
        """The results waiting for a commit weigh what they may at most."""
        return self._waiting_weight >= self.settings.commit_bytes

    def _no_company(self) -> bool:
        """A lingering batch would wait for nothing: no claimed unit is waiting for a worker
        or being processed (no result can join it until something more is claimed), or the
        queue ran dry and its own commit is what may give the idle workers more to do."""
        if self._workers_done or self._outstanding == self._uncommitted:
            return True
        return self._grows and self._drained and self._todo.empty()

    async def _commit(self, batch: list[R], weight: int) -> None:
        await self.queue.complete(batch)
        self._waiting_weight -= weight  # held until written: the memory is theirs till then
        self._outstanding -= len(batch)
        self._uncommitted -= len(batch)
        self.stats.completed += len(batch)
        self.stats.batches += 1
        self._drained = False  # a commit may have made more claimable (children, a ladder)
        self._room.set()
        if self.on_commit is not None:
            self.on_commit(self.stats)


class MemoryQueue(Generic[U, R]):
    """A fixed list of units behind the contract, for work whose durable state lives in the
    results (a refresh writes what changed; a rerun just asks again). `commit` writes a batch;
    it runs on a worker thread, off the event loop."""

    def __init__(self, units: Sequence[U], commit: Callable[[Sequence[R]], None]) -> None:
        self._units: deque[U] = deque(units)
        self._commit = commit
        self.released = 0

    async def claim(self, limit: int) -> list[U]:
        taken: list[U] = []
        while self._units and len(taken) < limit:
            taken.append(self._units.popleft())
        return taken

    async def complete(self, results: Sequence[R]) -> None:
        await asyncio.to_thread(self._commit, results)

    async def release(self, units: Sequence[U]) -> None:
        self.released += len(units)  # not put back: a stopped run ends, a rerun asks again

    async def is_empty(self) -> bool:
        return not self._units

    async def is_finished(self) -> bool:
        return not self._units
