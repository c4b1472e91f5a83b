"""Core metadata's header fields read by stagecrawl.emailheaders.header_fields against the
stdlib email parser (compat32, headers only: what stagecrawl used before), in the same run.

    python bench/metadata_headers.py [--rounds 7]

The files are the real METADATA files in ../shared/fixtures/pypi (their descriptions cut
short), then the same files with a 20 KB description in the body, as a README makes a real
one. Each round times both back to back, in alternating order; reported: the median
microseconds a file of each and their ratio, with the ratio's range over the rounds.
"""

from __future__ import annotations

import argparse
import email.parser
import email.policy
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from stagecrawl.emailheaders import header_fields

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "pypi"
README = "\n\n" + "A line of a README, with *markdown* and `code` in it, as most are.\n" * 300


def email_fields(text: str) -> Any:
    return email.parser.Parser(policy=email.policy.compat32).parsestr(text, headersonly=True)


def per_file(read: Callable[[str], Any], texts: list[str], repeat: int = 5) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        for text in texts:
            read(text)
    return (time.perf_counter() - started) / repeat / len(texts) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    rounds = parser.parse_args().rounds
    texts = [p.read_bytes().decode("utf-8", "replace") for p in FIXTURES.rglob("*.metadata")]
    if not texts:
        raise SystemExit(f"no METADATA files under {FIXTURES}: ../shared is needed")
    with_readme = [text.split("\n\n", 1)[0] + README for text in texts]
    table = Table(title=f"header fields of a METADATA file, µs (median of {rounds} rounds)")
    for column in ("files", "email parser", "header_fields", "ratio", "ratio range"):
        table.add_column(column, justify="right")
    for label, corpus in ((f"{len(texts)} real", texts), ("with a 20 KB README", with_readme)):
        pairs = []
        for round_ in range(rounds):
            readers = [email_fields, header_fields][:: 1 if round_ % 2 else -1]
            timed = {read: per_file(read, corpus) for read in readers}
            pairs.append((timed[email_fields], timed[header_fields]))
        old, new = (statistics.median(p[i] for p in pairs) for i in (0, 1))
        ratios = [a / b for a, b in pairs]
        table.add_row(label, f"{old:.1f}", f"{new:.1f}", f"{old / new:.2f} ×",
                      f"{min(ratios):.2f}–{max(ratios):.2f}")  # fmt: skip
    Console().print(table)


if __name__ == "__main__":
    main()
