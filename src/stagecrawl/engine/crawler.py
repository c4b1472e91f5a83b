"""The crawler: a frontier, a fixed pool of fetch workers, one committer, bounded queues.

    frontier --claim--> [request queue] --> N workers (fetch + parse) --> [result queue]
        ^                                                                     |
        +------ committer: sink.write + sink.flush, then frontier.complete <--+

Both queues are bounded, so a slow sink stops the workers and memory stays flat. The crawl is
done only when the frontier has nothing pending AND nothing claimed is still uncommitted, so a
drained queue is never mistaken for the end while a worker is still producing requests. Items
reach the sink before their request is marked done; sinks upsert by key, so a request redone
after a crash writes the same item again rather than a second one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from stagecrawl.engine.fetcher import Fetcher
from stagecrawl.engine.frontier import DONE, FAILED, Completion, Frontier
from stagecrawl.engine.jsonstore import JsonStore
from stagecrawl.engine.progress import ProgressReporter
from stagecrawl.engine.request import Item, Request
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.errors import FetchError

log = logging.getLogger("stagecrawl.crawler")

Output = Request | Item


class Stage(Protocol):
    """What a pipeline stage gives the crawler. Callbacks are looked up by `Request.callback`
    and receive the request and its response; they yield new requests and items."""

    name: str

    def start_requests(self) -> Iterable[Request]: ...

    def failed(self, request: Request, error: FetchError) -> Iterable[Output]:
        """Called when fetching gave up; may yield items that record the failure."""
        ...


class Sink(Protocol):
    def write(self, items: Sequence[Item]) -> None: ...

    def flush(self) -> None:
        """Make every item written so far durable."""

    def close(self) -> None: ...


@dataclass
class CrawlSettings:
    """Crawler settings with their documented defaults (see docs/operations.md)."""

    concurrency: int = 16
    commit_batch: int = 64
    commit_interval: float = 0.25
    grace_period: float = 10.0
    handle_signals: bool = True


@dataclass
class CrawlSummary:
    requests_done: int = 0
    items: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    duplicates: int = 0
    resumed: int = 0
    released: int = 0
    interrupted: bool = False
    wall_seconds: float = 0.0

    def as_rows(self) -> dict[str, object]:
        rows: dict[str, object] = {
            "requests done": self.requests_done,
            "items written": self.items,
            "duplicate requests skipped": self.duplicates,
            "resumed from a previous run": self.resumed,
        }
        for kind, count in sorted(self.errors.items()):
            rows[f"errors: {kind}"] = count
        if self.interrupted:
            rows["returned to the frontier"] = self.released
        rows["wall time"] = f"{self.wall_seconds:.1f}s"
        return rows


@dataclass
class _Result:
    request: Request
    outputs: list[Output]
    error: str | None = None


_STOP = object()


class Crawler:
    def __init__(
        self,
        stage: Stage,
        fetcher: Fetcher,
        sink: Sink,
        frontier: Frontier,
        settings: CrawlSettings | None = None,
        progress: ProgressReporter | None = None,
    ) -> None:
        self.stage = stage
        self.fetcher = fetcher
        self.sink = sink
        self.frontier = frontier
        self.settings = settings or CrawlSettings()
        self.progress = progress
        self.summary = CrawlSummary(resumed=frontier.resumed)
        self._stop = GracefulStop("in-flight requests")
        self._stopping = self._stop.event
        self._committed = asyncio.Event()
        self._outstanding = 0  # claimed from the frontier and not yet committed
        self._in_worker: dict[int, Request] = {}

    def request_stop(self) -> None:
        """Stop taking new work; in-flight requests finish within the grace period."""
        self._stop.request()

    async def run(self) -> CrawlSummary:
        started = time.monotonic()
        settings = self.settings
        requests: asyncio.Queue[Request | object] = asyncio.Queue(settings.concurrency)
        results: asyncio.Queue[_Result | object] = asyncio.Queue(settings.concurrency * 2)
        start = list(self.stage.start_requests())
        added = self.frontier.add(start)
        self.summary.duplicates += len(start) - added
        workers = [
            asyncio.create_task(self._worker(i, requests, results))
            for i in range(settings.concurrency)
        ]
        committer = asyncio.create_task(self._committer(results))
        with self._stop.on_signals(settings.handle_signals):
            await self._feed(requests)
            await self._finish_workers(workers, requests)
            await results.put(_STOP)
            await committer
        self.summary.interrupted = self._stop.requested
        self.summary.wall_seconds = time.monotonic() - started
        return self.summary

    async def _feed(self, requests: asyncio.Queue[Request | object]) -> None:
        capacity = self.settings.concurrency * 2
        while not self._stopping.is_set():
            claimed = self.frontier.claim(capacity - self._outstanding)
            self._outstanding += len(claimed)
            for request in claimed:
                await requests.put(request)
            if claimed:
                continue
            if self._outstanding == 0:
                return
            self._committed.clear()
            stop_wait = asyncio.ensure_future(self._stopping.wait())
            commit_wait = asyncio.ensure_future(self._committed.wait())
            await asyncio.wait({stop_wait, commit_wait}, return_when=asyncio.FIRST_COMPLETED)
            stop_wait.cancel()
            commit_wait.cancel()

    async def _finish_workers(
        self, workers: list[asyncio.Task[None]], requests: asyncio.Queue[Request | object]
    ) -> None:
        if self._stopping.is_set():
            # Claimed but never started: straight back to the frontier.
            unstarted: list[str] = []
            while not requests.empty():
                item = requests.get_nowait()
                if isinstance(item, Request):
                    unstarted.append(item.key)
            self.frontier.release(unstarted)
            self._outstanding -= len(unstarted)
            self.summary.released += len(unstarted)
        for _ in workers:
            await requests.put(_STOP)
        grace = self.settings.grace_period if self._stopping.is_set() else None
        _done, pending = await asyncio.wait(workers, timeout=grace)
        if pending:
            late = [r.key for r in self._in_worker.values()]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            self.frontier.release(late)
            self._outstanding -= len(late)
            self.summary.released += len(late)

    async def _worker(
        self,
        number: int,
        requests: asyncio.Queue[Request | object],
        results: asyncio.Queue[_Result | object],
    ) -> None:
        while True:
            request = await requests.get()
            if not isinstance(request, Request):
                return
            self._in_worker[number] = request
            try:
                result = await self._process(request)
            finally:
                self._in_worker.pop(number, None)
            await results.put(result)

    async def _process(self, request: Request) -> _Result:
        try:
            response = await self.fetcher.get(
                request.url,
                validators=request.validators,
                rate_limited=getattr(self.stage, "rate_limited", None),
            )
        except FetchError as exc:
            self.summary.errors[exc.kind] += 1
            outputs = list(self.stage.failed(request, exc))
            return _Result(request, outputs, error=f"{exc.kind}: {exc}")
        try:
            callback = getattr(self.stage, request.callback)
            outputs = list(callback(request, response))
        except Exception as exc:  # a stage that cannot parse one response must not stop the rest
            self.summary.errors["parse"] += 1
            log.warning("cannot parse %s: %s", request.url, exc)
            return _Result(request, [], error=f"parse: {exc}")
        return _Result(request, outputs)

    async def _committer(self, results: asyncio.Queue[_Result | object]) -> None:
        batch: list[_Result] = []
        while True:
            try:
                got = await asyncio.wait_for(results.get(), self.settings.commit_interval)
            except TimeoutError:
                got = None
            if isinstance(got, _Result):
                batch.append(got)
            if batch and (
                got is None
                or got is _STOP
                or len(batch) >= self.settings.commit_batch
                or results.empty()
            ):
                await self._commit(batch)
                batch = []
            if got is _STOP:
                break
        await asyncio.to_thread(self.sink.flush)

    async def _commit(self, batch: list[_Result]) -> None:
        items = [o for r in batch for o in r.outputs if isinstance(o, Item)]
        if items:
            await asyncio.to_thread(self._write_durably, items)
        completions = [
            Completion(r.request, [o for o in r.outputs if isinstance(o, Request)], r.error)
            for r in batch
        ]
        offered = sum(len(c.children) for c in completions)
        added = self.frontier.complete(completions)
        self.summary.duplicates += offered - added
        self.summary.items += len(items)
        self.summary.requests_done += len(batch)
        self._outstanding -= len(batch)
        self._committed.set()
        if self.progress is not None:
            counts = self.frontier.counts()
            stats = self.fetcher.stats
            per_origin = {o.split("//")[-1]: n for o, n in stats.requests.items()}
            self.progress.update(
                counts.get(DONE, 0) + counts.get(FAILED, 0),
                sum(counts.values()),
                {"items": self.summary.items, **dict(self.summary.errors), **per_origin},
            )

    def _write_durably(self, items: list[Item]) -> None:
        self.sink.write(items)
        self.sink.flush()


class JsonStoreSink:
    """Route items to one JsonStore per `Item.store` name."""

    def __init__(self, stores: dict[str, JsonStore]) -> None:
        self.stores = stores

    def write(self, items: Sequence[Item]) -> None:
        for item in items:
            self.stores[item.store].put(item.key, item.value)

    def flush(self) -> None:
        for store in self.stores.values():
            store.flush()

    def close(self) -> None:
        for store in self.stores.values():
            store.close()
