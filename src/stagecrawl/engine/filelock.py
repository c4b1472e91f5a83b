"""One file lock helper: a second process on the same output is refused (or waits, bounded),
never let in beside the first.

The lock is an advisory `flock` on the file, so the kernel decides who holds it: it dies with
its process (kill -9 included), and a lock file a dead process left behind is simply taken
over by the next run — no PID is trusted for that (a PID may have been reused since, and
a process on another host is not ours to ask). The file names its holder (`host pid`), only to
say who holds it and whom a run took over from. The holder removes the file when it lets go,
so a run that ends in any way but kill -9 leaves none; after a kill -9 the next run takes the
file over and removes it in turn.

Another host: on a shared filesystem Linux carries `flock` over NFS as a byte-range lock
(NFSv4, or NLM for v3), so a holder there holds it here too; a filesystem that cannot lock is
a one-line error, never a run without the lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from stagecrawl.errors import StorageError

log = logging.getLogger("stagecrawl.filelock")

# Opening the file and locking it are two steps: the holder may remove the file between them,
# and then the lock we got is on a file nobody else sees. That is retried, a few times.
REOPEN_ATTEMPTS = 20


def holder_text() -> str:
    """How a lock file names its holder."""
    return f"{socket.gethostname()} {os.getpid()}"


def describe_holder(text: str | None) -> str:
    """`host pid` as words: `pid 123 on host h` (or what the file said, if it is not that)."""
    parts = (text or "").split()
    if len(parts) == 2 and parts[1].isdigit():
        return f"pid {parts[1]} on host {parts[0]}"
    return "an unknown process" if not text else repr(text[:80])


class FileLock:
    """An exclusive lock on `path` held by this process, taken without waiting (`acquire`);
    `previous` is what the file said when this process took it over from a holder that ended
    without removing it (None when there was no such file)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.previous: str | None = None
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> bool:
        """Take the lock if nobody holds it: True once held, False when another process holds
        it (`holder()` says who). A lock that cannot be made is a StorageError."""
        if self._fd is not None:
            return True
        for _ in range(REOPEN_ATTEMPTS):
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            except OSError as exc:  # ENOLCK, EOPNOTSUPP: a filesystem that cannot lock
                os.close(fd)
                raise StorageError(f"cannot lock {self.path}: {exc.strerror or exc}") from None
            if not self._still_named(fd):
                os.close(fd)  # the holder removed it meanwhile: lock the file now there
                continue
            self._fd = fd
            self._claim(fd)
            return True
        raise StorageError(f"cannot lock {self.path}: it is removed and made again too fast")

    def _open(self) -> int:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            raise StorageError(f"cannot create {self.path}: {exc.strerror or exc}") from None

    def _still_named(self, fd: int) -> bool:
        """Whether `path` is still the file `fd` locked (not removed or replaced since)."""
        try:
            named = os.stat(self.path)
        except FileNotFoundError:
            return False
        mine = os.fstat(fd)
        return (named.st_dev, named.st_ino) == (mine.st_dev, mine.st_ino)

    def _claim(self, fd: int) -> None:
        """Write this process into the file; what it said before was a holder gone."""
        left = os.pread(fd, 4096, 0).decode(errors="replace").strip()
        if left:
            self.previous = left
            log.info(
                "took over %s, left by %s, which ended without removing it",
                self.path,
                describe_holder(left),
            )
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{holder_text()}\n".encode(), 0)

    def holder(self) -> str | None:
        """What the file says of its holder (`host pid`), if it can be read."""
        try:
            return self.path.read_text(errors="replace").strip() or None
        except OSError:
            return None

    def release(self) -> None:
        """Remove the file, then let go: whoever opened it meanwhile sees it is gone
        (`_still_named`) and locks a new one."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if self._still_named(fd):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
        finally:
            os.close(fd)

    async def wait(self, seconds: float, what: str, poll: float = 0.2) -> None:
        """Acquire, waiting up to `seconds` for the holder to let go (saying so once); a
        StorageError naming the holder after that. The caller's stop cancels the wait."""
        deadline = time.monotonic() + seconds
        said = False
        while not self.acquire():
            if time.monotonic() >= deadline:
                raise StorageError(
                    f"{what}: {self.path} is still held by {describe_holder(self.holder())}"
                    f" after {seconds:g}s"
                )
            if not said:
                log.warning("%s: waiting for %s to finish", what, describe_holder(self.holder()))
                said = True
            await asyncio.sleep(poll)


@contextlib.contextmanager
def exclusive(lock_path: Path, busy: str) -> Iterator[FileLock]:
    """Hold an exclusive lock on `lock_path` for the block; `busy` is the one-line error when
    another process holds it (the holder's pid and host are added)."""
    lock = FileLock(lock_path)
    if not lock.acquire():
        raise StorageError(f"{busy} (held by {describe_holder(lock.holder())})")
    try:
        yield lock
    finally:
        lock.release()


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
