"""CPU a row and memory of every registry's crawl, against crates in the same run.

    python bench/rows.py [--sizes 100,1000] [--versions 30] [--registries crates,pypi,go]

Each registry's `crawl` into SQLite as a user runs it (the CLI, a child process), limits
lifted, against its loopback look-alike, at each size (units of `--versions` versions each):
VERSION rows, wall, rows/s, CPU ms a row of the crawling process, its ratio to crates' at the
same size, and the peak RSS (VmHWM, polled); then each registry's peak RSS at the largest size
against the smallest (memory must not grow with the work).

Real shapes: crates are bench/scale.py's real-shaped ones (the real index files and an API
answer in ../shared; without them, four dependencies and features a version); each PyPI
release a wheel and an sdist with hashes, requests' Requires-Dist (markers and extras
included), half of them with PEP 658 core metadata and the other half through the JSON API;
each Go module's versions take prometheus's real go.mods (../shared/fixtures/go/proxy: ~200
requires each; 212 versions, 69 distinct texts, in version order) under its own path, else
one of 30 requires.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

from rich.console import Console
from rich.table import Table
from scale import build_real_registry, peak_rss_mb  # the held-out's crates; the RSS poll

from stagecrawl.go.versions import sort_key as go_sort_key
from stagecrawl.testing.go_origin import GoOrigin
from stagecrawl.testing.origin import TestOrigin
from stagecrawl.testing.pypi_origin import PyPIOrigin, Release, build_project
from stagecrawl.testing.registry import index_line, write_crate

LIFTED = "1000000"
CONTACT = "bench@example.org"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "go"
REAL_MOD = SHARED / "proxy/github.com/prometheus/prometheus/@v/v0.303.1.mod"
# requests 2.32's Requires-Dist
REQUESTS_REQUIRES = [
    "charset_normalizer<4,>=2", "idna<4,>=2.5", "urllib3<3,>=1.21.1", "certifi>=2017.4.17",
    'PySocks!=1.5.7,>=1.5.6; extra == "socks"',
    'chardet<6,>=3.0.2; extra == "use-chardet-on-py3"',
]  # fmt: skip
CLASSIFIERS = ["License :: OSI Approved :: Apache Software License",
               "Programming Language :: Python :: 3"]  # fmt: skip


def run(args: list[str]) -> tuple[float, float, float, int]:
    """One CLI run: (wall s, CPU s, peak RSS MB, exit code) of the child alone."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "stagecrawl", "-q", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    peak, after = peak_rss_mb(process)
    wall = time.perf_counter() - started
    cpu = after - (before.ru_utime + before.ru_stime)
    if process.returncode != 0 and process.stderr is not None:
        print(process.stderr.read().decode()[-2000:], file=sys.stderr)
    return wall, cpu, peak, process.returncode


# -- the worlds: names to crawl, and the command line that crawls them ------------------------
Crawl = Callable[[list[str], Path], list[str]]  # (names, folder) -> the crawl's arguments


def _seeds(names: list[str], folder: Path, label: str) -> str:
    seeds = folder / f"{label}-{len(names)}.txt"
    seeds.write_text("\n".join(names))
    return str(seeds)


def crates_world(
    stack: ExitStack, root: Path, units: int, versions: int
) -> tuple[list[str], Crawl]:
    try:
        names = build_real_registry(root, units, versions)  # the held-out's crates
    except SystemExit:  # no ../shared: four dependencies and features a version
        names = synthetic_crates(root, units, versions)
    index = stack.enter_context(TestOrigin(root / "index"))
    api_origin = stack.enter_context(TestOrigin(root / "api"))

    def crawl(chosen: list[str], folder: Path) -> list[str]:
        return ["crates", "crawl", "--file", _seeds(chosen, folder, "crates"),
                "--index-url", index.url + "/", "--api-url", api_origin.url + "/",
                "--index-rate", LIFTED, "--api-rate", LIFTED, "--api-budget", "none"]  # fmt: skip

    return names, crawl


def synthetic_crates(root: Path, units: int, versions: int) -> list[str]:
    names = [f"bench-{i:05d}" for i in range(units)]
    deps = [
        {"name": d, "req": "^1", "features": [], "optional": False, "default_features": True,
         "target": None, "kind": "normal"}
        for d in ("serde", "libc", "log", "cfg-if")
    ]  # fmt: skip
    for name in names:
        numbers = [f"0.{v}.0" for v in range(versions)]
        lines = [
            index_line(name, n, deps, features={"std": [], "default": ["std"]}) for n in numbers
        ]
        api = {"crate": {"name": name, "description": "bench"},
               "versions": [{"num": n, "license": "MIT", "created_at": "2024-01-01T00:00:00Z",
                             "downloads": 1, "crate_size": 1000} for n in numbers]}  # fmt: skip
        write_crate(root, name, lines, api)
    return names


