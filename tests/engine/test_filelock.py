"""Lock files: a second process is refused and told who holds the lock; a lock file a dead
process left is taken over; the holder removes the file when it lets go."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from stagecrawl.engine.filelock import FileLock, exclusive
from stagecrawl.errors import StorageError

HOLD = """
import sys, time
from pathlib import Path
from stagecrawl.engine.filelock import exclusive
with exclusive(Path(sys.argv[1]), "busy"):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding `tmp_path/out.lock` until the test ends it."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path / "out.lock")], stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    yield process
    if process.poll() is None:
        process.kill()
        process.wait(30)


def test_a_second_process_is_refused_and_told_who_holds_the_lock(
    holder: subprocess.Popen[str], tmp_path: Path
) -> None:
    with pytest.raises(StorageError) as refused, exclusive(tmp_path / "out.lock", "busy"):
        pass
    assert str(refused.value) == f"busy (held by pid {holder.pid} on host {socket.gethostname()})"
    # the refused one changed nothing: the file still names its holder
    assert (tmp_path / "out.lock").read_text().split() == [socket.gethostname(), str(holder.pid)]


def test_the_lock_file_of_a_process_killed_with_9_is_taken_over_then_removed(
    holder: subprocess.Popen[str], tmp_path: Path
) -> None:
    lock_path = tmp_path / "out.lock"
    holder.send_signal(signal.SIGKILL)
    holder.wait(30)
    assert lock_path.exists()  # kill -9 leaves it
    with exclusive(lock_path, "busy") as lock:
        assert lock.previous == f"{socket.gethostname()} {holder.pid}"
        assert lock_path.read_text().split()[1] != str(holder.pid)
    assert not lock_path.exists()


def test_a_lock_ends_with_its_block_whatever_ends_it(tmp_path: Path) -> None:
    lock_path = tmp_path / "stagecrawl.db.collect.lock"
    with pytest.raises(RuntimeError), exclusive(lock_path, "busy"):
        assert lock_path.exists()
        raise RuntimeError("the crawl failed")
    assert not lock_path.exists()
    with exclusive(lock_path, "busy"):  # and the next run takes it at once
        pass


def test_a_holder_that_lets_go_between_our_open_and_our_lock_is_not_shared(
    tmp_path: Path,
) -> None:
    """The holder removes the file as it lets go: a process that opened the file just before
    must not lock that removed file (a third would then lock a new one beside it)."""
    lock_path = tmp_path / "out.lock"
    first = FileLock(lock_path)
    assert first.acquire()
    second = FileLock(lock_path)
    opened = second._open

    def open_then_the_holder_lets_go() -> int:
        fd = opened()
        first.release()
        return fd

    second._open = open_then_the_holder_lets_go  # type: ignore[method-assign]
    assert second.acquire()
    assert lock_path.exists()
    assert not FileLock(lock_path).acquire()  # whoever comes next is refused
    second.release()
    assert not lock_path.exists()


async def test_wait_takes_the_lock_once_the_holder_ends(
    holder: subprocess.Popen[str], tmp_path: Path
) -> None:
    lock = FileLock(tmp_path / "out.lock")
    with pytest.raises(StorageError, match=f"still held by pid {holder.pid}"):
        await lock.wait(0.3, "the cache", poll=0.05)
    holder.terminate()
    holder.wait(30)
    await lock.wait(30, "the cache", poll=0.05)
    assert lock.held
    lock.release()
