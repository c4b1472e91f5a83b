"""The `malloc_arenas` setting bounds glibc's malloc arenas: the threads of a run share the
arenas it allows instead of each keeping its own (what made a crawl's peak RSS grow with its
length). Counted from glibc's own report (malloc_info) in a fresh process, where the setting
is resolved as every command resolves it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.cli import cli_env

PROBE = """
import ctypes, os, tempfile, threading
from stagecrawl.cli.common import settings_from

settings_from({})  # as a command starts: resolving the settings applies malloc_arenas

together = threading.Barrier(6)

def allocate() -> None:
    together.wait()  # all at once, each holding what it allocated until all have
    kept = [bytearray(100_000) for _ in range(50)]  # below the mmap threshold: an arena's
    together.wait()

threads = [threading.Thread(target=allocate) for _ in range(6)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
fd, path = tempfile.mkstemp()
os.close(fd)
report = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, report)
libc.fclose(report)
with open(path) as f:
    print(f.read().count("<heap nr="))
os.unlink(path)
"""


def arenas(setting: str | None) -> int:
    env = cli_env({"STAGECRAWL_MALLOC_ARENAS": setting} if setting is not None else {})
    env.pop("MALLOC_ARENA_MAX", None)  # glibc's own variable would bound it regardless
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def glibc() -> bool:
    try:
        return bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (ValueError, OSError):
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux") or not glibc(), reason="glibc only")
def test_threads_share_the_arenas_the_setting_allows() -> None:
    assert arenas(None) == 1  # the default: one arena for every thread
    assert arenas("2") == 2
    assert arenas("0") > 2  # 0: glibc's own bound (8 a core): threads get arenas of their own
