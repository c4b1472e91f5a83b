"""Two-step shutdown on SIGINT/SIGTERM, shared by every phase of a command.

The first signal sets `event`: every loop stops taking new work, finishes what it holds within
its grace period, gives the rest back and prints its summary; the command exits 130 (SIGINT) or
143 (SIGTERM). A second signal exits at once with the same status; that is safe because every
store stagecrawl writes is atomic or transactional, so an abrupt exit leaves nothing
half-written, only work to redo (leases that run out, frontier rows that go back to pending).

Work that runs in a thread (a dump load, an OSV import) polls `stopped()`: it is a
threading.Event, so a thread can see it without the event loop.

Waiting is not being in flight. A unit that waits for a lane token, a budget window, a host's
429 cooldown or a retry backoff has sent nothing: on the first signal its wait ends at once with
`Unsent`, and the work loop gives the unit back to its queue (not a failure, no retry ladder).
Only exchanges already on the wire get the grace period (`within_grace` for a phase that awaits
one exchange at a time, outside a work loop). The stop a wait listens to is the one
the command runs under (`current_stop()`): `on_signals` and each work loop set it for the tasks
they start, and `asyncio.to_thread` carries it into worker threads, so the fetcher and a dump
load find it without every caller passing it down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from stagecrawl.settings import DEFAULTS

if TYPE_CHECKING:
    from stagecrawl.engine.waits import WaitReason

log = logging.getLogger("stagecrawl.shutdown")
T = TypeVar("T")

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


class Interrupted(Exception):
    """Raised by a phase that noticed the stop between two steps of its own."""


class Unsent(BaseException):
    """A stop came while a unit waited to send (or was about to): nothing went on the wire for
    it, and it goes back to its queue untouched.

    A BaseException, like asyncio.CancelledError, on purpose: a pipeline's `process` turns
    every `Exception` into a failure result (a climb on the retry ladder), and a stop is not
    a failure. The work loop catches it and releases the unit; a command outside a work loop
    exits with the stop's status."""

    def __init__(
        self,
        reason: WaitReason,
        seconds: float = 0.0,
        lane: str | None = None,
        source: WaitReason | None = None,
    ) -> None:
        super().__init__(f"stopped while waiting for {reason.value} ({seconds:.0f}s left)")
        self.reason = reason
        self.seconds = seconds
        self.lane = lane  # the lane it waited on (its rate or budget), for the stop summary
        self.source = source  # for a cooldown: who asked for it (RETRY_AFTER or BACKOFF)


_current: ContextVar[GracefulStop | None] = ContextVar("stagecrawl_stop", default=None)
_held: list[signal.Signals] = []  # signals that came while `signals_held` was in force


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Keep SIGINT and SIGTERM from raising until `on_signals` takes them (main thread only).

    Between `asyncio.run` and `on_signals` the process still has start-up's handlers, which
    raise (KeyboardInterrupt, SystemExit). Raised inside the event loop's constructor, that
    left a half-built loop whose finaliser printed a traceback on the way out. Here a signal is
    only noted; `on_signals` hands it to the stop as though it came a moment later, and if the
    block ends without one taking it, the process exits with the signal's status."""
    sigs = (signal.SIGINT, signal.SIGTERM)
    try:
        previous = {sig: signal.getsignal(sig) for sig in sigs}
        for sig in sigs:
            signal.signal(sig, lambda signum, _frame: _held.append(signal.Signals(signum)))
    except ValueError:  # not the main thread: nothing to hold
        yield
        return
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if _held:
            code = EXIT_CODES[_held[0]]
            _held.clear()
            raise SystemExit(code)


def current_stop() -> GracefulStop | None:
    """The stop the running command (or work loop) listens to, if any."""
    return _current.get()


@contextlib.contextmanager
def stopping_on(stop: GracefulStop) -> Iterator[None]:
    """Make `stop` the current one for the code (and the tasks it starts) inside the block."""
    token = _current.set(stop)
    try:
        yield
    finally:
        _current.reset(token)


