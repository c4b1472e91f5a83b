"""SIGINT and SIGTERM stop every phase within 2 s plus the grace period, print what was done,
exit 130 or 143, and leave no lease behind; no wait is unbounded (a Retry-After past the
maximum fails the request instead of putting the process to sleep).

Waiting is not in flight: a unit that waits for a lane token, a budget window or a host's 429
cooldown is given back at once, and the origin's own request log shows that not one request
was sent after the signal; a plain rerun then finishes the work."""

from __future__ import annotations

import contextlib
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

from stagecrawl.demo.wikidata import install
from stagecrawl.testing.dbdump import build_dump
from stagecrawl.testing.origin import TestOrigin
from stagecrawl.testing.registry import write_cargo_lock
from tests.acceptance.conftest import NAMES, Mirror, dump, spawn, stagecrawl

GRACE = 1.0
ENV = {"STAGECRAWL_GRACE_PERIOD": str(GRACE)}
# Far short of every wait these phases hold (a 30 s stall, 29 s of seeding or lock at 1/s,
# 10 s a request at 0.1/s, a 600 s budget, a 120 s Retry-After, a 5,000 s trickle), so a
# stop that waited one out fails, and far from what a loaded machine's start-up and teardown
# add. How fast a stop is (the 2 s) is bench/stops.py's to measure, beside a baseline.
BOUND = 15.0


class Stopped(NamedTuple):
    code: int
    took: float  # seconds from the signal to the exit
    stderr: str
    sent: float  # time.monotonic() when the signal was sent (the origins log on that clock)
    stdout: str  # the report


def stop_when(
    process: subprocess.Popen[str], ready: Callable[[], bool], sig: signal.Signals
) -> Stopped:
    """Send `sig` once `ready()` (the phase is under way), wait for the exit."""
    deadline = time.monotonic() + 60
    while not ready():
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        assert time.monotonic() < deadline, "the phase never started"
        time.sleep(0.02)
    time.sleep(0.2)
    sent = time.monotonic()
    process.send_signal(sig)
    code = process.wait(60)
    took = time.monotonic() - sent
    stderr = process.stderr.read() if process.stderr else ""
    return Stopped(code, took, stderr, sent, process.stdout.read() if process.stdout else "")


def exit_code(sig: signal.Signals) -> int:
    return 130 if sig == signal.SIGINT else 143


def sent_after(origin: TestOrigin, moment: float) -> list[str]:
    """The paths `origin` received after `moment`, by its own log."""
    return [r.path for r in list(origin.log) if r.time >= moment]


def held_leases(url: str) -> list[object]:
    return [e["NAME"] for e in dump(url)["TB_COMP_LIB_RUST_LIST"] if e.get("CLAIMED_BY")]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_seed_stops_with_a_summary(mirror: Mirror, tmp_path: Path, sig: signal.Signals) -> None:
    mirror.index.rule("/*", stall=30)
    url = f"sqlite:///{tmp_path / 'seed.db'}"
    process = spawn("crates", "seed", *NAMES, "--db", url, *mirror.urls(), env=ENV)
    code, took, stderr, _, stdout = stop_when(process, lambda: bool(mirror.index.log), sig)
    assert code == (130 if sig == signal.SIGINT else 143), stderr
    assert took < BOUND, took
    assert "seed traffic" in stdout and "Traceback" not in stderr


def test_collect_stops_and_gives_back_every_lease(mirror: Mirror, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'crawl.db'}"
    assert stagecrawl("crates", "seed", *NAMES, "--db", url, *mirror.urls()).returncode == 0
    mirror.api.rule("/api/*", stall=30)
    process = spawn("crates", "collect", "--db", url, *mirror.urls(), env=ENV)
    code, took, stderr, _, stdout = stop_when(process, lambda: bool(mirror.api.log), signal.SIGTERM)
    assert code == 143, stderr
    assert took < BOUND, took
    assert "returned to the queue" in stdout
    assert held_leases(url) == []  # not held for the lease's 15 minutes


