"""The kernel's promises, proved for every registry through its own command line (crates, PyPI
and Go on their look-alikes): a kill -9 at any moment then a plain rerun equals a clean run; a
SIGINT gives every lease back and a rerun finishes; SQLite takes one collect; a hostile origin
fails units, never the run, and its 429s and 5xx are waited out; a database lost mid-run is
waited out by every worker; a killed worker's leases are taken back by a live one; a bad name
is one line and exit 2 with the database untouched; the SQLite file alone holds every commit
once a command exits."""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.sites import Site, dump_tables, site_for
from tests.cli import spawn, stagecrawl
from tests.kills import kill_when, running, sqlite_count
from tests.services import POSTGRES_URL, drop_stagecrawl_tables

STRAY = ("Traceback", "Task exception was never retrieved", "did not finish within the grace")


@pytest.fixture(params=["crates", "pypi", "go"])
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Site]:
    with site_for(request.param, tmp_path / "mirror") as made:
        yield made


def crawl(site: Site, url: str, *more: str) -> None:
    done = stagecrawl(site.cli, "crawl", *site.names, "--db", url, *site.flags, *more)
    assert done.returncode == 0, done.stderr


def no_stray_output(err: str) -> None:
    for stray in STRAY:
        assert stray not in err, err


def test_kill_9_at_random_moments_then_a_rerun_equals_a_clean_run(
    site: Site, tmp_path: Path
) -> None:
    reference = f"sqlite:///{tmp_path / 'reference.db'}"
    crawl(site, reference, *site.fast)
    expected = site.dump(reference)
    events = len(expected[f"TB_COMP_LIB_{site.code}_LIST"])
    moments = random.Random(20261206)
    for attempt in range(3):
        path = tmp_path / f"run{attempt}.db"
        url = f"sqlite:///{path}"
        process = spawn(site.cli, "crawl", *site.names, "--db", url, *site.flags, *site.slow)
        target = moments.randint(1, int(events * 0.6))
        kill_when(process, lambda path=path: sqlite_count(path, site.collected_sql()), target)
        collected = sqlite_count(path, site.collected_sql())
        assert 0 < collected < events, (attempt, collected)  # mid-run: written and pending
        crawl(site, url, *site.fast)
        assert site.dump(url) == expected, f"run {attempt} differs from the uninterrupted run"


def test_sigint_gives_every_lease_back_and_a_rerun_finishes(site: Site, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'int.db'}"
    seeded = stagecrawl(site.cli, "seed", *site.names, "--db", url, *site.flags)
    assert seeded.returncode == 0, seeded.stderr
    process = spawn(site.cli, "collect", "--db", url, *site.flags, *site.slow)
    deadline = time.monotonic() + 60
    while sqlite_count(tmp_path / "int.db", site.collected_sql()) < 1:
        assert time.monotonic() < deadline, "the collect never wrote a unit"
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    code = process.wait(60)
    stdout = process.stdout.read() if process.stdout else ""
    stderr = process.stderr.read() if process.stderr else ""
    assert code == 130, stderr
    no_stray_output(stderr)
    assert "returned to the queue" in stdout  # the report: stdout
    listed = site.dump(url)[f"TB_COMP_LIB_{site.code}_LIST"]
    leased = sqlite_count(
        tmp_path / "int.db",
        f"SELECT COUNT(*) FROM TB_COMP_LIB_{site.code}_LIST WHERE CLAIMED_BY IS NOT NULL",
    )
    assert leased == 0  # every lease given back at the stop
    assert 0 < sum(e["PROCESSED"] == 1 for e in listed) < len(listed)
    rerun = stagecrawl(site.cli, "collect", "--db", url, *site.flags, *site.fast)
    assert rerun.returncode == 0, rerun.stderr
    assert {e["PROCESSED"] for e in site.dump(url)[f"TB_COMP_LIB_{site.code}_LIST"]} == {1}


def test_sqlite_takes_one_collect_at_a_time(site: Site, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'one.db'}"
    assert stagecrawl(site.cli, "seed", *site.names, "--db", url, *site.flags).returncode == 0
    mark = site.requests(site.collect_path)
    first = spawn(site.cli, "collect", "--db", url, *site.flags, *site.slow)
    deadline = time.monotonic() + 60
    while site.collect_requests_since(mark) < 1:
        assert time.monotonic() < deadline, "the first collect never got under way"
        time.sleep(0.05)
    second = stagecrawl(site.cli, "collect", "--db", url, *site.flags, *site.fast)
    first.send_signal(signal.SIGTERM)
    assert first.wait(60) == 143
    assert second.returncode == 2, second.stderr
    [line] = second.stderr.strip().splitlines()
    assert "another stagecrawl collect is running" in line and "SQLite takes one writer" in line


