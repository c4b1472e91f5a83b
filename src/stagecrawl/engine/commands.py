"""External commands (git, cargo) with a timeout and a stop: never an unbounded wait.

The command runs as its own process group, so a timeout or a stop kills it and whatever it
started (git's remote helpers, cargo's children), not only the direct child.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stagecrawl.engine.shutdown import GracefulStop, Interrupted


@dataclass
class CommandResult:
    returncode: int
    stdout: bytes
    stderr: bytes


class CommandTimeout(Exception):
    def __init__(self, args: list[str], seconds: float) -> None:
        super().__init__(f"{args[0]} took longer than {seconds:g}s and was stopped")
        self.seconds = seconds


async def run_command(
    args: list[str],
    *,
    timeout: float,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    stop: GracefulStop | None = None,
) -> CommandResult:
    """Run `args` to completion, or kill it at `timeout` (CommandTimeout) or on a stop
    request (Interrupted). Standard input is closed: nothing can wait for a prompt."""
    process = await asyncio.create_subprocess_exec(
        *args,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    communicate = asyncio.ensure_future(process.communicate())
    waiters: set[asyncio.Future[Any]] = {communicate}
    stopped: asyncio.Future[Any] | None = None
    if stop is not None:
        stopped = asyncio.ensure_future(stop.event.wait())
        waiters.add(stopped)
    try:
        done, _ = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if communicate in done:
            stdout, stderr = communicate.result()
            return CommandResult(process.returncode or 0, stdout, stderr)
        _kill(process)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(communicate, 5)
        if stopped is not None and stopped in done:
            raise Interrupted(f"{args[0]} stopped")
        raise CommandTimeout(args, timeout)
    finally:
        if stopped is not None:
            stopped.cancel()
        if not communicate.done():
            _kill(process)
            communicate.cancel()


def _kill(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