def test_lock_stops(mirror: Mirror, tmp_path: Path) -> None:
    lock = write_cargo_lock(tmp_path / "Cargo.lock", NAMES)
    mirror.index.rule("/*", stall=30)
    url = f"sqlite:///{tmp_path / 'lock.db'}"
    process = spawn("crates", "lock", "--lockfile", str(lock), "--db", url, *mirror.urls(), env=ENV)
    code, _, stderr, _, stdout = stop_when(process, lambda: bool(mirror.index.log), signal.SIGINT)
    assert code == 130, stderr
    # The index request on the wire got the grace period and was then cancelled by the phase
    # itself, which reports what it did; not cut off by the command's watchdog (grace + 2 s),
    # which prints no report. (How fast, in seconds, is bench/stops.py's business.)
    assert "did not finish within the grace period" in stderr, stderr
    assert "interrupted" in stdout and "lock totals" in stdout, stdout
    assert "stopped after the grace period" not in stdout + stderr
    assert "Traceback" not in stderr


def test_refresh_stops(mirror: Mirror, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'refresh.db'}"
    assert stagecrawl("crates", "crawl", *NAMES[:6], "--db", url, *mirror.urls()).returncode == 0
    mirror.index.clear_rules()
    mirror.index.rule("/*", stall=30)
    seen = len(mirror.index.log)
    process = spawn("crates", "refresh", "--db", url, *mirror.urls(), env=ENV)
    stopped = stop_when(process, lambda: len(mirror.index.log) > seen, signal.SIGINT)
    assert stopped.code == 130, stopped.stderr
    assert stopped.took < BOUND, stopped.took
    assert "not checked (interrupted)" in stopped.stdout


@pytest.mark.parametrize("command", ["vulns", "dbdump"])
def test_downloads_stop(origin: TestOrigin, tmp_path: Path, command: str) -> None:
    origin.rule("/big", trickle=0.05, body=b"x" * 100_000)
    url = f"sqlite:///{tmp_path / 'dl.db'}"
    process = spawn("crates", command, "--source", origin.url + "/big", "--db", url, env=ENV)
    code, took, stderr, *_ = stop_when(process, lambda: bool(origin.log), signal.SIGTERM)
    assert code == 143, stderr
    assert took < BOUND, took
    assert "Traceback" not in stderr


def test_aircraft_stops_with_a_summary(origin: TestOrigin, tmp_path: Path) -> None:
    origin.rule("/sparql", stall=30)
    process = spawn(
        "aircraft",
        "crawl",
        "--out",
        str(tmp_path / "air"),
        "--sparql-url",
        origin.url + "/sparql",
        "--entities-url",
        origin.url + "/w/api.php",
        env=ENV,
    )
    code, took, stderr, _, stdout = stop_when(process, lambda: bool(origin.log), signal.SIGINT)
    assert code == 130, stderr
    assert took < BOUND, took
    assert "returned to the frontier" in stdout


def test_a_retry_after_beyond_the_maximum_fails_fast_and_stops_fast(
    mirror: Mirror, tmp_path: Path
) -> None:
    mirror.api.rule("/api/*", too_many=10_000, retry_after="700")
    url = f"sqlite:///{tmp_path / 'ra.db'}"
    started = time.monotonic()
    done = stagecrawl("crates", "crawl", *NAMES[:5], "--db", url, *mirror.urls(), env=ENV)
    assert done.returncode == 1, done.stderr
    assert time.monotonic() - started < 30  # never a 700 s sleep
    assert "asked for a pause until" in done.stderr and "(server Retry-After)" in done.stderr
    # the host stays paused: one request saw the 429, the others never reached it
    assert len(mirror.api.requests_to("/api/*")) == 1
    # not attempted: the events wait for the pause off the retry ladder (issue 21)
    assert {e["PROCESSED"] for e in dump(url)["TB_COMP_LIB_RUST_LIST"]} == {0}


def seeded(mirror: Mirror, names: list[str]) -> bool:
    """Every name was asked of the index: from now on only the phase under test sends (a
    request granted before the signal may reach the origin a moment after it)."""
    return len(mirror.index.log) >= len(names)


