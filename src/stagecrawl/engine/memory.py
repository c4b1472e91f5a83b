"""The process's memory: how many arenas glibc's malloc may keep (the `malloc_arenas` setting),
and how often Python's cyclic collector runs (`quiet_collector`).

glibc gives each thread that allocates while another holds the main arena an arena of its
own, up to 8 a core, and an arena keeps what its thread freed for later. A crawl's database
work runs on a pool of threads (SQLite's executes, SQLAlchemy's rows): each grew its own arena,
and the freed space they kept made the peak RSS grow with the crawl's length (9 MB of free
arena space at 3,000 crates against 7 MB at 300, while what was in use stayed at about 21 MB).
One arena holds what every thread frees for every other to reuse: bounded by what is in use at
once, not by how long the run is. The threads take turns on the GIL anyway, so they seldom
wait for the arena's lock. Trimming after each commit (malloc_trim) also kept RSS down, but
cost 8-20 % more CPU.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os

log = logging.getLogger("stagecrawl.memory")

M_ARENA_MAX = -8  # glibc's malloc.h

# Net container allocations between two young collections during a run (Python's default: 700).
# Not more: what the young generation holds between passes is cyclic garbage still alive, and
# the crawl's cycles hold large things (a batch's rows): at 50,000 the peak RSS of a 10,000-crate
# crawl was 90 MB against 85 at 10,000 and at 700 (300 crates: 80 MB at each), at the same speed
# as 10,000 within the noise (bench/scale.py, alternating runs).
YOUNG_COLLECTION_EVERY = 10_000


def quiet_collector() -> None:
    """Run the cyclic collector less often than Python's default, from now on (a command's
    run). A crawl makes a few container objects per event and frees nearly all of them by
    reference counting (3,000 crates x 30 versions: ~8,000 objects in cycles collected over
    the run, of about a million allocated), so the collector's passes were nearly all
    overhead, and they walked the run's young containers each time (its batches of rows,
    hundreds of thousands of items): 1,400 young, 130 middle and 11 full passes, 2.9 s of a
    12 s run. At 10,000, 14 times fewer passes; CPU per row -15 to -20 % against 700 at 3,000
    and 10,000 crates. The older generations keep their thresholds (each a multiple of the
    one below)."""
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, middle, old)


def bound_malloc_arenas(arenas: int) -> bool:
    """At most `arenas` malloc arenas from now on (0: leave glibc's bound). Arenas already
    made stay, so this is called before the run starts its threads. True when glibc took it;
    False elsewhere (musl, macOS, Windows: their malloc is not glibc's)."""
    if arenas <= 0 or not _is_glibc():
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library: glibc's
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if mallopt(M_ARENA_MAX, arenas) != 1:  # mallopt answers 1 on success
        log.debug("mallopt(M_ARENA_MAX, %d) was refused", arenas)
        return False
    return True


def _is_glibc() -> bool:
    """glibc answers its version here; other C libraries have no such name."""
    try:
        return bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (ValueError, OSError, AttributeError):
        return False
