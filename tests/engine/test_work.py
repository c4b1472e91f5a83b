"""The one work loop, against an in-memory queue that records what the loop asked of it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import pytest

from stagecrawl.engine.clock import RealClock
from stagecrawl.engine.ratelimit import WaitReason, wait_or_stop
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.engine.work import LoopSettings, WorkLoop


class RecordingQueue:
    """Hands out 0..n-1 once; records completes (as batches) and releases."""

    def __init__(self, n: int) -> None:
        self.todo = list(range(n))
        self.batches: list[list[int]] = []
        self.released: list[int] = []
        self.claims = 0

    async def claim(self, limit: int) -> list[int]:
        self.claims += 1
        taken, self.todo = self.todo[:limit], self.todo[limit:]
        return taken

    async def complete(self, results: Sequence[int]) -> None:
        await asyncio.sleep(0.01)  # a commit takes time: results pile up meanwhile
        self.batches.append(list(results))

    async def release(self, units: Sequence[int]) -> None:
        self.released += list(units)

    async def is_empty(self) -> bool:
        return not self.todo

    async def is_finished(self) -> bool:
        return not self.todo


async def test_every_unit_is_completed_once_in_group_commits() -> None:
    queue = RecordingQueue(200)

    async def process(unit: int) -> int:
        await asyncio.sleep(0.001)
        return unit

    stats = await WorkLoop(queue, process, LoopSettings(concurrency=8, commit_batch=32)).run()
    done = [u for batch in queue.batches for u in batch]
    assert sorted(done) == list(range(200)) and stats.completed == 200
    assert len(queue.batches) < 100  # grouped while commits ran, not one per result
    assert max(len(b) for b in queue.batches) <= 32


class SlowDatabase(RecordingQueue):
    """A commit that takes long (a database grown large): what waits for it is watched."""

    def __init__(self, n: int, loop: list[WorkLoop[int, int]]) -> None:
        super().__init__(n)
        self.loop = loop
        self.most_waiting = 0  # weight of the results waiting for a commit, at its highest

    async def complete(self, results: Sequence[int]) -> None:
        waiting = sum(10_000 for _ in self.loop[0]._results) + 10_000 * len(results)
        self.most_waiting = max(self.most_waiting, waiting)
        await asyncio.sleep(0.05)
        self.batches.append(list(results))


async def test_results_waiting_for_a_slow_commit_are_bounded_by_their_weight() -> None:
    """Heavy results (10 kB each here, a Go module's rows in life) do not pile up to two
    batches' count while commits are slow: past `commit_bytes` nothing more is claimed and
    what waits is committed at once; only what the workers held then still joins."""
    loop: list[WorkLoop[int, int]] = []
    queue = SlowDatabase(300, loop)

    async def process(unit: int) -> int:
        await asyncio.sleep(0.001)
        return unit

    settings = LoopSettings(concurrency=4, commit_batch=64, commit_bytes=50_000)
    loop.append(WorkLoop(queue, process, settings, weigh=lambda _result: 10_000))
    stats = await loop[0].run()
    assert sorted(u for batch in queue.batches for u in batch) == list(range(300))
    assert stats.completed == 300
    # the bound (5 results) and what the workers and their read-ahead held (4 + 4)
    assert queue.most_waiting <= 10_000 * (5 + 8)
    unweighed = SlowDatabase(300, loop)
    loop[0] = WorkLoop(unweighed, process, settings)
    await loop[0].run()
    assert unweighed.most_waiting > 10_000 * 13  # by count alone, they pile up


class GrowingQueue(RecordingQueue):
    """A crawl's frontier in miniature: completing unit u makes u + 10 claimable (its child,
    found by processing u), up to `last`; nothing else is known until a commit."""

    def __init__(self, last: int) -> None:
        super().__init__(10)
        self.last = last

    async def complete(self, results: Sequence[int]) -> None:
        await super().complete(results)
        self.todo += [u + 10 for u in results if u + 10 <= self.last]


async def test_a_lingering_batch_is_committed_at_once_when_nothing_else_is_in_flight() -> None:
    """A partial batch waits for company only while some can come: once every claimed unit
    is processed, it is committed at once, so a run's last results are durable without the
    linger, and a crawl whose children are claimable only after the commit goes on at once
    instead of idling a linger per generation (here an hour: the run would hang)."""
    queue = GrowingQueue(last=59)  # six generations of ten

    async def process(unit: int) -> int:
        await asyncio.sleep(0.001)
        return unit

    settings = LoopSettings(concurrency=4, commit_batch=1000, commit_linger=3600.0)
    async with asyncio.timeout(60):  # fails the test instead of hanging it on old code
        stats = await WorkLoop(queue, process, settings).run()
    done = [u for batch in queue.batches for u in batch]
    assert sorted(done) == list(range(60)) and stats.completed == 60
    assert len(queue.batches) < 60  # they still lingered for each other meanwhile


class FrontierLike(GrowingQueue):
    grows_on_complete = True  # as FrontierQueue: a commit can make more work claimable


async def test_workers_starved_by_a_lingering_batch_get_its_children_at_once() -> None:
    """The queue ran dry while unit 0 is still in flight: the lingering batch holding unit 1
    is what makes unit 11 (its child) claimable, so it is committed at once instead of when
    unit 0 finishes or the linger (an hour) ends. Unit 0 waits for unit 11 (at most 60 s,
    so the old code fails instead of hanging)."""
    queue = FrontierLike(last=19)
    child_done = asyncio.Event()
    finished: list[int] = []

    async def process(unit: int) -> int:
        if unit == 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(60):
                    await child_done.wait()
        if unit == 11:
            child_done.set()
        finished.append(unit)
        return unit

    settings = LoopSettings(concurrency=16, commit_batch=1000, commit_linger=3600.0)
    stats = await WorkLoop(queue, process, settings).run()
    assert stats.completed == 20
    assert finished.index(11) < finished.index(0)  # the child did not wait for the straggler


async def test_a_stop_gives_back_unstarted_and_late_units_and_keeps_finished_ones() -> None:
    queue = RecordingQueue(50)
    stop = GracefulStop()

    async def process(unit: int) -> int:
        if unit == 0:
            stop.request()
        await asyncio.sleep(0.05 if unit % 2 else 5.0)  # odd units finish, even ones stall
        return unit

    settings = LoopSettings(concurrency=4, claim_ahead=4, grace_period=0.3)
    stats = await WorkLoop(queue, process, settings, stop).run()
    done = {u for batch in queue.batches for u in batch}
    assert stats.interrupted
    assert done and all(u % 2 for u in done)  # what finished in the grace period is kept
    held = set(range(8))  # claimed: 4 in workers + 4 ahead
    assert set(queue.released) | done == held and not set(queue.released) & done
    assert queue.todo == list(range(8, 50))  # nothing more was claimed after the stop


async def test_an_unexpected_error_ends_the_run_instead_of_looping() -> None:
    queue = RecordingQueue(30)

    async def process(unit: int) -> int:
        if unit == 5:
            raise RuntimeError("a bug")
        await asyncio.sleep(0.01)
        return unit

    with pytest.raises(RuntimeError, match="a bug"):
        await WorkLoop(queue, process, LoopSettings(concurrency=2)).run()
    assert 5 in queue.released  # the unit went back, it was not completed
    assert not {5} & {u for batch in queue.batches for u in batch}
    assert queue.todo  # claiming stopped: the rest waits for a run without the bug


async def test_waiting_units_are_given_back_at_once_not_after_the_grace_period() -> None:
    queue = RecordingQueue(20)
    stop = GracefulStop()
    on_the_wire = asyncio.Event()

    async def process(unit: int) -> int:
        if unit == 0:  # on the wire: finishes inside the grace period, and is kept
            on_the_wire.set()
            await asyncio.sleep(0.5)
            return unit
        # the others wait for a token; a process that turns every Exception into a failure
        # result must not turn the stop into one
        try:
            if unit == 1:  # the host is paused: the server asked for it
                reason, source = WaitReason.COOLDOWN, WaitReason.RETRY_AFTER
                await wait_or_stop(RealClock(), 600.0, reason, stop, "api", source)
            else:
                await wait_or_stop(RealClock(), 600.0, WaitReason.LANE_RATE, stop, "api")
        except Exception:
            return -1
        return unit

    async def signal_soon() -> None:
        await on_the_wire.wait()
        await asyncio.sleep(0.1)
        stop.request()

    settings = LoopSettings(concurrency=4, claim_ahead=2, grace_period=30.0)
    signaller = asyncio.ensure_future(signal_soon())
    started = asyncio.get_running_loop().time()
    stats = await WorkLoop(queue, process, settings, stop).run()
    await signaller
    took = asyncio.get_running_loop().time() - started
    assert took < 10.0  # the waiters did not hold the stop for the 30 s grace period
    assert [u for batch in queue.batches for u in batch] == [0]  # no failure result either
    assert sorted(queue.released) == [1, 2, 3, 4, 5]
    assert stats.given_back == {"lane_rate": 2, "cooldown": 1, "unstarted": 2}
    # the summary says why in words: our lane's pace, the server's Retry-After, not started
    assert stats.given_back_text == (
        "given back: 2 not started, 2 waiting on our api lane,"
        " 1 waiting on the server's Retry-After"
    )


async def test_a_unit_on_the_wire_past_the_grace_period_is_given_back_and_said_so() -> None:
    queue = RecordingQueue(1)
    stop = GracefulStop()
    on_the_wire = asyncio.Event()

    async def process(unit: int) -> int:
        on_the_wire.set()
        await asyncio.sleep(600)  # an origin that never answers
        return unit

    async def signal_soon() -> None:
        await on_the_wire.wait()
        stop.request()

    settings = LoopSettings(concurrency=1, grace_period=0.1)
    signaller = asyncio.ensure_future(signal_soon())
    stats = await WorkLoop(queue, process, settings, stop).run()
    await signaller
    assert queue.released == [0] and not queue.batches
    assert stats.given_back_text == "given back: 1 past the grace period"


def test_concurrency_must_be_positive() -> None:
    with pytest.raises(ValueError):
        LoopSettings(concurrency=0)
