"""Engine throughput against the loopback test origin, beside bare clients in the same run.

    python bench/engine.py [--requests 5000] [--repeat 3]

The origin runs in its own process so it does not share the GIL with the client under test.
Prints requests/s (median of --repeat runs) of: the engine (Crawler + Fetcher on the work
loop, with the durable SQLite frontier on disk and a null sink), a bare aiohttp loop with a
semaphore, and a bare httpx.AsyncClient loop, at concurrency 1, 16 and 64, with the engine's
ratio to the bare aiohttp loop (its own transport).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import aiohttp
import httpx
from rich.console import Console
from rich.table import Table

from stagecrawl.engine.crawler import Crawler
from stagecrawl.engine.fetcher import Fetcher, FetchSettings
from stagecrawl.engine.frontier import Frontier
from stagecrawl.engine.request import Item
from stagecrawl.engine.work import LoopSettings
from stagecrawl.testing.stages import FlatStage

BODY = b'{"name": "bench", "values": [' + b"1, " * 200 + b"1]}"


class NullSink:
    def write(self, items: Sequence[Item]) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


async def engine_run(urls: list[str], concurrency: int) -> float:
    settings = FetchSettings(max_connections=concurrency)
    with tempfile.TemporaryDirectory() as tmp:
        frontier = Frontier(Path(tmp) / "frontier.sqlite")  # durable: on disk, WAL
        async with Fetcher(settings) as fetcher:
            crawler = Crawler(
                FlatStage(urls),
                fetcher,
                NullSink(),
                frontier,
                LoopSettings(concurrency=concurrency, commit_batch=256),
            )
            started = time.perf_counter()
            summary = await crawler.run()
            elapsed = time.perf_counter() - started
        frontier.close()
    assert summary.requests_done == len(urls) and not summary.errors
    return len(urls) / elapsed


async def httpx_run(urls: list[str], concurrency: int) -> float:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(limits=limits) as client:

        async def one(url: str) -> None:
            async with sem:
                response = await client.get(url)
                assert response.status_code == 200 and response.content

        started = time.perf_counter()
        await asyncio.gather(*(one(u) for u in urls))
        return len(urls) / (time.perf_counter() - started)


async def aiohttp_run(urls: list[str], concurrency: int) -> float:
    sem = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(url: str) -> None:
            async with sem, session.get(url) as response:
                assert response.status == 200 and await response.read()

        started = time.perf_counter()
        await asyncio.gather(*(one(u) for u in urls))
        return len(urls) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "p.json").write_bytes(BODY)
        origin = subprocess.Popen(
            [sys.executable, "-m", "stagecrawl.testing.origin", "--root", tmp],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert origin.stdout is not None
            base = origin.stdout.readline().strip()
            table = Table(
                title=f"engine (durable frontier) vs bare clients, {args.requests} GETs,"
                f" median of {args.repeat}, loopback origin"
            )
            for column in (
                "concurrency",
                "engine req/s",
                "bare httpx req/s",
                "bare aiohttp req/s",
                "engine / bare aiohttp",
                "aiohttp / httpx",
            ):
                table.add_column(column, justify="right")
            for concurrency in (1, 16, 64):
                count = args.requests if concurrency > 1 else args.requests // 3
                samples: dict[str, list[float]] = {"engine": [], "httpx": [], "aiohttp": []}
                for round_ in range(args.repeat):  # interleaved, so drift hits all alike
                    for name, runner in (
                        ("engine", engine_run),
                        ("httpx", httpx_run),
                        ("aiohttp", aiohttp_run),
                    ):
                        # distinct URLs per run: the engine dedups by URL
                        tag = f"{name}{concurrency}r{round_}"
                        urls = [f"{base}/p.json?run={tag}&n={i}" for i in range(count)]
                        samples[name].append(asyncio.run(runner(urls, concurrency)))
                results = {name: statistics.median(v) for name, v in samples.items()}
                table.add_row(
                    str(concurrency),
                    f"{results['engine']:.0f}",
                    f"{results['httpx']:.0f}",
                    f"{results['aiohttp']:.0f}",
                    f"{results['engine'] / results['aiohttp']:.2f}",
                    f"{results['aiohttp'] / results['httpx']:.2f}",
                )
            Console().print(table)
        finally:
            origin.terminate()
            origin.wait()


if __name__ == "__main__":
    main()
