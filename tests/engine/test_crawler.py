"""The crawler end to end against the loopback origin: dedup, completion, backpressure,
failures, kill -9 and resume, SIGINT."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from stagecrawl.engine import crawler as crawler_module
from stagecrawl.engine.crawler import Crawler, JsonStoreSink
from stagecrawl.engine.fetcher import Fetcher, FetchSettings
from stagecrawl.engine.frontier import DONE, PENDING, Frontier
from stagecrawl.engine.jsonstore import JsonStore
from stagecrawl.engine.request import Item, Request, canonical_url
from stagecrawl.engine.work import LoopSettings
from stagecrawl.testing.origin import TestOrigin
from stagecrawl.testing.stages import FlatStage, LinkStage, NullSink, write_link_pages
from tests.kills import kill_when, sqlite_count


def test_canonical_url_is_the_dedup_key() -> None:
    assert canonical_url("HTTP://Example.ORG:80/a?b=2&a=1#frag") == "http://example.org/a?a=1&b=2"
    assert Request("http://x/a?b=1&a=2").key == Request("http://X:80/a?a=2&b=1").key
    assert canonical_url("http://x/A") != canonical_url("http://x/a")


async def crawl(
    origin: TestOrigin, out: Path, stage: LinkStage, concurrency: int = 8
) -> tuple[JsonStore, object]:
    store = JsonStore(out / "pages.json")
    frontier = Frontier(out / "frontier.sqlite")
    async with Fetcher(FetchSettings(backoff_base=0.01, retries=1)) as fetcher:
        crawler = Crawler(
            stage,
            fetcher,
            JsonStoreSink({"pages": store}),
            frontier,
            LoopSettings(concurrency=concurrency),
        )
        summary = await crawler.run()
    store.close()
    frontier.close()
    return store, summary


async def test_every_page_once_despite_cycles(origin: TestOrigin, tmp_path: Path) -> None:
    write_link_pages(tmp_path / "site", 120, fanout=4)
    origin.root = tmp_path / "site"
    store, summary = await crawl(origin, tmp_path / "out", LinkStage(origin.url))
    assert len(store) == 120
    paths = [r.path for r in origin.log]
    assert len(paths) == len(set(paths)) == 120  # each page fetched exactly once
    # 120 pages × 4 links offered, 119 of them new (page 0 was the start request)
    assert summary.duplicates == 120 * 4 - 119  # type: ignore[attr-defined]


async def test_a_chain_is_not_mistaken_for_a_finished_crawl(
    origin: TestOrigin, tmp_path: Path
) -> None:
    # Each page links only to the next, so the queue is empty every time a worker is busy:
    # a crawler that stopped on an empty queue would end after the first page.
    write_link_pages(tmp_path / "site", 40, fanout=1)
    origin.root = tmp_path / "site"
    origin.rule("/pages/*", stall=0.01)
    store, _ = await crawl(origin, tmp_path / "out", LinkStage(origin.url), concurrency=4)
    assert len(store) == 40


async def test_failures_are_counted_and_the_rest_goes_on(
    origin: TestOrigin, tmp_path: Path
) -> None:
    write_link_pages(tmp_path / "site", 30, fanout=2)
    origin.root = tmp_path / "site"
    origin.rule("/pages/7.json", status=404)
    origin.rule("/pages/9.json", invalid_json=True)
    stage = LinkStage(origin.url)
    store, summary = await crawl(origin, tmp_path / "out", stage)
    assert len(store) == 28
    assert summary.errors == {"not_found": 1, "parse": 1}  # type: ignore[attr-defined]
    assert stage.failures == [f"{origin.url}/pages/7.json not_found"]


class TimedStartStage(FlatStage):
    """Says when it made its last start request. Until the origin has seen a request, each
    one past the first chunk takes 2 ms to make, as a million do in sum: on a loaded machine
    400 made at full speed could all be recorded before the first connection was made, which
    says nothing about the order the crawl keeps (CI saw the first request 2.7 ms late). A
    crawl that records them all first still fails: it waits for all 390 slow ones."""

    made_the_last: float = 0.0

    def __init__(self, urls: list[str], origin: TestOrigin) -> None:
        super().__init__(urls)
        self.origin = origin

    def start_requests(self) -> Iterator[Request]:
        for n, url in enumerate(self.urls):
            if n >= crawler_module.FIRST_START_CHUNK and not self.origin.log:
                time.sleep(0.002)  # on the loop's thread, as making requests is
            yield Request(url)
        self.made_the_last = time.monotonic()


async def test_the_crawl_starts_before_every_start_request_is_recorded(
    origin: TestOrigin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A million start requests took seconds to record before the first went out; the first
    chunk now starts the crawl and the rest are added beside it, every one fetched once."""
    monkeypatch.setattr(crawler_module, "FIRST_START_CHUNK", 10)
    monkeypatch.setattr(crawler_module, "START_CHUNK", 25)
    origin.add("p", "payload")
    urls = [f"{origin.url}/p?n={n}" for n in range(400)]
    urls += urls[:7]  # offered twice: added once
    stage = TimedStartStage(urls, origin)
    frontier = Frontier(tmp_path / "frontier.sqlite")
    async with Fetcher(FetchSettings()) as fetcher:
        crawler = Crawler(stage, fetcher, NullSink(), frontier, LoopSettings(concurrency=4))
        summary = await crawler.run()
    frontier.close()
    assert min(r.time for r in origin.log) < stage.made_the_last
    assert sorted(r.query for r in origin.log) == sorted(f"n={n}" for n in range(400))
    assert summary.requests_done == 400 and summary.duplicates == 7