async def sleep_unless_stopped(sleep: Awaitable[None], stop: GracefulStop | None) -> bool:
    """Await `sleep` (a clock's sleep, which may be virtual), cut short by a stop request;
    True when stopped. No task is made unless there is a stop to listen to."""
    if stop is None:
        await sleep
        return False
    if stop.requested:
        if asyncio.iscoroutine(sleep):
            sleep.close()
        return True
    sleeper = asyncio.ensure_future(sleep)
    stopped = asyncio.ensure_future(stop.event.wait())
    try:
        await asyncio.wait({sleeper, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (sleeper, stopped):
            if not task.done():
                task.cancel()
        await asyncio.gather(sleeper, stopped, return_exceptions=True)
    return stop.requested


class GracefulStop:
    def __init__(
        self, finishing: str = "work in progress", grace_period: float = DEFAULTS.grace_period
    ) -> None:
        self.finishing = finishing  # what is finished after the first signal, for the log line
        # Seconds an exchange on the wire may take to finish after the stop (`within_grace`);
        # the command sets it from the settings (`cli.common.run`), work loops use their own.
        self.grace_period = grace_period
        self.event = asyncio.Event()
        self._flag = threading.Event()
        self.signal: signal.Signals | None = None
        self._signals = 0
        self._requested_at: float | None = None  # time.monotonic() of the first signal

    @property
    def requested(self) -> bool:
        return self._flag.is_set()

    def stopped(self) -> bool:
        """Thread-safe: for work running off the event loop."""
        return self._flag.is_set()

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.signal or signal.SIGINT, 130)

    def request(self, signum: signal.Signals = signal.SIGINT) -> None:
        self._signals += 1
        if self.signal is None:
            self.signal = signum
        if self._signals >= 2:
            self._exit_now()
        # said as the signal came: a service manager's SIGTERM is not someone at a keyboard
        again = (
            "interrupt again to exit now"
            if signum == signal.SIGINT
            else "a second signal exits now"
        )
        log.warning("stopping: finishing %s (%s)", self.finishing, again)
        self._requested_at = time.monotonic()
        self._flag.set()
        self.event.set()

    def _exit_now(self) -> NoReturn:
        second = "interrupt" if self.signal == signal.SIGINT else "signal"
        sys.stderr.write(f"second {second}: exiting now; the next run resumes\n")
        sys.stderr.flush()
        os._exit(self.exit_code)

    async def cancelling(self, awaitable: Awaitable[T]) -> T:
        """Await `awaitable`, but a stop request cancels it at once and raises Interrupted:
        for single long waits with nothing to finish (a download, a subprocess)."""
        work = asyncio.ensure_future(awaitable)
        await self._done_or_stopped(work)
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await work
            raise Interrupted("stopped")
        return work.result()

    async def off_the_loop(self, work: Callable[[], T]) -> T:
        """Run `work` (pure: it reads and computes, and writes nothing) in a daemon thread, so
        the loop stays free; a stop ends the wait at once with Interrupted and the thread is
        left to end with the process. For parses of large inputs (a requirements file of
        100,000 pins takes half a minute), which would otherwise hold a stop until they end."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()

        def settle(outcome: Callable[[], None]) -> None:
            if not done.done():
                outcome()

        def run() -> None:
            try:
                result = work()
            except BaseException as exc:  # handed to the waiting task, raised there
                failed = exc
                with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                    loop.call_soon_threadsafe(settle, lambda: done.set_exception(failed))
            else:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(settle, lambda: done.set_result(result))

        threading.Thread(target=run, name="stagecrawl-off-the-loop", daemon=True).start()
        return await self.cancelling(done)

    async def _done_or_stopped(self, work: asyncio.Future[Any]) -> None:
        """Return when `work` is done or a stop is requested, whichever comes first."""
        stopped = asyncio.ensure_future(self.event.wait())
        try:
            await asyncio.wait({work, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()

    def grace_left(self) -> float:
        """Seconds of the grace period left since the stop (the whole of it before one)."""
        if self._requested_at is None:
            return self.grace_period
        return max(0.0, self.grace_period - (time.monotonic() - self._requested_at))

    async def within_grace(self, awaitable: Awaitable[T]) -> T:
        """Await an exchange that may be on the wire: a stop lets it finish within the grace
        period (counted from the signal, not from this call), then cancels it and raises
        Interrupted. For phases that send one request at a time outside a work loop (lock
        registration asks the index crate by crate): a stalled origin costs the grace period,
        not the watchdog's, and the phase still reports what it did. A wait that sends nothing
        (a lane token, a cooldown) ends at once with the fetcher's `Unsent`, raised here."""
        work = asyncio.ensure_future(awaitable)
        try:
            if not self.requested:
                await self._done_or_stopped(work)
            if not work.done():
                await asyncio.wait({work}, timeout=self.grace_left())
        except asyncio.CancelledError:
            work.cancel()
            raise
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await work
            log.warning("an exchange did not finish within the grace period: cancelled")
            raise Interrupted(f"stopped: past the grace period ({self.grace_period:g}s)")
        return work.result()

    async def wait(self, timeout: float | None) -> bool:
        """Sleep up to `timeout` seconds or until a stop; True when stopped."""
        if not self.requested:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.event.wait(), timeout)
        return self.requested

    @contextlib.contextmanager
    def on_signals(self, enabled: bool = True) -> Iterator[None]:
        """Route SIGINT and SIGTERM to `request` while the block runs (main thread only).

        The loop's handlers (`add_signal_handler`) hear a signal through its wakeup file, but
        run on the loop: while a synchronous call holds the loop's thread (connecting to a
        database that does not answer, reading a lock file from a pipe) they wait for it, and
        so did the second signal that promises to exit at once. So the signal module's handler
        under them (asyncio's is a no-op) counts the signals in the main thread, whatever it
        is blocked in, and the second exits there and then."""
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        token = _current.set(self)
        received = 0

        def second_exits(signum: int, _frame: Any) -> None:
            nonlocal received
            received += 1
            if received >= 2:
                self.signal = self.signal or signal.Signals(signum)
                self._exit_now()

        if enabled:
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.add_signal_handler(sig, self.request, sig)
                    installed.append(sig)
                    signal.signal(sig, second_exits)  # the wakeup file stays the loop's
            for sig in _held:  # came before the handlers above (`signals_held`)
                self.request(sig)
                second_exits(sig, None)
            _held.clear()
        try:
            yield
        finally:
            _current.reset(token)
            for sig in installed:
                loop.remove_signal_handler(sig)
