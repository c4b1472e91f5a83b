"""A small generic stage over a tree of linked JSON pages, for engine tests, bench and demo;
and a sink that keeps nothing."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from stagecrawl.engine.crawler import Output
from stagecrawl.engine.fetcher import FetchResult
from stagecrawl.engine.request import Item, Request
from stagecrawl.errors import FetchError


def write_link_pages(root: Path, count: int, fanout: int = 3) -> None:
    """Pages 0..count-1 under root/pages/N.json; page n links to n+1 .. n+fanout (mod count),
    so the graph is full of cycles and every page is reachable from page 0."""
    folder = root / "pages"
    folder.mkdir(parents=True, exist_ok=True)
    for n in range(count):
        links = sorted({(n + k) % count for k in range(1, fanout + 1)})
        page = {"id": n, "links": links, "title": f"page {n}", "body": "lorem ipsum " * 8}
        (folder / f"{n}.json").write_text(json.dumps(page))


class LinkStage:
    name = "links"

    def __init__(self, base_url: str, start: Iterable[int] = (0,), follow: bool = True) -> None:
        self.base_url = base_url.rstrip("/")
        self.start = list(start)
        self.follow = follow
        self.failures: list[str] = []

    def page_url(self, n: int) -> str:
        return f"{self.base_url}/pages/{n}.json"

    def start_requests(self) -> Iterable[Request]:
        return [Request(self.page_url(n)) for n in self.start]

    def parse(self, request: Request, response: FetchResult) -> Iterable[Output]:
        page = response.json()
        yield Item(key=f"{page['id']:06d}", value=page, store="pages")
        if self.follow:
            for n in page["links"]:
                yield Request(self.page_url(n))

    def failed(self, request: Request, error: FetchError) -> Iterable[Output]:
        self.failures.append(f"{request.url} {error.kind}")
        return []


class FlatStage:
    """One request per URL, one item per response (its size): no links, no parsing cost."""

    name = "flat"

    def __init__(self, urls: Iterable[str]) -> None:
        self.urls = urls

    def start_requests(self) -> Iterable[Request]:
        return (Request(u) for u in self.urls)  # streamed: the crawler adds them in chunks

    def parse(self, request: Request, response: FetchResult) -> Iterable[Output]:
        yield Item(request.url, len(response.content))

    def failed(self, request: Request, error: FetchError) -> Iterable[Output]:
        return []


def run_link_crawl(
    base_url: str, out: Path, concurrency: int = 8, rate: float | None = None
) -> int:
    """Crawl the link pages into out/pages.json with a frontier beside it; exit code."""
    import asyncio

    from rich.console import Console

    from stagecrawl.engine.crawler import Crawler, JsonStoreSink
    from stagecrawl.engine.fetcher import Fetcher, FetchSettings
    from stagecrawl.engine.frontier import Frontier
    from stagecrawl.engine.jsonstore import JsonStore
    from stagecrawl.engine.progress import summary_table
    from stagecrawl.engine.ratelimit import Lane, Lanes, Rate
    from stagecrawl.engine.shutdown import GracefulStop
    from stagecrawl.engine.work import LoopSettings

    async def crawl() -> int:
        lanes = Lanes([Lane("pages", base_url, Rate(rate) if rate else None)])
        frontier = Frontier(out / "frontier.sqlite")
        sink = JsonStoreSink({"pages": JsonStore(out / "pages.json")})
        stop = GracefulStop("in-flight requests")
        async with Fetcher(FetchSettings(backoff_base=0.05), lanes) as fetcher:
            crawler = Crawler(
                LinkStage(base_url),
                fetcher,
                sink,
                frontier,
                LoopSettings(concurrency=concurrency, grace_period=5.0),
                stop=stop,
            )
            with stop.on_signals():
                summary = await crawler.run()
        sink.close()
        frontier.close()
        Console(stderr=True).print(summary_table("crawl summary", summary.as_rows()))
        return 130 if summary.interrupted else 0

    return asyncio.run(crawl())


class NullSink:
    """Keeps nothing: the engine measured, or tested, without an output's cost."""

    def write(self, items: Sequence[Item]) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


if __name__ == "__main__":
    import sys

    rate_arg = float(sys.argv[4]) if len(sys.argv) > 4 else None
    sys.exit(run_link_crawl(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), rate_arg))
