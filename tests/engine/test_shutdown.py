"""A phase that sends one exchange at a time outside a work loop (lock registration) gives an
exchange on the wire the grace period after a stop, then cancels it: never an unbounded wait."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess

import pytest

from stagecrawl.engine.fetcher import Fetcher, FetchSettings
from stagecrawl.engine.ratelimit import Lane, Lanes
from stagecrawl.engine.shutdown import GracefulStop, Interrupted, signals_held
from stagecrawl.testing.origin import TestOrigin
from tests.cli import spawn
from tests.conftest import SilentServer


def unpaced(origin: TestOrigin) -> Fetcher:
    return Fetcher(FetchSettings(retries=0), Lanes([Lane("x", origin.url + "/", None)]))


async def _on_the_wire(origin: TestOrigin, seen: int) -> None:
    while len(origin.log) <= seen:  # the request reached the origin, which stalls it
        await asyncio.sleep(0.01)


async def test_an_exchange_on_the_wire_finishes_within_the_grace_period(
    origin: TestOrigin,
) -> None:
    origin.add("x.json", {"ok": True})
    origin.rule("/x.json", stall=0.5)
    stop = GracefulStop(grace_period=60)
    async with unpaced(origin) as fetcher:
        asked = asyncio.ensure_future(stop.within_grace(fetcher.get(origin.url + "/x.json")))
        await _on_the_wire(origin, 0)
        stop.request()
        result = await asked  # not cancelled by the stop: it had the grace period to finish
    assert result.status == 200


async def test_an_exchange_past_the_grace_period_is_cancelled(origin: TestOrigin) -> None:
    origin.add("x.json", {"ok": True})
    origin.rule("/x.json", stall=3)  # answers, but long after the grace period
    stop = GracefulStop(grace_period=0.1)
    async with unpaced(origin) as fetcher:
        asked = asyncio.ensure_future(stop.within_grace(fetcher.get(origin.url + "/x.json")))
        await _on_the_wire(origin, 0)
        stop.request()
        with pytest.raises(Interrupted, match="past the grace period"):
            await asked  # without the cancel it would return the answer, 3 s on
    assert len(origin.log) == 1


def test_a_second_signal_exits_at_once_while_the_loop_is_blocked(
    silent_server: SilentServer,
) -> None:
    """A command whose event loop is held by a synchronous call (here: connecting to a
    database that does not answer, for up to its 120 s connect timeout) still exits on the
    second SIGINT, as promised; the loop's own signal handlers waited for the call to end.
    (The communicate timeout is only a guard against that wait.)"""
    url = f"mysql+pymysql://crawler@127.0.0.1:{silent_server.port}/sca?connect_timeout=120"
    command = spawn(
        "crates", "crawl", "serde", "--index-url", "http://127.0.0.1:9/", "--db", url,
        env={"STAGECRAWL_CONTACT": "t@example.org"},
    )  # fmt: skip
    try:
        assert silent_server.accepted.wait(60)  # connecting: the loop's thread is held
        for _ in range(100):  # two signals sent at once may arrive as one: repeat them
            command.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                command.wait(0.3)
            if command.returncode is not None:
                break
        _out, err = command.communicate(timeout=60)
    finally:
        command.kill()
    assert command.returncode == 130, err
    assert "second interrupt: exiting now" in err


async def test_a_stop_during_a_long_parse_off_the_loop_is_honoured_at_once() -> None:
    """A pure computation of seconds (a large lock file's parse) runs off the loop: a stop
    ends the wait at once; its result, had it come, is what the caller gets."""
    import threading
    import time

    stop = GracefulStop(grace_period=60)
    release = threading.Event()

    def parse() -> str:
        release.wait(30)  # a parse that takes as long as the test lets it
        return "parsed"

    waiting = asyncio.ensure_future(stop.off_the_loop(parse))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    started = time.monotonic()
    stop.request()
    with pytest.raises(Interrupted):
        await waiting
    assert time.monotonic() - started < 5  # not the parse's 30 s
    release.set()
    assert await GracefulStop().off_the_loop(lambda: "parsed") == "parsed"

    def broken() -> str:
        raise ValueError("line 3: not a pin")

    with pytest.raises(ValueError, match="not a pin"):
        await GracefulStop().off_the_loop(broken)


def test_a_signal_before_the_loop_listens_is_the_stop_once_it_does() -> None:
    """A SIGTERM between the command's start and its loop's handlers (CI sent one while
    `asyncio.run` was building the loop: start-up's handler raised inside it and the half-built
    loop printed a traceback) is held, then taken as the command's stop: exit 143, and the
    phase sees the stop from its first step."""
    seen: list[tuple[bool, int]] = []

    async def command() -> None:
        stop = GracefulStop()
        with stop.on_signals():
            seen.append((stop.requested, stop.exit_code))

    with signals_held():
        os.kill(os.getpid(), signal.SIGTERM)
        asyncio.run(command())
    assert seen == [(True, 143)]


def test_a_signal_held_and_never_taken_still_ends_the_process() -> None:
    """Held is not lost: if no phase took the stop, leaving the block exits with its status."""
    with pytest.raises(SystemExit) as stopped, signals_held():
        os.kill(os.getpid(), signal.SIGINT)
    assert stopped.value.code == 130
