"""The work loop when its queue fails (the database gone past the outage bound): the run ends
with that error, every task awaited (no "Task exception was never retrieved"), what can be
given back is, and no grace-period line is printed when no stop was asked for."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Sequence
from typing import Any

import pytest

from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.engine.work import LoopSettings, WorkLoop


class Gone(Exception):
    """What the queue raises once its store is unreachable."""


class FailingQueue:
    """Hands out 0..n-1; `complete` fails from the `fail_at`-th call on, `release` fails when
    `release_fails` (the same outage)."""

    def __init__(self, n: int, fail_at: int, release_fails: bool) -> None:
        self.todo = list(range(n))
        self.fail_at = fail_at
        self.release_fails = release_fails
        self.completes = 0
        self.completed: list[int] = []
        self.released: list[int] = []

    async def claim(self, limit: int) -> list[int]:
        taken, self.todo = self.todo[:limit], self.todo[limit:]
        return taken

    async def complete(self, results: Sequence[int]) -> None:
        self.completes += 1
        await asyncio.sleep(0.01)
        if self.completes >= self.fail_at:
            raise Gone("store unreachable")
        self.completed += list(results)

    async def release(self, units: Sequence[int]) -> None:
        if self.release_fails:
            raise Gone("store unreachable while giving back")
        self.released += list(units)

    async def is_empty(self) -> bool:
        return not self.todo

    async def is_finished(self) -> bool:
        return not self.todo


def unretrieved(loop_errors: list[dict[str, Any]]) -> list[str]:
    gc.collect()  # a task dropped with its exception unread reports it when collected
    return [str(c.get("message")) for c in loop_errors]


@pytest.mark.parametrize("release_fails", [False, True])
async def test_a_failing_commit_ends_the_run_with_its_error_and_nothing_unretrieved(
    caplog: pytest.LogCaptureFixture, release_fails: bool
) -> None:
    loop_errors: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, c: loop_errors.append(c))
    queue = FailingQueue(200, fail_at=2, release_fails=release_fails)

    async def process(unit: int) -> int:
        await asyncio.sleep(0.02 if unit % 3 else 0.5)  # some units still in flight
        return unit

    settings = LoopSettings(concurrency=4, claim_ahead=4, commit_batch=4, grace_period=5.0)
    with caplog.at_level(logging.INFO), pytest.raises(Gone, match=r"store unreachable$"):
        await WorkLoop(queue, process, settings, GracefulStop()).run()
    assert not unretrieved(loop_errors)
    assert "grace period" not in caplog.text  # no stop was asked for: nothing to say of it
    assert len(queue.todo) > 150  # the run ended at the failure, claiming nothing more
    if not release_fails:  # what was held and not committed was given back
        assert queue.released and not set(queue.released) & set(queue.completed)


async def test_a_failing_claim_ends_the_run_with_its_error() -> None:
    loop_errors: list[dict[str, Any]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, c: loop_errors.append(c))
    queue = FailingQueue(20, fail_at=10**6, release_fails=False)
    claims = 0
    original = queue.claim

    async def claim(limit: int) -> list[int]:
        nonlocal claims
        claims += 1
        if claims > 1:
            raise Gone("store unreachable")
        return await original(limit)

    queue.claim = claim  # type: ignore[method-assign]

    async def process(unit: int) -> int:
        await asyncio.sleep(0.01)
        return unit

    with pytest.raises(Gone):
        await WorkLoop(queue, process, LoopSettings(concurrency=2, claim_ahead=2)).run()
    assert not unretrieved(loop_errors)
    assert sorted(queue.completed + queue.released) == [0, 1, 2, 3]  # nothing held is lost


async def test_a_stop_where_everything_finished_in_time_says_nothing_of_the_grace_period(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = FailingQueue(40, fail_at=10**6, release_fails=False)
    stop = GracefulStop()

    async def process(unit: int) -> int:
        if unit == 3:
            stop.request()
        await asyncio.sleep(0.05)
        return unit

    settings = LoopSettings(concurrency=4, claim_ahead=4, grace_period=5.0)
    with caplog.at_level(logging.INFO):
        stats = await WorkLoop(queue, process, settings, stop).run()
    assert stats.interrupted
    assert "grace period" not in caplog.text  # "0 unit(s) did not finish" is never said
