"""Engine throughput against the loopback test origin, beside bare clients in the same run.

    python bench/engine.py [--requests 5000] [--repeat 5] [--httpx] [--baseline-src DIR]

The origin runs in its own process so it does not share the GIL with the client under test.
For each concurrency (1, 16, 64) and round, the engine (Crawler + Fetcher on the work loop,
with the durable SQLite frontier on disk and a null sink) and a bare aiohttp loop with a
semaphore (its own transport) run back to back, in alternating order round by round, so a
neighbour's load or a warm cache favours neither. Reported: the median of the per-round
ratios engine / aiohttp (throughput, and client CPU per request: `time.process_time`, every
thread of this process, the frontier's included), with their range, and each side's median
requests/s and CPU microseconds per request. `--httpx` adds a bare httpx.AsyncClient loop.
The load average before and after is printed: the machine may be shared. `--baseline-src`
runs another tree's engine (e.g. main's src/) in the same rounds, each run in a fresh process,
and adds its ratios to the bare loop and this tree's to it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

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
    """Here, not imported from stagecrawl.testing: `--baseline-src` runs this file against
    older trees, which may not have it."""

    def write(self, items: Sequence[Item]) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class Sample:
    """One run: requests/s, and client CPU microseconds per request."""

    def __init__(self, count: int, wall: float, cpu: float) -> None:
        self.rate = count / wall
        self.cpu_us = cpu / count * 1e6


class Clocks:
    def __enter__(self) -> Clocks:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


async def engine_run(urls: list[str], concurrency: int) -> Sample:
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
            with Clocks() as clocks:
                summary = await crawler.run()
        frontier.close()
    assert summary.requests_done == len(urls) and not summary.errors
    return Sample(len(urls), clocks.wall, clocks.cpu)


async def httpx_run(urls: list[str], concurrency: int) -> Sample:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(limits=limits) as client:

        async def one(url: str) -> None:
            async with sem:
                response = await client.get(url)
                assert response.status_code == 200 and response.content

        with Clocks() as clocks:
            await asyncio.gather(*(one(u) for u in urls))
    return Sample(len(urls), clocks.wall, clocks.cpu)


async def aiohttp_run(urls: list[str], concurrency: int) -> Sample:
    sem = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(url: str) -> None:
            async with sem, session.get(url) as response:
                assert response.status == 200 and await response.read()

        with Clocks() as clocks:
            await asyncio.gather(*(one(u) for u in urls))
    return Sample(len(urls), clocks.wall, clocks.cpu)


Runner = Callable[[list[str], int], Coroutine[Any, Any, Sample]]
RUNNERS: dict[str, Runner] = {"engine": engine_run, "aiohttp": aiohttp_run, "httpx": httpx_run}


def urls_for(base: str, tag: str, count: int) -> list[str]:
    # distinct URLs per run: the engine dedups by URL
    return [f"{base}/p.json?run={tag}&n={i}" for i in range(count)]


def in_child(name: str, src: str | None, base: str, tag: str, count: int, conc: int) -> Sample:
    """One run in a fresh process, with `src` (another tree's src/) first on the path: how
    two trees' engines run side by side. Only the run itself is timed, not the start-up."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src
    command = [sys.executable, __file__, "--one", name, base, tag, str(count), str(conc)]
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    figures = json.loads(out)
    sample = Sample(1, 1.0, 0.0)
    sample.rate, sample.cpu_us = figures["rate"], figures["cpu_us"]
    return sample


def one(argv: list[str]) -> None:
    """`--one NAME BASE TAG COUNT CONCURRENCY`: the child's side of `in_child`."""
    name, base, tag, count, conc = argv
    sample = asyncio.run(RUNNERS[name](urls_for(base, tag, int(count)), int(conc)))
    print(json.dumps({"rate": sample.rate, "cpu_us": sample.cpu_us}))


def spread(values: list[float]) -> str:
    """Median and range, e.g. `0.97 (0.91–1.02)`."""
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def ratios(top: list[Sample], bottom: list[Sample]) -> tuple[list[float], list[float]]:
    """Per-round ratios of throughput and of CPU per request."""
    pairs = list(zip(top, bottom, strict=True))
    return [t.rate / b.rate for t, b in pairs], [t.cpu_us / b.cpu_us for t, b in pairs]


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> None:
    if sys.argv[1:2] == ["--one"]:
        one(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--httpx", action="store_true", help="add a bare httpx loop (slow)")
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[1, 16, 64], help="levels to measure"
    )
    parser.add_argument(
        "--json", type=Path, help="also write every round's figures here (to pool runs)"
    )
    parser.add_argument(
        "--baseline-src",
        help="another src/ tree (e.g. main's) whose engine runs beside this one; every run"
        " then goes in a fresh process, this tree's and the bare loop's too",
    )
    args = parser.parse_args()
    baseline = args.baseline_src
    load_before = load()
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
                title=f"engine (durable frontier) vs bare aiohttp, {args.requests} GETs,"
                f" {args.repeat} rounds in alternating order, loopback origin;"
                " ratios: median of per-round ratios (range)"
            )
            columns = [
                "concurrency",
                "engine req/s",
                "aiohttp req/s",
                "engine / aiohttp req/s",
                "engine CPU µs/req",
                "aiohttp CPU µs/req",
                "engine / aiohttp CPU",
            ]
            if baseline:
                columns += [
                    "baseline / aiohttp req/s",
                    "baseline CPU µs/req",
                    "engine / baseline req/s",
                    "engine / baseline CPU",
                ]
            if args.httpx:
                columns += ["httpx req/s", "aiohttp / httpx"]
            for column in columns:
                table.add_column(column, justify="right")
            rounds: dict[str, dict[str, list[float]]] = {}
            # (label, runner, src): src None is this tree; in-process unless a baseline is given
            sides: list[tuple[str, str, str | None]] = [
                ("engine", "engine", None),
                ("aiohttp", "aiohttp", None),
            ]
            if baseline:
                sides.append(("baseline", "engine", baseline))
            for concurrency in args.concurrency:
                count = args.requests if concurrency > 1 else args.requests // 3
                samples: dict[str, list[Sample]] = {label: [] for label, _, _ in sides}
                samples["httpx"] = []
                for round_ in range(args.repeat):
                    # alternate who goes first, so drift and warm-up hit both alike
                    order = sides if round_ % 2 == 0 else sides[::-1]
                    if args.httpx:
                        order = [*order, ("httpx", "httpx", None)]
                    for label, name, src in order:
                        tag = f"{label}{concurrency}r{round_}"
                        if baseline:
                            sample = in_child(name, src, base, tag, count, concurrency)
                        else:
                            urls = urls_for(base, tag, count)
                            sample = asyncio.run(RUNNERS[name](urls, concurrency))
                        samples[label].append(sample)
                engine, bare = samples["engine"], samples["aiohttp"]
                rate_ratios, cpu_ratios = ratios(engine, bare)
                row = [
                    str(concurrency),
                    f"{statistics.median(s.rate for s in engine):.0f}",
                    f"{statistics.median(s.rate for s in bare):.0f}",
                    spread(rate_ratios),
                    f"{statistics.median(s.cpu_us for s in engine):.0f}",
                    f"{statistics.median(s.cpu_us for s in bare):.0f}",
                    spread(cpu_ratios),
                ]
                figures = {
                    "engine_rate": [e.rate for e in engine],
                    "aiohttp_rate": [a.rate for a in bare],
                    "engine_cpu_us": [e.cpu_us for e in engine],
                    "aiohttp_cpu_us": [a.cpu_us for a in bare],
                }
                if baseline:
                    old = samples["baseline"]
                    old_rates, _ = ratios(old, bare)
                    new_rates, new_cpus = ratios(engine, old)
                    row += [
                        spread(old_rates),
                        f"{statistics.median(s.cpu_us for s in old):.0f}",
                        spread(new_rates),
                        spread(new_cpus),
                    ]
                    figures["baseline_rate"] = [b.rate for b in old]
                    figures["baseline_cpu_us"] = [b.cpu_us for b in old]
                if args.httpx:
                    httpx_rate = statistics.median(s.rate for s in samples["httpx"])
                    aiohttp_rate = statistics.median(s.rate for s in bare)
                    row += [f"{httpx_rate:.0f}", f"{aiohttp_rate / httpx_rate:.2f}"]
                table.add_row(*row)
                rounds[str(concurrency)] = figures
            console = Console(width=200)
            console.print(table)
            load_after = load()
            console.print(f"load average (1, 5, 15 min): before {load_before}, after {load_after}")
            if args.json is not None:
                figures_all = {"load": [load_before, load_after], "rounds": rounds}
                args.json.write_text(json.dumps(figures_all, indent=1))
        finally:
            origin.terminate()
            origin.wait()


if __name__ == "__main__":
    main()