def pypi_world(stack: ExitStack, _root: Path, units: int, versions: int) -> tuple[list[str], Crawl]:
    origin = PyPIOrigin()
    names = [f"bench-{i:05d}" for i in range(units)]
    for n, name in enumerate(names):
        # requests' lines, half of them the project's own (a project's releases repeat their
        # lines; projects share fewer: a cache of lines must not flatter the figure)
        requires = [
            line.replace(">=", f">={n}!", 1) if i % 2 else line
            for i, line in enumerate(REQUESTS_REQUIRES)
        ]
        releases = [
            Release(
                f"1.{v}.0",
                requires=requires,
                classifiers=CLASSIFIERS,
                metadata=v % 2 == 0,
                json_api=v % 2 == 1,
            )
            for v in range(versions)
        ]
        origin.add_project(build_project(name, releases))
    stack.enter_context(origin)

    def crawl(chosen: list[str], folder: Path) -> list[str]:
        return ["pypi", "crawl", "--file", _seeds(chosen, folder, "pypi"),
                "--index-url", f"{origin.url}/simple/", "--api-url", f"{origin.url}/",
                "--index-rate", LIFTED, "--api-rate", LIFTED, "--files-rate", LIFTED,
                "--contact", CONTACT]  # fmt: skip

    return names, crawl


def real_go_mods() -> list[str]:
    """prometheus's go.mod at each of its versions on the proxy, in version order (212, 69
    distinct: versions repeat their go.mod as real modules do), or one of 30 requires."""
    folder = REAL_MOD.parent
    if not folder.is_dir():
        requires = "".join(f"\texample.com/dep{i} v1.{i}.0\n" for i in range(30))
        return [f"module example.com/placeholder\n\ngo 1.23.0\n\nrequire (\n{requires})\n"]
    files = sorted(folder.glob("*.mod"), key=lambda p: go_sort_key(p.name.removesuffix(".mod")))
    return [p.read_text() for p in files]


def go_modules(origin: GoOrigin, units: int, versions: int) -> list[str]:
    """Module i's versions take the real go.mods from the i-th on, under its own path."""
    texts = real_go_mods()
    old = "github.com/prometheus/prometheus" if len(texts) > 1 else "example.com/placeholder"
    names = [f"example.com/bench/Mod{i:05d}" for i in range(units)]
    for i, name in enumerate(names):
        for v in range(versions):
            text = texts[(i + v) % len(texts)].replace(old, name, 1)
            origin.module(name).add(f"v0.{v}.0", text, "2025-01-01T00:00:00Z")
    return names


def go_world(stack: ExitStack, _root: Path, units: int, versions: int) -> tuple[list[str], Crawl]:
    origin = GoOrigin()
    names = go_modules(origin, units, versions)
    stack.enter_context(origin)

    def crawl(chosen: list[str], folder: Path) -> list[str]:
        return ["go", "crawl", "--file", _seeds(chosen, folder, "go"),
                "--proxy-url", origin.proxy_url, "--index-url", origin.index_url,
                "--proxy-rate", LIFTED, "--contact", CONTACT]  # fmt: skip

    return names, crawl


WORLDS = {"crates": crates_world, "pypi": pypi_world, "go": go_world}


def measure(registries: list[str], sizes: list[int], versions: int) -> Iterator[Table]:
    rows_table = Table(title=f"crawl into SQLite, {versions} versions a unit, limits lifted")
    for column in ("registry", "units", "VERSION rows", "wall s", "rows/s", "CPU ms/row",
                   "× crates CPU", "peak RSS MB"):  # fmt: skip
        rows_table.add_column(column, justify="right")
    peaks: dict[str, dict[int, float]] = {}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        root = Path(tmp)
        worlds = {
            r: WORLDS[r](stack, root / r, max(sizes), versions) for r in ["crates", *registries]
        }
        for size in sizes:
            rows = size * versions
            per_row: dict[str, float] = {}
            for registry, (names, crawl) in worlds.items():
                db = f"sqlite:///{root / f'{registry}-{size}.db'}"
                wall, cpu, peak, code = run([*crawl(names[:size], root), "--db", db])
                per_row[registry] = 1000 * cpu / rows
                peaks.setdefault(registry, {})[size] = peak
                ratio = f"{per_row[registry] / per_row['crates']:.2f}"
                rows_table.add_row(registry, f"{size:,}", f"{rows:,}", f"{wall:.1f}",
                                   f"{rows / wall:,.0f}", f"{per_row[registry]:.3f}",
                                   ratio if registry != "crates" else "",
                                   f"{peak:.0f}" + (f" (exit {code})" if code else ""))  # fmt: skip
    rows_table.caption = f"load average {os.getloadavg()[0]:.1f}"
    yield rows_table
    memory = Table(title=f"peak RSS at {max(sizes):,} units against {min(sizes):,}")
    for column in ("registry", f"{min(sizes):,} MB", f"{max(sizes):,} MB", "growth"):
        memory.add_column(column, justify="right")
    for registry, by_size in peaks.items():
        small, large = by_size[min(sizes)], by_size[max(sizes)]
        memory.add_row(registry, f"{small:.0f}", f"{large:.0f}", f"{(large / small - 1):+.1%}")
    yield memory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--versions", type=int, default=30)
    parser.add_argument("--registries", default="pypi,go", help="besides crates, the baseline")
    args = parser.parse_args()
    registries = [r for r in args.registries.split(",") if r and r != "crates"]
    sizes = sorted(int(s) for s in args.sizes.split(","))
    console = Console()
    for table in measure(registries, sizes, args.versions):
        console.print(table)


if __name__ == "__main__":
    main()
