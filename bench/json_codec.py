"""JSON read and written by stagecrawl.jsoncodec against the json module, in the same run.

    python bench/json_codec.py [--rounds 7]

The documents are the real ones in ../shared/fixtures (crates index lines, crates.io API
answers, PyPI Simple and JSON API pages, OSV records), read as bytes the way the fetcher
hands them over; each is then written back as a JSON column (sorted keys, compact, UTF-8).
Each round times json and jsoncodec back to back, in alternating order; reported: the median
microseconds a document of each and their ratio, with the ratio's range over the rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from stagecrawl.jsoncodec import canonical, loads

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"
KINDS = {
    "crates index lines": "crates-index",
    "crates.io API answers": "crates-api",
    "PyPI pages": "pypi",
    "OSV records": "osv",
}
ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def documents(folder: Path, lines: bool) -> list[bytes]:
    found: list[bytes] = []
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.stat().st_size > 4_000_000:
            continue
        data = path.read_bytes()
        if lines:
            found += [line for line in data.splitlines() if line.startswith(b"{")]
        elif data.lstrip()[:1] in (b"{", b"["):
            found.append(data)
    return [item for item in found if _readable(item)]


def _readable(data: bytes) -> bool:
    """Only what json reads (a fixture may hold a broken line on purpose)."""
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def per_item(work: Callable[[Any], Any], items: list[Any]) -> float:
    """Microseconds an item."""
    started = time.perf_counter()
    for item in items:
        work(item)
    return (time.perf_counter() - started) / len(items) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    if not FIXTURES.is_dir():
        sys.exit(f"{FIXTURES} is absent: this bench reads the real documents there")
    table = Table(title=f"json module vs jsoncodec, median of {args.rounds} alternating rounds")
    for column in ("documents", "count", "step", "json µs", "jsoncodec µs", "json / jsoncodec"):
        table.add_column(column, justify="right")
    for label, folder in KINDS.items():
        items = documents(FIXTURES / folder, lines=folder == "crates-index")
        if not items:
            continue
        values = [json.loads(item) for item in items]
        steps: list[tuple[str, Callable[[Any], Any], Callable[[Any], Any], list[Any]]] = [
            ("read", json.loads, loads, items),
            ("write", ENCODER.encode, canonical, values),
        ]
        for step, baseline, ours, inputs in steps:
            base_times, our_times, ratios = [], [], []
            for round_ in range(args.rounds):
                pair = [(baseline, base_times), (ours, our_times)]
                for work, times in pair if round_ % 2 == 0 else reversed(pair):
                    times.append(per_item(work, inputs))
                ratios.append(base_times[-1] / our_times[-1])
            table.add_row(
                label, f"{len(items):,}", step,
                f"{statistics.median(base_times):.1f}", f"{statistics.median(our_times):.1f}",
                f"{statistics.median(ratios):.2f} × ({min(ratios):.2f}–{max(ratios):.2f})",
            )  # fmt: skip
    Console().print(table)


if __name__ == "__main__":
    main()