def test_a_hostile_origin_fails_units_not_the_run(site: Site, tmp_path: Path) -> None:
    """429s with a Retry-After and a burst of 503s are waited out; a unit its origin keeps
    failing goes to the retry ladder with the reason, and every other unit is written."""
    victim = site.names[1]
    pattern = f"*{victim}*"
    site.origin.rule(site.collect_path, too_many=3, retry_after="1")
    site.origin.rule(site.collect_path, fail_times=4, fail_status=503)
    for origin in site.origins:
        origin.rule(pattern, status=500)  # every request about the victim, always
    url = f"sqlite:///{tmp_path / 'hostile.db'}"
    done = stagecrawl(site.cli, "crawl", *site.names, "--db", url, *site.flags, *site.fast)
    assert done.returncode == 1, done.stderr  # the victim failed: said in the exit code
    no_stray_output(done.stderr)
    assert f"{victim}:" in done.stderr and "500" in done.stderr  # its reason, one line
    dumped = site.dump(url)
    versions = {r["PRODUCT_KEY"] for r in dumped[f"TB_COMP_LIB_VERSION_{site.code}"]}
    assert len(versions) == len(site.names) - 1 and victim.lower() not in versions


@pytest.mark.slow
def test_a_database_lost_mid_run_is_waited_out_by_every_worker(site: Site) -> None:
    """PostgreSQL stopped for a few seconds under two workers: both wait, none fails, and the
    data equals a clean run's (the outage is on a server of the test's own)."""
    from tests.private_servers import PrivatePostgres, private_server

    with private_server("postgresql") as server:
        assert isinstance(server, PrivatePostgres)
        clean, lost = server.create_database("clean"), server.create_database("lost")
        crawl(site, clean, *site.fast)
        expected = site.dump(clean)
        assert stagecrawl(site.cli, "seed", *site.names, "--db", lost, *site.flags).returncode == 0
        mark = site.requests(site.collect_path)
        crew = [
            spawn(site.cli, "collect", "--db", lost, *site.flags, *site.slow,
                  "--concurrency", "2", env={"STAGECRAWL_OUTAGE_SECONDS": "60"})
            for _ in range(2)
        ]  # fmt: skip
        deadline = time.monotonic() + 60
        while site.collect_requests_since(mark) < 6 or not running(lost, crew):
            assert time.monotonic() < deadline, "the workers never got under way"
            time.sleep(0.1)
        server.stop()
        time.sleep(6)
        server.start()
        for worker in crew:
            _out, err = worker.communicate(timeout=240)
            assert worker.returncode == 0, err
            no_stray_output(err)
        assert site.dump(lost) == expected


@pytest.fixture
def shared_db() -> Iterator[str]:
    drop_stagecrawl_tables(POSTGRES_URL)
    yield POSTGRES_URL
    drop_stagecrawl_tables(POSTGRES_URL)


def test_a_killed_workers_leases_are_taken_back(site: Site, shared_db: str) -> None:
    """Worker A is killed holding leases; worker B, started after, waits for A's heartbeat
    to go silent, takes A's units back and finishes everything."""
    assert stagecrawl(site.cli, "seed", *site.names, "--db", shared_db, *site.flags).returncode == 0
    beat = {"STAGECRAWL_HEARTBEAT_SECONDS": "1"}
    mark = site.requests(site.collect_path)
    a = spawn(site.cli, "collect", "--db", shared_db, *site.flags, *site.slow, env=beat)
    deadline = time.monotonic() + 60
    while site.collect_requests_since(mark) < 3:
        assert time.monotonic() < deadline, "worker A never got under way"
        time.sleep(0.05)
    a.send_signal(signal.SIGKILL)
    a.wait(30)
    b = stagecrawl(site.cli, "collect", "--db", shared_db, *site.flags, *site.fast, env=beat)
    assert b.returncode == 0, b.stderr
    no_stray_output(b.stderr)
    listed = site.dump(shared_db)[f"TB_COMP_LIB_{site.code}_LIST"]
    assert {e["PROCESSED"] for e in listed} == {1}


@pytest.mark.parametrize("bad", ["../../etc/passwd", "a/b", "", "x" * 250])
def test_a_bad_name_is_one_line_and_exit_2(site: Site, tmp_path: Path, bad: str) -> None:
    url = f"sqlite:///{tmp_path / 'bad.db'}"
    crawl(site, url, "--limit", "1", *site.fast)
    before = site.dump(url)
    done = stagecrawl(site.cli, "crawl", bad, "--db", url, *site.flags)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert site.dump(url) == before


def test_the_database_file_alone_holds_every_commit_after_each_command(
    site: Site, tmp_path: Path
) -> None:
    """A copy of stagecrawl.db without its -wal (a backup, a file handed on) lacks nothing a
    command wrote: each merges its log into the file as it exits, also when the phase that
    wrote has let its database go before the exit (refresh's did: the feed cursor was lost)."""
    url = f"sqlite:///{tmp_path / 'alone.db'}"
    for command in (["crawl", *site.names], ["refresh"], ["refresh"]):
        done = stagecrawl(site.cli, *command, "--db", url, *site.flags, *site.fast)
        assert done.returncode == 0, done.stderr
        copy = tmp_path / "copy.db"
        copy.write_bytes((tmp_path / "alone.db").read_bytes())
        assert dump_tables(f"sqlite:///{copy}", site.cli) == dump_tables(url, site.cli), command
