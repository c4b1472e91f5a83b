"""An aircraft `--out` never loses a finished record (issue 34), tried as an operator would,
through the CLI against the loopback Wikidata look-alike:

- one lock for the whole `--out`, taken before anything there is opened: a second crawl, a
  `--refresh` or an export beside a running crawl is refused and touches nothing, and a kill -9
  of the first run afterwards loses nothing;
- the stores are checked against what the frontiers count as done: an emptied or deleted store
  is fetched again (said in one line), an unreadable one refused with the command that mends it;
- pending requests follow the endpoints of the run that sends them;
- tidy and truthful: stray temp files go, a rerun with nothing to do rewrites nothing (a
  read-only finished `--out` included), the summary counts 429s, 5xx and maxlag waits,
  `--refresh` gives what a fresh crawl gives, one SPARQL query at a time, a stop in the first
  pass leaves no store for the passes that never ran, SIGTERM is told as SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from stagecrawl.demo import wikidata
from stagecrawl.demo.wikidata import install, sparql_answer
from stagecrawl.testing.origin import TestOrigin
from tests.cli import spawn, stagecrawl
from tests.kills import kill_when, sqlite_count

STORES = ("manufacturers", "models", "specs")
FAST = ["--sparql-rate", "50", "--entities-rate", "50"]
DONE = "SELECT COUNT(*) FROM requests WHERE state = 2"


def urls(origin: TestOrigin) -> list[str]:
    return ["--sparql-url", origin.url + "/sparql", "--entities-url", origin.url + "/w/api.php"]


def crawl(
    out: Path, origin: TestOrigin, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return stagecrawl("aircraft", "crawl", "--out", str(out), *urls(origin), *FAST, *extra, env=env)


def stores(out: Path) -> dict[str, bytes]:
    return {name: (out / f"{name}.json").read_bytes() for name in STORES}


def frontier(out: Path, name: str) -> Path:
    return out / ".stagecrawl" / f"{name}.frontier.sqlite"


@pytest.fixture
def reference(origin: TestOrigin, tmp_path: Path) -> dict[str, bytes]:
    """The stores of one uninterrupted crawl of the look-alike."""
    install(origin)
    out = tmp_path / "reference"
    done = crawl(out, origin, "--batch", "1")
    assert done.returncode == 0, done.stderr
    origin.log.clear()
    return stores(out)


def one_line(stderr: str, words: str) -> str:
    lines = [line for line in stderr.splitlines() if words in line]
    assert len(lines) == 1, stderr
    return lines[0]


def test_an_emptied_and_a_deleted_store_are_fetched_again(
    origin: TestOrigin, tmp_path: Path, reference: dict[str, bytes]
) -> None:
    out = tmp_path / "out"
    assert crawl(out, origin, "--batch", "1").returncode == 0
    (out / "specs.json").write_bytes(b"")  # emptied
    (out / "models.json").unlink()  # deleted
    origin.log.clear()
    again = crawl(out, origin, "--batch", "1")
    assert again.returncode == 0, again.stderr
    assert stores(out) == reference  # every record back
    assert "fetching them again" in one_line(again.stderr, "models.json is gone")
    assert "fetching them again" in one_line(again.stderr, "specs.json lacks 5 record(s)")
    assert origin.requests_to("/w/api.php") and origin.requests_to("/sparql")
    rerun = crawl(out, origin, "--batch", "1", "--format", "json")
    assert json.loads(rerun.stdout)["nothing_to_do"] == [*STORES]


def test_a_store_its_frontier_cannot_be_checked_against_is_refused_with_the_fix(
    origin: TestOrigin, tmp_path: Path, reference: dict[str, bytes]
) -> None:
    out = tmp_path / "out"
    assert crawl(out, origin, "--batch", "1").returncode == 0
    (out / "models.json").write_text('{"Q1001": ')  # unreadable
    before = sorted((p.name, p.stat().st_mtime_ns) for p in out.rglob("*"))
    refused = crawl(out, origin, "--batch", "1")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert f"mv {out / 'models.json'} {out / 'models.json'}.broken" in refused.stderr
    assert sorted((p.name, p.stat().st_mtime_ns) for p in out.rglob("*")) == before
    (out / "models.json").rename(out / "models.json.broken")
    # An input the run reads but does not crawl must be whole: refused, naming the pass.
    specs_only = crawl(out, origin, "--batch", "1", "--stage", "specs")
    assert specs_only.returncode == 2, specs_only.stderr
    assert "--stage models" in specs_only.stderr
    assert crawl(out, origin, "--batch", "1").returncode == 0
    assert stores(out) == reference


def test_a_second_run_is_refused_before_it_touches_anything_and_a_kill_loses_nothing(
    origin: TestOrigin, tmp_path: Path, reference: dict[str, bytes]
) -> None:
    """The second run starts while the first is in its specs pass; then the first is killed
    (kill -9) having written more specs since; a plain rerun has every record."""
    slow = origin.rule("/w/api.php", stall=1.0)  # the specs pass takes 5 s, one at a time
    out = tmp_path / "out"
    args = ["aircraft", "crawl", "--out", str(out), *urls(origin), *FAST, "--batch", "1"]
    first = spawn(*args, "--concurrency", "1")
    try:
        specs = frontier(out, "specs")
        deadline = time.monotonic() + 120
        while sqlite_count(specs, DONE) < 1:
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        second = stagecrawl(*args)
        seen = sqlite_count(specs, DONE)
        kill_when(first, lambda: sqlite_count(specs, DONE), seen + 1)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert sqlite_count(specs, DONE) < 5  # killed mid-pass
    origin.rules.remove(slow)
    rerun = stagecrawl(*args)
    assert rerun.returncode == 0, rerun.stderr
    assert stores(out) == reference
    assert second.returncode == 2, second.stderr
    assert "another stagecrawl process is writing to" in one_line(second.stderr, str(out))


def test_refresh_beside_a_running_crawl_leaves_it_untouched(
    origin: TestOrigin, tmp_path: Path, reference: dict[str, bytes]
) -> None:
    origin.rule("/sparql", stall=2.0)  # 4 queries one at a time: the crawl runs for 8 s at least
    out = tmp_path / "out"
    args = ["aircraft", "crawl", "--out", str(out), *urls(origin), *FAST, "--batch", "1"]
    running = spawn(*args)
    deadline = time.monotonic() + 120
    while not origin.requests_to("/sparql"):
        assert running.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    refresh = stagecrawl(*args, "--refresh")
    export = stagecrawl("aircraft", "export", "--out", str(out))
    assert running.poll() is None  # refused while it ran, not after
    for refused in (refresh, export):
        assert refused.returncode == 2, refused.stderr
        assert "another stagecrawl process is writing to" in one_line(refused.stderr, str(out))
    assert running.wait(120) == 0, running.stderr.read() if running.stderr else ""
    assert stores(out) == reference
    assert not list((out / ".stagecrawl").glob("*.refresh.json"))  # the refresh never began
    assert not (out / "specs.csv").exists()


def test_pending_requests_go_to_the_endpoint_of_the_run_that_sends_them(
    origin: TestOrigin, other_origin: TestOrigin, tmp_path: Path, reference: dict[str, bytes]
) -> None:
    """The entity API fails for the first run (its requests wait on the retry ladder); the
    rerun names another API: the leftovers go there, not to the old host."""
    broken = origin.rule("/w/api.php", status=500)
    out = tmp_path / "out"
    first = crawl(out, origin, "--batch", "1", "--format", "json", env={"STAGECRAWL_RETRIES": "0"})
    assert first.returncode == 1, first.stderr
    assert json.loads(first.stdout)["passes"]["specs"]["ladder"] == 5
    install(other_origin)
    origin.log.clear()
    moved = [
        "aircraft", "crawl", "--out", str(out), "--batch", "1", *FAST,
        "--sparql-url", origin.url + "/sparql", "--entities-url", other_origin.url + "/w/api.php",
    ]  # fmt: skip
    again = stagecrawl(*moved)
    assert again.returncode == 0, again.stderr
    assert origin.requests_to("/w/api.php") == []  # nothing went to the old host
    assert len(other_origin.requests_to("/w/api.php")) == 5
    assert "now go to" in one_line(again.stderr, "unfinished request(s) queued by an earlier run")
    assert stores(out) == reference
    origin.rules.remove(broken)


def test_stray_temp_files_of_a_killed_write_are_removed(
    origin: TestOrigin, tmp_path: Path, reference: dict[str, bytes]
) -> None:
    """What `atomic_write` leaves when killed between its temp file and its rename (pid, ns)."""
    out = tmp_path / "out"
    assert crawl(out, origin, "--batch", "1").returncode == 0
    strays = [out / ".specs.json.4242.1700000000000000000.tmp", out / ".ATTRIBUTION.md.7.8.tmp"]
    mine = out / ".specs.json.notes.tmp"  # not a name atomic_write makes: not ours to remove
    for path in [*strays, mine]:
        path.write_bytes(b'{"half": ')
    again = crawl(out, origin, "--batch", "1")
    assert again.returncode == 0, again.stderr
    assert [p for p in strays if p.exists()] == [] and mine.exists()
    assert "removed 2 temporary file(s)" in again.stderr
    assert stores(out) == reference


def test_a_rerun_with_nothing_to_do_rewrites_nothing(
    origin: TestOrigin, tmp_path: Path, reference: dict[str, bytes]
) -> None:
    out = tmp_path / "out"
    assert crawl(out, origin, "--batch", "1").returncode == 0
    files = [out / f"{name}.json" for name in STORES] + [out / "ATTRIBUTION.md"]
    before = {path: (path.stat().st_mtime_ns, path.read_bytes()) for path in files}
    origin.log.clear()
    reruns = [
        crawl(out, origin, "--batch", "1", "--stage", stage, "--format", "json")
        for stage in ("all", "specs", "models")
    ]
    assert [again.returncode for again in reruns] == [0, 0, 0], reruns[0].stderr
    assert origin.log == []
    assert {path: (path.stat().st_mtime_ns, path.read_bytes()) for path in files} == before
    said = [json.loads(again.stdout)["nothing_to_do"] for again in reruns]
    assert said == [[*STORES], ["specs"], ["models"]]


@contextlib.contextmanager
def read_only_copy(folder: Path, where: Path) -> Iterator[Path]:
    """`folder` copied onto a tmpfs, then mounted read-only (skipped where mount is refused)."""
    where.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        copy = where / folder.name
        shutil.copytree(folder, copy)
        remounted = subprocess.run(["mount", "-o", "remount,ro", str(where)], capture_output=True)
        assert remounted.returncode == 0, remounted.stderr
        yield copy
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_a_finished_out_on_read_only_media_runs_with_nothing_to_do(
    origin: TestOrigin, tmp_path: Path, reference: dict[str, bytes]
) -> None:
    out = tmp_path / "out"
    assert crawl(out, origin, "--batch", "1").returncode == 0
    origin.log.clear()
    with read_only_copy(out, tmp_path / "media") as copy:
        again = crawl(copy, origin, "--batch", "1")
        assert again.returncode == 0, again.stderr
        assert stores(copy) == reference
    assert origin.log == []


def test_the_summary_counts_429s_5xx_and_maxlag_waits(origin: TestOrigin, tmp_path: Path) -> None:
    install(origin, maxlag_first=True)
    origin.rule("/sparql", too_many=1, retry_after="1")
    origin.rule("/w/api.php", fail_times=1, fail_status=503)
    out = tmp_path / "out"
    done = crawl(out, origin, "--batch", "2", "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["rate_limited"] == {"sparql": 1}
    assert report["server_errors"] == 1
    assert report["maxlag_waits"] == 1
    table = stagecrawl(
        "aircraft", "crawl", "--out", str(tmp_path / "table"), *urls(origin), *FAST
    ).stdout
    assert "sparql 429s" in table and "5xx answers" in table and "maxlag waits" in table


def test_refresh_gives_what_a_fresh_crawl_gives(
    origin: TestOrigin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model the source dropped (and a manufacturer with it) goes from every store."""
    install(origin)
    out = tmp_path / "out"
    assert crawl(out, origin, "--batch", "1").returncode == 0
    monkeypatch.delitem(wikidata.MODELS, "Q2001")
    monkeypatch.delitem(wikidata.MANUFACTURERS, "Q300")
    fresh = tmp_path / "fresh"
    assert crawl(fresh, origin, "--batch", "1").returncode == 0
    refreshed = crawl(out, origin, "--batch", "1", "--refresh", "--format", "json")
    assert refreshed.returncode == 0, refreshed.stderr
    assert stores(out) == stores(fresh)
    report = json.loads(refreshed.stdout)
    assert report["dropped"] == {"manufacturers": 1, "models": 1, "specs": 1}
    assert not list((out / ".stagecrawl").glob("*.refresh.json*"))