def collected(url: str) -> set[int]:
    return {e["PROCESSED"] for e in dump(url)["TB_COMP_LIB_RUST_LIST"]}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_seeding_at_one_request_a_second_sends_nothing_after_the_stop(
    mirror: Mirror, tmp_path: Path, sig: signal.Signals
) -> None:
    url = f"sqlite:///{tmp_path / 'seed.db'}"
    args = ("crates", "seed", *NAMES, "--db", url, *mirror.urls())
    process = spawn(*args, "--index-rate", "1", env=ENV)
    stopped = stop_when(process, lambda: len(mirror.index.log) >= 2, sig)
    assert stopped.code == exit_code(sig), stopped.stderr
    assert stopped.took < BOUND, stopped.took
    assert sent_after(mirror.index, stopped.sent) == []
    # the waiting seeds were given back, and the summary says why: our own pace
    assert "waiting on our index lane" in stopped.stderr, stopped.stderr
    assert "returned to the seed queue" in stopped.stdout
    assert "waiting on our index lane" in stopped.stdout, stopped.stdout
    assert "Traceback" not in stopped.stderr
    assert len(mirror.index.log) < len(NAMES)
    again = stagecrawl(*args, env=ENV)
    assert again.returncode == 0, again.stderr
    assert {e["NAME"] for e in dump(url)["TB_COMP_LIB_RUST_LIST"]} == set(NAMES)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_collecting_at_a_tenth_of_a_request_a_second_stops_at_once(
    mirror: Mirror, tmp_path: Path, sig: signal.Signals
) -> None:
    names = NAMES[:8]
    url = f"sqlite:///{tmp_path / 'slow.db'}"
    args = ("crates", "crawl", *names, "--db", url, *mirror.urls())
    process = spawn(*args, "--api-rate", "0.1", env=ENV)
    stopped = stop_when(process, lambda: seeded(mirror, names) and len(mirror.api.log) >= 1, sig)
    assert stopped.code == exit_code(sig), stopped.stderr
    assert stopped.took < BOUND, stopped.took  # not the grace period: nothing was on the wire
    assert sent_after(mirror.api, stopped.sent) == []
    assert sent_after(mirror.index, stopped.sent) == []
    assert "returned to the queue" in stopped.stdout and "Traceback" not in stopped.stderr
    assert "waiting on our api lane" in stopped.stdout, stopped.stdout  # ours, not the server's
    assert held_leases(url) == []
    assert max(collected(url)) < 30  # given back, not failed: no crate is on the ladder
    again = stagecrawl(*args, env=ENV)
    assert again.returncode == 0, again.stderr
    assert collected(url) <= {1, 2}  # every event collected (or skipped as known)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_budget_wait_is_ours_and_stops_at_once(
    mirror: Mirror, tmp_path: Path, sig: signal.Signals
) -> None:
    names = NAMES[:6]
    url = f"sqlite:///{tmp_path / 'budget.db'}"
    args = ("crates", "crawl", *names, "--db", url, *mirror.urls())
    process = spawn(*args, "--api-rate", "20", "--api-budget", "2/600s", env=ENV)
    stopped = stop_when(process, lambda: seeded(mirror, names) and len(mirror.api.log) >= 2, sig)
    assert stopped.code == exit_code(sig), stopped.stderr
    assert stopped.took < BOUND, stopped.took
    assert sent_after(mirror.api, stopped.sent) == []
    # the log names our own budget as the cause, never the server
    assert "our request budget" in stopped.stderr, stopped.stderr
    assert "server asked" not in stopped.stderr
    assert "waiting on our api lane's budget" in stopped.stdout, stopped.stdout
    assert "Retry-After" not in stopped.stdout
    assert len(mirror.api.log) == 2
    assert max(collected(url)) < 30
    again = stagecrawl(*args, env=ENV)
    assert again.returncode == 0, again.stderr
    assert collected(url) <= {1, 2}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_429_cooldown_stops_at_once(mirror: Mirror, tmp_path: Path, sig: signal.Signals) -> None:
    names = NAMES[:6]
    url = f"sqlite:///{tmp_path / 'cool.db'}"
    mirror.api.rule("/api/*", too_many=10_000, retry_after="120")
    args = ("crates", "crawl", *names, "--db", url, *mirror.urls())
    process = spawn(*args, "--api-rate", "20", env=ENV)
    stopped = stop_when(process, lambda: seeded(mirror, names) and len(mirror.api.log) >= 1, sig)
    assert stopped.code == exit_code(sig), stopped.stderr
    assert stopped.took < BOUND, stopped.took
    assert sent_after(mirror.api, stopped.sent) == []
    assert len(mirror.api.log) == 1  # the host is paused: only the first saw the 429
    assert "cooldown" in stopped.stderr
    # the summary names who asked for the pause: the server, by its Retry-After
    assert "waiting on the server's Retry-After" in stopped.stdout, stopped.stdout
    assert max(collected(url)) < 30  # the 429's crate too waits, it does not fail
    mirror.api.clear_rules()
    again = stagecrawl(*args, env=ENV)
    assert again.returncode == 0, again.stderr
    assert collected(url) <= {1, 2}


