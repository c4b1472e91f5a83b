"""SIGINT and SIGTERM stop every phase within 2 s plus the grace period, print what was done,
exit 130 or 143, and leave no lease behind; no wait is unbounded (a Retry-After past the
maximum fails the request instead of putting the process to sleep)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from stagecrawl.testing.origin import TestOrigin
from tests.acceptance.conftest import NAMES, Mirror, dump, spawn, stagecrawl

GRACE = 1.0
ENV = {"STAGECRAWL_GRACE_PERIOD": str(GRACE)}
BOUND = 2.0 + GRACE + 1.5  # the promise, plus process start-up and teardown on a busy machine


def stop_when(
    process: subprocess.Popen[str], ready: Callable[[], bool], sig: signal.Signals
) -> tuple[int, float, str]:
    """Send `sig` once `ready()` (the phase is under way); (exit code, seconds to exit, stderr)."""
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
    return code, took, process.stderr.read() if process.stderr else ""


def held_leases(url: str) -> list[object]:
    return [e["NAME"] for e in dump(url)["TB_COMP_LIB_RUST_LIST"] if e.get("CLAIMED_BY")]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_seed_stops_with_a_summary(mirror: Mirror, tmp_path: Path, sig: signal.Signals) -> None:
    mirror.index.rule("/*", stall=30)
    url = f"sqlite:///{tmp_path / 'seed.db'}"
    process = spawn("crates", "seed", *NAMES, "--db", url, *mirror.urls(), env=ENV)
    code, took, stderr = stop_when(process, lambda: bool(mirror.index.log), sig)
    assert code == (130 if sig == signal.SIGINT else 143), stderr
    assert took < BOUND, took
    assert "seed traffic" in stderr and "Traceback" not in stderr


def test_collect_stops_and_gives_back_every_lease(mirror: Mirror, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'crawl.db'}"
    assert stagecrawl("crates", "seed", *NAMES, "--db", url, *mirror.urls()).returncode == 0
    mirror.api.rule("/api/*", stall=30)
    process = spawn("crates", "collect", "--db", url, *mirror.urls(), env=ENV)
    code, took, stderr = stop_when(process, lambda: bool(mirror.api.log), signal.SIGTERM)
    assert code == 143, stderr
    assert took < BOUND, took
    assert "returned to the queue" in stderr
    assert held_leases(url) == []  # not held for the lease's 15 minutes


def test_lock_stops(mirror: Mirror, tmp_path: Path) -> None:
    lock = tmp_path / "Cargo.lock"
    lock.write_text(
        "version = 3\n"
        + "".join(
            f'\n[[package]]\nname = "{n}"\nversion = "1.0.0"\n'
            'source = "registry+https://github.com/rust-lang/crates.io-index"\n'
            for n in NAMES
        )
    )
    mirror.index.rule("/*", stall=30)
    url = f"sqlite:///{tmp_path / 'lock.db'}"
    process = spawn("crates", "lock", "--lockfile", str(lock), "--db", url, *mirror.urls(), env=ENV)
    code, took, stderr = stop_when(process, lambda: bool(mirror.index.log), signal.SIGINT)
    assert code == 130, stderr
    assert took < BOUND, took


def test_refresh_stops(mirror: Mirror, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'refresh.db'}"
    assert stagecrawl("crates", "crawl", *NAMES[:6], "--db", url, *mirror.urls()).returncode == 0
    mirror.index.clear_rules()
    mirror.index.rule("/*", stall=30)
    seen = len(mirror.index.log)
    process = spawn("crates", "refresh", "--db", url, *mirror.urls(), env=ENV)
    code, took, stderr = stop_when(process, lambda: len(mirror.index.log) > seen, signal.SIGINT)
    assert code == 130, stderr
    assert took < BOUND, took
    assert "not checked (interrupted)" in stderr


@pytest.mark.parametrize("command", ["vulns", "dbdump"])
def test_downloads_stop(origin: TestOrigin, tmp_path: Path, command: str) -> None:
    origin.rule("/big", trickle=0.05, body=b"x" * 100_000)
    url = f"sqlite:///{tmp_path / 'dl.db'}"
    process = spawn("crates", command, "--source", origin.url + "/big", "--db", url, env=ENV)
    code, took, stderr = stop_when(process, lambda: bool(origin.log), signal.SIGTERM)
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
    code, took, stderr = stop_when(process, lambda: bool(origin.log), signal.SIGINT)
    assert code == 130, stderr
    assert took < BOUND, took
    assert "returned to the frontier" in stderr


def test_a_retry_after_beyond_the_maximum_fails_fast_and_stops_fast(
    mirror: Mirror, tmp_path: Path
) -> None:
    mirror.api.rule("/api/*", too_many=10_000, retry_after="700")
    url = f"sqlite:///{tmp_path / 'ra.db'}"
    started = time.monotonic()
    done = stagecrawl("crates", "crawl", *NAMES[:5], "--db", url, *mirror.urls(), env=ENV)
    assert done.returncode == 1, done.stderr
    assert time.monotonic() - started < 30  # never a 700 s sleep
    assert "server asked to wait 700s" in done.stderr or "cooling down" in done.stderr
    # the host stays paused: one request saw the 429, the others never reached it
    assert len(mirror.api.requests_to("/api/*")) == 1
    assert {e["PROCESSED"] for e in dump(url)["TB_COMP_LIB_RUST_LIST"]} == {30}
