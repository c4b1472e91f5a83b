"""One file lock helper: a second process on the same output is refused, not queued."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from stagecrawl.errors import StorageError


@contextlib.contextmanager
def exclusive(lock_path: Path, busy: str) -> Iterator[None]:
    """Hold an exclusive advisory lock on `lock_path` for the block; `busy` is the one-line
    error when another process holds it. The lock dies with the process (kill -9 included)."""
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock_path, "w")  # noqa: SIM115 - held for the block's lifetime
    except OSError as exc:
        raise StorageError(f"cannot create {lock_path}: {exc.strerror}") from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StorageError(busy) from None
        handle.write(str(os.getpid()))
        handle.flush()
        yield


@contextlib.contextmanager
def exclusive_folder(folder: Path, busy: str) -> Iterator[None]:
    """Hold an exclusive advisory lock on `folder` itself for the block; `busy` is the one-line
    error when another process holds it. Nothing is created to take it, so a refused process
    leaves the folder as it found it, and a folder on read-only media can be locked too. The
    lock dies with the process (kill -9 included)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise StorageError(f"cannot open {folder}: {exc.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StorageError(busy) from None
        yield
    finally:
        os.close(fd)  # closing the only descriptor releases the lock
