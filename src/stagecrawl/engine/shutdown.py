"""Two-step shutdown on SIGINT/SIGTERM, shared by every phase of a command.

The first signal sets `event`: every loop stops taking new work, finishes what it holds within
its grace period, gives the rest back and prints its summary; the command exits 130 (SIGINT) or
143 (SIGTERM). A second signal exits at once with the same status; that is safe because every
store stagecrawl writes is atomic or transactional, so an abrupt exit leaves nothing
half-written, only work to redo (leases that run out, frontier rows that go back to pending).

Work that runs in a thread (a dump load, an OSV import) polls `stopped()`: it is a
threading.Event, so a thread can see it without the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Iterator
from typing import TypeVar

log = logging.getLogger("stagecrawl.shutdown")
T = TypeVar("T")

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


class Interrupted(Exception):
    """Raised by a phase that noticed the stop between two steps of its own."""


class GracefulStop:
    def __init__(self, finishing: str = "work in progress") -> None:
        self.finishing = finishing  # what is finished after the first signal, for the log line
        self.event = asyncio.Event()
        self._flag = threading.Event()
        self.signal: signal.Signals | None = None
        self._signals = 0

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
            sys.stderr.write("second interrupt: exiting now; the next run resumes\n")
            sys.stderr.flush()
            os._exit(self.exit_code)
        log.warning("stopping: finishing %s (interrupt again to exit now)", self.finishing)
        self._flag.set()
        self.event.set()

    async def cancelling(self, awaitable: Awaitable[T]) -> T:
        """Await `awaitable`, but a stop request cancels it at once and raises Interrupted:
        for single long waits with nothing to finish (a download, a subprocess)."""
        work = asyncio.ensure_future(awaitable)
        stopped = asyncio.ensure_future(self.event.wait())
        try:
            await asyncio.wait({work, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if not work.done():
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await work
            raise Interrupted("stopped")
        return work.result()

    async def wait(self, timeout: float | None) -> bool:
        """Sleep up to `timeout` seconds or until a stop; True when stopped."""
        if not self.requested:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.event.wait(), timeout)
        return self.requested

    @contextlib.contextmanager
    def on_signals(self, enabled: bool = True) -> Iterator[None]:
        """Route SIGINT and SIGTERM to `request` while the block runs (main thread only)."""
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        if enabled:
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.add_signal_handler(sig, self.request, sig)
                    installed.append(sig)
        try:
            yield
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