def test_lock_waiting_for_the_index_stops_at_once(mirror: Mirror, tmp_path: Path) -> None:
    lock = write_cargo_lock(tmp_path / "Cargo.lock", NAMES)
    url = f"sqlite:///{tmp_path / 'lock.db'}"
    args = ("crates", "lock", "--lockfile", str(lock), "--db", url, *mirror.urls())
    process = spawn(*args, "--index-rate", "1", env=ENV)
    stopped = stop_when(process, lambda: len(mirror.index.log) >= 2, signal.SIGTERM)
    assert stopped.code == 143, stopped.stderr
    assert stopped.took < BOUND, stopped.took
    assert sent_after(mirror.index, stopped.sent) == []
    assert "Traceback" not in stopped.stderr
    again = stagecrawl(*args, env=ENV)
    assert again.returncode in (0, 1), again.stderr  # 1: pins the index does not list
    assert dump(url)["TB_COMP_LIB_RUST_LIST"]


def test_a_stop_while_a_large_lock_file_is_parsed_is_honoured_at_once(tmp_path: Path) -> None:
    """300,000 pins take seconds to parse (pip's requirements grammar, line by line): the
    parse runs off the loop, so the stop does not wait for it."""
    lock = tmp_path / "requirements.txt"
    lock.write_text("".join(f"pin-{i:06d}==1.{i % 9}\n" for i in range(300_000)))
    url = f"sqlite:///{tmp_path / 'lock.db'}"
    process = spawn("pypi", "lock", "--lockfile", str(lock), "--db", url, env=ENV)
    threads = Path(f"/proc/{process.pid}/task")
    # under way: the parse's thread is running (a loaded machine may take more than a second
    # to start the command at all, and a signal before its handler kills it outright)
    stopped = stop_when(process, lambda: len(list(threads.iterdir())) >= 2, signal.SIGINT)
    assert stopped.code == 130, stopped.stderr
    assert stopped.took < BOUND, stopped.took
    assert "Traceback" not in stopped.stderr
    assert not (tmp_path / "lock.db").exists()  # nothing was registered: nothing opened


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_dump_load_polls_the_stop(tmp_path: Path, sig: signal.Signals) -> None:
    source = tmp_path / "db-dump.tar.gz"
    build_dump(source, crates=1500, versions_per=40)  # 60,000 versions: a load of seconds
    db_file = tmp_path / "dump.db"
    url = f"sqlite:///{db_file}"
    args = ("crates", "dbdump", "--source", str(source), "--db", url)
    process = spawn(*args, env=ENV)
    stopped = stop_when(process, db_file.exists, sig)
    assert stopped.code == exit_code(sig), stopped.stderr
    assert stopped.took < BOUND, stopped.took  # not the rest of the load
    assert "Traceback" not in stopped.stderr
    assert versions_in(db_file) < 60_000  # stopped part way
    again = stagecrawl(*args, env=ENV)
    assert again.returncode == 0, again.stderr
    assert versions_in(db_file) == 60_000


def versions_in(db_file: Path) -> int:
    with contextlib.closing(sqlite3.connect(db_file)) as conn:
        try:
            return int(conn.execute("SELECT COUNT(*) FROM TB_COMP_LIB_VERSION_RUST").fetchone()[0])
        except sqlite3.OperationalError:  # stopped before the table was made
            return 0


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_aircraft_waiting_for_its_lane_stops_at_once(
    origin: TestOrigin, tmp_path: Path, sig: signal.Signals
) -> None:
    install(origin)
    out = tmp_path / "air"
    args = ("aircraft", "crawl", "--out", str(out), "--sparql-url", origin.url + "/sparql",
            "--entities-url", origin.url + "/w/api.php", "--batch", "1")  # fmt: skip
    process = spawn(*args, "--sparql-rate", "0.05", "--entities-rate", "0.05", env=ENV)
    stopped = stop_when(process, lambda: len(origin.log) >= 2, sig)
    assert stopped.code == exit_code(sig), stopped.stderr
    assert stopped.took < BOUND, stopped.took
    assert sent_after(origin, stopped.sent) == []
    assert "returned to the frontier" in stopped.stdout and "Traceback" not in stopped.stderr
    again = stagecrawl(*args, "--sparql-rate", "50", "--entities-rate", "50", env=ENV)
    assert again.returncode == 0, again.stderr  # (the same run, only faster)
    assert (out / "specs.json").exists()
