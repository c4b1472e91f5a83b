"""Two-step shutdown on SIGINT/SIGTERM, shared by every long-running loop.

The first signal sets `event`: the owner stops taking new work and finishes what it holds. A
second signal exits at once with status 130; that is safe because every store stagecrawl writes
is atomic or transactional, so an abrupt exit leaves nothing half-written, only work to redo.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Iterator

log = logging.getLogger("stagecrawl.shutdown")


class GracefulStop:
    def __init__(self, finishing: str) -> None:
        self.finishing = finishing  # what is finished after the first signal, for the log line
        self.event = asyncio.Event()
        self._signals = 0

    @property
    def requested(self) -> bool:
        return self.event.is_set()

    def request(self) -> None:
        self._signals += 1
        if self._signals >= 2:
            sys.stderr.write("second interrupt: exiting now; the next run resumes\n")
            os._exit(130)
        log.warning("stopping: finishing %s (interrupt again to exit now)", self.finishing)
        self.event.set()

    @contextlib.contextmanager
    def on_signals(self, enabled: bool = True) -> Iterator[None]:
        """Route SIGINT and SIGTERM to `request` while the block runs (main thread only)."""
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        if enabled:
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.add_signal_handler(sig, self.request)
                    installed.append(sig)
        try:
            yield
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
