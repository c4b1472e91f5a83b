"""Kill -9 mid-run (proven: rows written and rows pending at the kill) and SIGINT: nothing
lost, nothing written twice."""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

from tests.acceptance.conftest import NAMES, Mirror, dump, spawn, stagecrawl
from tests.kills import kill_when, sqlite_count

RATES = ["--api-rate", "12", "--index-rate", "100"]
COLLECTED_EVENTS = "SELECT COUNT(*) FROM TB_COMP_LIB_RUST_LIST WHERE PROCESSED = 1"
VERSION_ROWS = "SELECT COUNT(*) FROM TB_COMP_LIB_VERSION_RUST"


def test_kill_9_at_ten_random_moments_then_resume(mirror: Mirror, tmp_path: Path) -> None:
    reference = f"sqlite:///{tmp_path / 'reference.db'}"
    done = stagecrawl("crates", "crawl", *NAMES, "--db", reference, *mirror.urls(), *RATES)
    assert done.returncode == 0, done.stderr
    expected = dump(reference)
    # every event collected into exactly one VERSION row
    assert len(expected["TB_COMP_LIB_VERSION_RUST"]) == len(expected["TB_COMP_LIB_RUST_LIST"])

    events = len(expected["TB_COMP_LIB_RUST_LIST"])
    moments = random.Random(20261202)
    for attempt in range(10):
        path = tmp_path / f"run{attempt}.db"
        url = f"sqlite:///{path}"
        process = spawn("crates", "crawl", *NAMES, "--db", url, *mirror.urls(), *RATES)
        # The kill lands after a random number of collected events (seen in the database),
        # never at the start nor after the end: at most 60% of them.
        target = moments.randint(1, int(events * 0.6))
        kill_when(process, lambda path=path: sqlite_count(path, COLLECTED_EVENTS), target)
        collected = sqlite_count(path, COLLECTED_EVENTS)
        assert 0 < collected < events, (attempt, collected)  # mid-run: written and pending
        assert sqlite_count(path, VERSION_ROWS) == collected  # each crate all or nothing
        again = stagecrawl("crates", "crawl", *NAMES, "--db", url, *mirror.urls(), *RATES)
        assert again.returncode == 0, (attempt, again.stderr)
        assert dump(url) == expected, f"run {attempt} differs from the uninterrupted run"


def test_sigint_exits_130_with_a_summary_and_a_rerun_finishes(
    mirror: Mirror, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'int.db'}"
    assert stagecrawl("crates", "seed", *NAMES, "--db", url, *mirror.urls()).returncode == 0
    process = spawn("crates", "collect", "--db", url, *mirror.urls(), "--api-rate", "4")
    # Interrupt once some crates are in (whatever the machine's load), well before the end.
    deadline = time.monotonic() + 60
    while len(mirror.api.requests_to("/api/*")) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    code = process.wait(60)
    stderr = process.stderr.read() if process.stderr else ""
    stdout = process.stdout.read() if process.stdout else ""
    assert code == 130, stderr
    assert "collect" in stdout and "returned to the queue" in stdout  # the report: stdout
    partial = dump(url)["TB_COMP_LIB_RUST_LIST"]
    assert 0 < sum(e["PROCESSED"] == 1 for e in partial) < len(partial)
    rerun = stagecrawl("crates", "collect", "--db", url, *mirror.urls(), "--api-rate", "50")
    assert rerun.returncode == 0, rerun.stderr
    assert {e["PROCESSED"] for e in dump(url)["TB_COMP_LIB_RUST_LIST"]} == {1}


def test_kill_9_inside_an_open_group_commit_batch(mirror: Mirror, tmp_path: Path) -> None:
    """Crates fetched but still waiting in the committer's batch are lost whole by a kill,
    never half-written, and the rerun redoes them: the dump equals an uninterrupted run."""
    reference = f"sqlite:///{tmp_path / 'reference.db'}"
    done = stagecrawl("crates", "crawl", *NAMES, "--db", reference, *mirror.urls(), *RATES)
    assert done.returncode == 0, done.stderr
    expected = dump(reference)

    url = f"sqlite:///{tmp_path / 'batch.db'}"
    # The batch stays open (up to 600 s, up to 1,000 crates) until the kill.
    lingering = {"STAGECRAWL_COMMIT_LINGER": "600", "STAGECRAWL_COMMIT_BATCH": "1000"}
    before = len(mirror.api.requests_to("/api/*"))  # the reference run's
    process = spawn("crates", "crawl", *NAMES, "--db", url, *mirror.urls(), *RATES, env=lingering)
    deadline = time.monotonic() + 60
    while len(mirror.api.requests_to("/api/*")) - before < len(NAMES) // 2:
        assert time.monotonic() < deadline, "the crawl never got under way"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(30)
    killed = dump(url)
    # several crates were fetched, none of them written: the batch went with the process
    assert killed["TB_COMP_LIB_VERSION_RUST"] == []
    assert killed["TB_COMP_LIB_PRODUCT_RUST"] == []
    assert killed["TB_COMP_LIB_RUST_LIST"], "seeding had registered the events"
    assert {e["PROCESSED"] for e in killed["TB_COMP_LIB_RUST_LIST"]} == {0}

    again = stagecrawl("crates", "crawl", *NAMES, "--db", url, *mirror.urls(), *RATES)
    assert again.returncode == 0, again.stderr
    assert dump(url) == expected