class FailingStartStage(FlatStage):
    def start_requests(self) -> Iterator[Request]:
        yield from (Request(url) for url in self.urls)
        raise ValueError("seed file: line 41 is not a URL")


async def test_a_start_request_that_cannot_be_made_ends_the_run_with_its_error(
    origin: TestOrigin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(crawler_module, "FIRST_START_CHUNK", 10)
    monkeypatch.setattr(crawler_module, "START_CHUNK", 25)
    origin.add("p", "payload")
    origin.rule("/p", stall=0.05)  # the crawl is under way when the seeds fail
    stage = FailingStartStage([f"{origin.url}/p?n={n}" for n in range(40)])
    frontier = Frontier(tmp_path / "frontier.sqlite")
    async with Fetcher(FetchSettings()) as fetcher:
        crawler = Crawler(stage, fetcher, NullSink(), frontier, LoopSettings(concurrency=4))
        with pytest.raises(ValueError, match="line 41"):
            await crawler.run()
    counts = frontier.counts()
    frontier.close()
    # nothing is left in flight: what was claimed was finished or given back
    # (the chunk that failed is not recorded: the next run offers it again)
    assert set(counts) <= {PENDING, DONE} and sum(counts.values()) == 10 + 25


class SlowSink:
    """A sink that takes 20 ms per write and records how far the fetching ran ahead of it."""

    def __init__(self, origin: TestOrigin) -> None:
        self.origin = origin
        self.written = 0
        self.max_ahead = 0

    def write(self, items: Sequence[Item]) -> None:
        time.sleep(0.02)
        self.written += len(items)
        self.max_ahead = max(self.max_ahead, len(self.origin.log) - self.written)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


async def test_a_slow_sink_holds_the_crawl_back(origin: TestOrigin) -> None:
    origin.add("p", "payload")
    urls = [f"{origin.url}/p?n={n}" for n in range(300)]
    sink = SlowSink(origin)
    settings = LoopSettings(concurrency=8, commit_batch=4)
    async with Fetcher(FetchSettings()) as fetcher:
        crawler = Crawler(FlatStage(urls), fetcher, sink, Frontier(None), settings)
        await crawler.run()
    assert sink.written == 300
    # claimed and not yet written: the loop's capacity (8 queued + 8 in workers) plus two
    # batches of results waiting for the sink — bounded, not 300
    assert sink.max_ahead <= 8 * 2 + 2 * 4


DONE_REQUESTS = "SELECT COUNT(*) FROM requests WHERE state = 2"


def _dump(path: Path) -> dict[str, object]:
    return json.loads(path.read_bytes())


def _spawn(base: str, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "stagecrawl.testing.stages", base, str(out), "4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_kill_9_then_resume_gives_the_uninterrupted_result(
    origin: TestOrigin, tmp_path: Path
) -> None:
    write_link_pages(tmp_path / "site", 150, fanout=3)
    origin.root = tmp_path / "site"
    origin.rule("/pages/*", stall=0.02)
    reference = tmp_path / "reference"
    assert _spawn(origin.url, reference).wait(120) == 0
    expected = (reference / "pages.json").read_bytes()

    for attempt, done_before_kill in enumerate([10, 80]):
        out = tmp_path / f"run{attempt}"
        process = _spawn(origin.url, out)
        frontier = out / "frontier.sqlite"
        kill_when(process, lambda f=frontier: sqlite_count(f, DONE_REQUESTS), done_before_kill)
        done = sqlite_count(frontier, DONE_REQUESTS)
        assert 0 < done < 150, done  # the kill landed mid-run: pages done, pages to do
        partial = out / "pages.json"
        if partial.exists():  # whatever is on disk is a whole store, never half a file
            _dump(partial)
        resumed = _spawn(origin.url, out)
        assert resumed.wait(120) == 0, resumed.stderr.read() if resumed.stderr else ""
        assert (out / "pages.json").read_bytes() == expected
        assert len(_dump(out / "pages.json")) == 150


def test_sigint_finishes_in_flight_work_exits_130_and_resumes(
    origin: TestOrigin, tmp_path: Path
) -> None:
    write_link_pages(tmp_path / "site", 150, fanout=3)
    origin.root = tmp_path / "site"
    origin.rule("/pages/*", stall=0.1)  # ~4 s in all: the signal lands mid-crawl
    out = tmp_path / "out"
    process = _spawn(origin.url, out)
    deadline = time.monotonic() + 60
    while len(origin.log) < 10 and time.monotonic() < deadline:  # under way, however loaded
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    code = process.wait(60)
    stderr = process.stderr.read().decode() if process.stderr else ""
    assert code == 130, stderr
    assert "crawl summary" in stderr and "returned to the frontier" in stderr
    stored = len(_dump(out / "pages.json"))
    assert 0 < stored < 150
    assert _spawn(origin.url, out).wait(120) == 0
    assert len(_dump(out / "pages.json")) == 150
    assert not os.path.exists(out / "pages.json.journal")


def test_a_batch_larger_than_one_update_marks_each_request_by_its_own_outcome(
    tmp_path: Path,
) -> None:
    """Successes are marked done a chunk of keys at a time: every one of a batch of 1,201
    (three chunks) is done, its failures are on the ladder, and meta survives the trip."""
    from stagecrawl.engine.frontier import DONE, FAILED, KEYS_PER_UPDATE, Completion

    count = 2 * KEYS_PER_UPDATE + 201
    frontier = Frontier(tmp_path / "f.sqlite")
    frontier.add(Request(f"http://h/p{i}", meta={"n": i} if i % 2 else {}) for i in range(count))
    claimed = frontier.claim(count)
    assert [r.meta for r in claimed[:3]] == [{}, {"n": 1}, {}]
    frontier.complete(
        [Completion(r, [], error="boom" if i % 100 == 7 else None) for i, r in enumerate(claimed)]
    )
    failures = len(range(7, count, 100))
    assert frontier.counts() == {DONE: count - failures, FAILED: failures}
    frontier.close()
