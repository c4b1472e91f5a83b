"""Progress inside a unit (issue 31): one PyPI project of 300 versions on a slow files lane
takes half a minute, all of it inside one unit; its progress must move at least every 10 s,
off a terminal (log lines on stderr) and on one (the bar's fields, on a pseudo-terminal), and
the run ends with its summary."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stagecrawl.testing.pypi_origin import PyPIOrigin, synthetic_project
from tests.acceptance.sites import CONTACT
from tests.cli import cli_env, spawn

VERSIONS = 300
FILES_RATE = "12"  # 300 metadata files: about 25 s in one unit
MOST_SILENT = 10.0  # seconds


@pytest.fixture
def origin() -> Iterator[PyPIOrigin]:
    server = PyPIOrigin()
    server.add_project(synthetic_project("big-project", VERSIONS))
    with server:
        yield server


def args(origin: PyPIOrigin, tmp_path: Path) -> list[str]:
    return [
        *("pypi", "crawl", "big-project", "--db", f"sqlite:///{tmp_path / 'p.db'}"),
        *("--index-url", f"{origin.url}/simple/", "--api-url", f"{origin.url}/"),
        *("--contact", CONTACT, "--files-rate", FILES_RATE, "--api-rate", "50"),
    ]


def moments(readings: list[tuple[float, int]]) -> list[float]:
    """The times at which the files lane's request count was seen to grow."""
    moved, last = [], -1
    for when, count in readings:
        if count > last:
            moved.append(when)
            last = count
    return moved


def assert_moves_every_10_s(readings: list[tuple[float, int]], start: float, end: float) -> None:
    moved = moments(readings)
    assert len(moved) >= 3, readings  # it was seen moving inside the one unit, not only at its end
    gaps = [b - a for a, b in zip([start, *moved], [*moved, end], strict=True)]
    assert max(gaps) <= MOST_SILENT + 1.0, gaps  # a second's slack: the poll of this test


def test_off_a_terminal_a_line_at_least_every_10_s(origin: PyPIOrigin, tmp_path: Path) -> None:
    start = time.monotonic()
    process = spawn(*args(origin, tmp_path))
    assert process.stderr is not None
    readings: list[tuple[float, int]] = []
    for line in process.stderr:
        if found := re.search(r"collecting: .* files-req=(\d+)", line):
            readings.append((time.monotonic(), int(found[1])))
    out = process.stdout.read() if process.stdout else ""
    assert process.wait(120) == 0
    end = time.monotonic()
    assert end - start > 2 * MOST_SILENT  # the run was long enough to prove anything
    assert_moves_every_10_s(readings, start, end)
    assert str(VERSIONS) in out  # the summary, on stdout


@pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal is POSIX")
def test_on_a_terminal_the_bar_moves_at_least_every_10_s(
    origin: PyPIOrigin, tmp_path: Path
) -> None:
    leader, follower = pty.openpty()
    start = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "stagecrawl", *args(origin, tmp_path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=follower,
        env=cli_env({"TERM": "xterm-256color"}),
    )
    os.close(follower)
    readings: list[tuple[float, int]] = []
    seen = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            seen = (seen + chunk)[-4096:]
            for found in re.finditer(rb"files-req=(\d+)", seen):
                readings.append((time.monotonic(), int(found[1])))
        elif process.poll() is not None:
            break
    os.close(leader)
    assert process.wait(120) == 0
    end = time.monotonic()
    assert end - start > 2 * MOST_SILENT
    assert_moves_every_10_s(readings, start, end)