def test_an_interrupted_refresh_keeps_the_old_stores_and_a_plain_rerun_finishes_it(
    origin: TestOrigin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(origin)
    out = tmp_path / "out"
    assert crawl(out, origin, "--batch", "1").returncode == 0
    old = stores(out)
    monkeypatch.delitem(wikidata.MODELS, "Q2001")
    fresh = tmp_path / "fresh"
    assert crawl(fresh, origin, "--batch", "1").returncode == 0
    broken = origin.rule("/w/api.php", status=500)
    refresh = stagecrawl(
        "aircraft", "crawl", "--out", str(out), *urls(origin), *FAST, "--batch", "1",
        "--refresh", env={"STAGECRAWL_RETRIES": "0"},
    )  # fmt: skip
    assert refresh.returncode == 1, refresh.stderr
    assert (out / "specs.json").read_bytes() == old["specs"]  # readers see the last whole crawl
    assert "aircraft specs" in one_line(refresh.stderr, "the refresh is not finished")
    origin.rules.remove(broken)
    again = crawl(out, origin, "--batch", "1")
    assert again.returncode == 0, again.stderr
    assert stores(out) == stores(fresh)


def test_one_sparql_query_at_a_time(origin: TestOrigin, tmp_path: Path) -> None:
    install(origin)
    running = {"now": 0, "most": 0}

    async def slow_sparql(request: web.Request) -> web.StreamResponse:
        running["now"] += 1
        running["most"] = max(running["most"], running["now"])
        try:
            await asyncio.sleep(0.5)  # a slow answer: the next query must wait for it
            body = json.dumps(sparql_answer(request.query["query"]))
        finally:
            running["now"] -= 1
        return web.Response(text=body, content_type="application/sparql-results+json")

    origin.handle("/sparql", slow_sparql)
    out = tmp_path / "out"
    done = crawl(out, origin, "--batch", "1", "--concurrency", "4")
    assert done.returncode == 0, done.stderr
    assert len(origin.requests_to("/sparql")) == 4  # manufacturers, then 3 batches of models
    assert running["most"] == 1


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_in_the_first_pass_leaves_no_store_and_says_its_signal(
    origin: TestOrigin, tmp_path: Path, sig: signal.Signals
) -> None:
    install(origin)
    origin.rule("/sparql", stall=30)
    out = tmp_path / "out"
    process = spawn(
        "aircraft", "crawl", "--out", str(out), *urls(origin), env={"STAGECRAWL_GRACE_PERIOD": "1"}
    )
    deadline = time.monotonic() + 60
    while not origin.requests_to("/sparql"):
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    process.send_signal(sig)
    code = process.wait(60)
    stderr = process.stderr.read() if process.stderr else ""
    assert code == {signal.SIGINT: 130, signal.SIGTERM: 143}[sig], stderr
    assert "Traceback" not in stderr
    assert [p.name for p in out.glob("*.json")] == []  # no pass wrote a record
    assert not (out / "ATTRIBUTION.md").exists()
    stopping = one_line(stderr, "stopping: finishing")
    if sig == signal.SIGTERM:
        assert "interrupt" not in stopping and "a second signal exits now" in stopping
    else:
        assert "interrupt again to exit now" in stopping
