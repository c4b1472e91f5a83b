"""JSON store write cost: journal + checkpoints versus rewriting the whole file per insert.

    python bench/store.py

Prints wall time and bytes written per byte of final file for 10k and 100k records, beside
the rewrite-on-every-insert approach (the design stagecrawl replaces) at 10k.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from stagecrawl.engine.jsonstore import JsonStore, atomic_write, dumps_store


def record(i: int) -> dict[str, object]:
    return {
        "qid": f"Q{i}",
        "label": f"Aircraft model {i}",
        "wingspan_m": 10 + i % 50,
        "engines": ["Q1", "Q2"],
        "first_flight": "1970-01-01",
    }


def journal_store(folder: Path, count: int) -> tuple[float, float]:
    started = time.perf_counter()
    store = JsonStore(folder / f"journal-{count}.json")
    for i in range(count):
        store.put(f"Q{i}", record(i))
    store.close()
    elapsed = time.perf_counter() - started
    return elapsed, store.bytes_written / store.path.stat().st_size


def rewrite_store(folder: Path, count: int) -> tuple[float, float]:
    path = folder / f"rewrite-{count}.json"
    data: dict[str, object] = {}
    written = 0
    started = time.perf_counter()
    for i in range(count):
        data[f"Q{i}"] = record(i)
        body = dumps_store(data)
        atomic_write(path, body)
        written += len(body)
    elapsed = time.perf_counter() - started
    return elapsed, written / path.stat().st_size


def main() -> None:
    table = Table(title="JSON store: bytes written per byte of final file")
    for column in ("approach", "records", "wall s", "bytes written / final bytes"):
        table.add_column(column, justify="right")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for count in (10_000, 100_000):
            wall, ratio = journal_store(folder, count)
            table.add_row("journal + checkpoints", f"{count:,}", f"{wall:.2f}", f"{ratio:.2f}")
        wall, ratio = rewrite_store(folder, 10_000)
        table.add_row("rewrite every insert", "10,000", f"{wall:.2f}", f"{ratio:.0f}")
    Console().print(table)
    print(json.dumps({"note": "target: journal ratio <= 3"}))


if __name__ == "__main__":
    main()
