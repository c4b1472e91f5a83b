"""How fast a stop stops, in every waiting phase, beside another source tree in the same run.

    python bench/stops.py [--baseline-src /path/to/other/src] [--grace 10]

For each phase a `stagecrawl` process is started against the loopback mirror, SIGINT (or
SIGTERM) is sent once the phase is under way, and the table shows the exit code, the seconds
from the signal to the exit, and the requests the origins logged after the signal (their own
log, on this process's clock). With --baseline-src the same runs with that tree's code (e.g.
main's), interleaved, so the two columns share the machine's load. The promise: nothing is on
the wire in these phases, so the exit comes within about 2 s whatever the grace period, with
0 requests after the signal.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from stagecrawl.demo.registry import CRATES, build_mirror
from stagecrawl.testing.origin import TestOrigin

NAMES = sorted(CRATES)


@dataclass
class Phase:
    name: str
    args: list[str]
    ready: Callable[[TestOrigin, TestOrigin], bool]
    sig: signal.Signals = signal.SIGINT
    rules: Callable[[TestOrigin, TestOrigin], None] = lambda _index, _api: None


PHASES = [
    Phase(
        "seeding at --index-rate 1",
        ["crates", "seed", *NAMES, "--index-rate", "1"],
        lambda index, _api: len(index.log) >= 2,
    ),
    Phase(
        "collecting at --api-rate 0.1",
        ["crates", "crawl", *NAMES[:8], "--api-rate", "0.1"],
        lambda index, api: len(index.log) >= 8 and len(api.log) >= 1,  # seeded: API only
        signal.SIGTERM,
    ),
    Phase(
        "a budget wait (--api-budget 2/600s)",
        ["crates", "crawl", *NAMES[:6], "--api-rate", "20", "--api-budget", "2/600s"],
        lambda index, api: len(index.log) >= 6 and len(api.log) >= 2,
    ),
    Phase(
        "a 429 cooldown (Retry-After: 120)",
        ["crates", "crawl", *NAMES[:6], "--api-rate", "20"],
        lambda index, api: len(index.log) >= 6 and len(api.log) >= 1,
        signal.SIGTERM,
        lambda _index, api: api.rule("/api/*", too_many=10_000, retry_after="120"),
    ),
]


def run_phase(phase: Phase, src: str | None, grace: float, work: Path) -> tuple[int, float, int]:
    """(exit code, seconds from the signal to the exit, requests logged after the signal)"""
    mirror = work / "mirror"
    if not mirror.exists():
        build_mirror(mirror)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STAGECRAWL_")}
    env["STAGECRAWL_GRACE_PERIOD"] = str(grace)
    if src:
        env["PYTHONPATH"] = src
    with TestOrigin(mirror / "index") as index, TestOrigin(mirror / "api") as api:
        phase.rules(index, api)
        db = work / f"stop-{time.monotonic_ns()}.db"
        process = subprocess.Popen(
            [sys.executable, "-m", "stagecrawl", *phase.args, "--db", f"sqlite:///{db}",
             "--index-url", index.url + "/", "--api-url", api.url + "/"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while not phase.ready(index, api) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)
        sent = time.monotonic()
        process.send_signal(phase.sig)
        code = process.wait(180)
        took = time.monotonic() - sent
        after = sum(1 for origin in (index, api) for r in list(origin.log) if r.time >= sent)
    return code, took, after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline-src", help="another src/ tree to run beside this one")
    parser.add_argument("--grace", type=float, default=10.0)
    args = parser.parse_args()
    trees = [("this tree", None)] + ([("baseline", args.baseline_src)] if args.baseline_src else [])
    table = Table(
        title=f"time from the signal to the exit, grace period {args.grace:g}s"
        f" (load average at start: {os.getloadavg()[0]:.1f})"
    )
    for column in ("phase", "tree", "signal", "exit", "s to exit", "requests after"):
        table.add_column(column, justify="right")
    with tempfile.TemporaryDirectory() as tmp:
        for phase in PHASES:
            for label, src in trees:
                code, took, after = run_phase(phase, src, args.grace, Path(tmp))
                table.add_row(
                    phase.name, label, phase.sig.name, str(code), f"{took:.2f}", str(after)
                )
    Console().print(table)


if __name__ == "__main__":
    main()
