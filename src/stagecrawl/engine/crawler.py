"""The crawler: a stage's requests through the fetcher, on the work loop, over a frontier.

    frontier ─claim→ workers: fetch + stage callback ─→ committer: sink write + flush,
        ↑                                                  then frontier.complete (children)
        └──────────────────── FrontierQueue ───────────────┘

The loop (engine/work.py) does the claiming, batching, stopping and releasing; this module
only says what processing one request means: fetch it on its lane, hand the response to the
stage's callback, and turn every failure into a result, so a failed request climbs the
frontier's retry ladder instead of being lost or marked done.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from stagecrawl.engine.fetcher import Fetcher
from stagecrawl.engine.frontier import (
    DONE,
    FAILED,
    GAVE_UP,
    PENDING,
    CrawlResult,
    Frontier,
    FrontierQueue,
    Sink,
)
from stagecrawl.engine.jsonstore import JsonStore
from stagecrawl.engine.progress import ProgressReporter
from stagecrawl.engine.request import Item, Request
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.engine.work import LoopSettings, LoopStats, WorkLoop
from stagecrawl.errors import FetchError, RateLimited
from stagecrawl.pauses import Waiting
from stagecrawl.secrets import redact

log = logging.getLogger("stagecrawl.crawler")

Output = Request | Item
# Start requests added to the frontier per transaction, once the crawl has started: made on
# the event loop's thread between fetches, a chunk holds the loop for a few milliseconds.
START_CHUNK = 2_000
# The crawl starts once this many start requests are recorded (all of a small crawl's: made
# beside the crawl, they cost a CPU-bound crawl 3-5 % more CPU a request, bench/engine.py);
# the rest are added beside it.
FIRST_START_CHUNK = 10_000


class Stage(Protocol):
    """What a pipeline stage gives the crawler. Callbacks are looked up by `Request.callback`
    and receive the request and its response; they yield new requests and items."""

    name: str  # an optional `lane` attribute names the lane its requests go on

    def start_requests(self) -> Iterable[Request]: ...

    def failed(self, request: Request, error: FetchError) -> Iterable[Output]:
        """Called when fetching gave up; may yield items that record the failure."""
        ...


@dataclass
class CrawlSummary:
    requests_done: int = 0
    items: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    duplicates: int = 0
    resumed: int = 0
    retried: int = 0  # failed in an earlier run, tried again in this one
    released: int = 0
    # given back on a stop, by why: unstarted, waiting (lane_rate, budget, cooldown,
    # backoff, stop) or cut off after the grace period
    given_back: dict[str, int] = field(default_factory=dict)
    given_back_text: str = ""  # the same in words, naming lanes and who asked for a pause
    interrupted: bool = False
    wall_seconds: float = 0.0
    ladder: int = 0  # failed, retried by the next run
    gave_up: int = 0
    last_errors: list[tuple[str, int, str]] = field(default_factory=list)  # url, attempts, why
    # not attempted: a host asked for a pause that outlasts the run (or our budget is spent);
    # these requests, and the pending ones after them, wait for the next run
    waiting: Waiting | None = None

    def as_rows(self) -> dict[str, object]:
        rows: dict[str, object] = {
            "requests done": self.requests_done,
            "items written": self.items,
            "duplicate requests skipped": self.duplicates,
            "resumed from a previous run": self.resumed,
            "retried from the ladder": self.retried,
        }
        for kind, count in sorted(self.errors.items()):
            rows[f"errors: {kind}"] = count
        rows["on the retry ladder (next run)"] = self.ladder
        if self.waiting is not None:
            rows["not attempted (waiting for a pause)"] = self.waiting.rows
        rows["given up"] = self.gave_up
        for url, attempts, why in self.last_errors[:5]:
            rows[f"  failed ×{attempts}: {url}"] = why
        if self.interrupted:
            rows["returned to the frontier"] = self.released
            if self.given_back_text:
                rows["  why"] = self.given_back_text
        rows["wall time"] = f"{self.wall_seconds:.1f}s"
        return rows

    def as_json(self) -> dict[str, object]:
        return {
            "requests_done": self.requests_done,
            "items": self.items,
            "errors": dict(self.errors),
            "duplicates": self.duplicates,
            "resumed": self.resumed,
            "retried": self.retried,
            "ladder": self.ladder,
            "gave_up": self.gave_up,
            "waiting": None if self.waiting is None else self.waiting.as_json(),
            "failures": [
                {"url": url, "attempts": attempts, "reason": why}
                for url, attempts, why in self.last_errors
            ],
            "interrupted": self.interrupted,
            "released": self.released,
            "given_back": dict(sorted(self.given_back.items())),
            "wall_seconds": round(self.wall_seconds, 3),
        }


class Crawler:
    def __init__(
        self,
        stage: Stage,
        fetcher: Fetcher,
        sink: Sink,
        frontier: Frontier,
        settings: LoopSettings | None = None,
        progress: ProgressReporter | None = None,
        stop: GracefulStop | None = None,
    ) -> None:
        self.stage = stage
        self.fetcher = fetcher
        self.frontier = frontier
        self.queue = FrontierQueue(frontier, sink)
        self.progress = progress
        self.stop = stop or GracefulStop("in-flight requests")
        self.summary = CrawlSummary(resumed=frontier.resumed, retried=frontier.retried)
        self.loop = WorkLoop(self.queue, self._process, settings, self.stop, self._on_commit)
        self._to_do = 0  # pending when the run started; children found are added to it

    def request_stop(self) -> None:
        """Stop taking new work; in-flight requests finish within the grace period."""
        self.stop.request()

    async def run(self) -> CrawlSummary:
        try:
            requests = iter(self.stage.start_requests())
            taken = 0
            if not self.stop.requested:
                taken, _added = await self.queue.add_from(requests, FIRST_START_CHUNK)
            self._to_do = await self.queue.pending()
            adding: asyncio.Task[None] | None = None
            if taken == FIRST_START_CHUNK and not self.stop.requested:
                self.queue.adding = True
                adding = asyncio.create_task(self._add_start_requests(requests))
            try:
                stats = await self.loop.run()
            finally:
                if adding is not None:  # still going only when the run stopped or failed
                    adding.cancel()
                    await asyncio.gather(adding, return_exceptions=True)
                await self.queue.give_back_read_ahead()
            counts = await self.queue.counts()
            ladder = await self.queue.ladder(20)
        finally:
            self.queue.close()
        summary = self.summary
        summary.requests_done = stats.completed
        summary.items = self.queue.items
        summary.duplicates = self.queue.duplicates
        summary.released = stats.released
        summary.given_back = dict(stats.given_back)
        summary.given_back_text = stats.given_back_text
        summary.interrupted = stats.interrupted
        summary.wall_seconds = stats.wall_seconds
        summary.ladder = counts.get(FAILED, 0)
        summary.gave_up = counts.get(GAVE_UP, 0)
        summary.last_errors = [(url, attempts, why) for url, _state, attempts, why in ladder]
        held = self.queue.held
        if held.until is not None:  # what is pending now waits for the pause to end
            summary.waiting = Waiting(counts.get(PENDING, 0), held.until, held.reason)
        return summary

    async def _add_start_requests(self, requests: Iterator[Request]) -> None:
        """Stream the rest of the stage's start requests into the frontier START_CHUNK at a
        time, beside the work loop: the first requests go out at once, not after a million
        were recorded, and memory holds one chunk. Each chunk wakes the loop (its claims may
        have run dry); a stop ends the streaming, and the frontier ignores keys it knows, so
        the next run offers them all again and adds the rest. A start request that cannot be
        made (the stage raised) ends the run with that error."""
        try:
            while not self.stop.requested:
                taken, added = await self.queue.add_from(requests, START_CHUNK)
                self._to_do += added
                self.loop.wake()
                if taken < START_CHUNK:
                    return
        except Exception as exc:
            self.loop.fail(exc)
        finally:
            self.queue.adding = False
            self.loop.wake()  # the loop may now be finished

    async def _process(self, request: Request) -> CrawlResult:
        try:
            response = await self.fetcher.get(
                request.url,
                lane=getattr(self.stage, "lane", None),
                validators=request.validators,
                rate_limited=getattr(self.stage, "rate_limited", None),
            )
        except RateLimited as exc:  # not attempted: it waits, and so does the rest of the run
            reason = redact(exc.pause_text)
            until = exc.until or datetime.now(UTC).replace(tzinfo=None)
            self.queue.hold(request, until, reason)
            return CrawlResult(request, [], [], error=reason, waits=True)
        except FetchError as exc:
            self.summary.errors[exc.kind] += 1
            items, children = _split(self.stage.failed(request, exc))
            return CrawlResult(request, items, children, error=f"{exc.kind}: {exc}")
        try:
            callback = getattr(self.stage, request.callback)
            items, children = _split(callback(request, response))
        except Exception as exc:  # a stage that cannot parse one response must not stop the rest
            self.summary.errors["parse"] += 1
            log.warning("cannot parse %s: %s", request.url, exc)
            return CrawlResult(request, [], [], error=f"parse: {exc}")
        return CrawlResult(request, items, children)

    def _on_commit(self, stats: LoopStats) -> None:
        if self.progress is None:
            return
        detail: dict[str, object] = {"items": self.queue.items, **dict(self.summary.errors)}
        detail.update(_per_lane(self.fetcher.stats.requests))
        total = self._to_do + self.queue.children_added
        self.progress.update(stats.completed, total, detail)


def _split(outputs: Iterable[Output]) -> tuple[list[Item], list[Request]]:
    items: list[Item] = []
    children: list[Request] = []
    for output in outputs:
        (items if isinstance(output, Item) else children).append(output)  # type: ignore[arg-type]
    return items, children


def _per_lane(requests: Mapping[str, int]) -> dict[str, int]:
    return {f"{lane}-req": n for lane, n in requests.items()}


class JsonStoreSink:
    """Route items to one JsonStore per `Item.store` name."""

    def __init__(self, stores: dict[str, JsonStore]) -> None:
        self.stores = stores

    def write(self, items: Iterable[Item]) -> None:
        for item in items:
            self.stores[item.store].put(item.key, item.value)

    def flush(self) -> None:
        for store in self.stores.values():
            store.flush()

    def close(self) -> None:
        for store in self.stores.values():
            store.close()


__all__ = ["DONE", "CrawlSummary", "Crawler", "JsonStoreSink", "Output", "Stage"]
