"""How fast a stop stops, in every phase and for both signals, beside another source tree.

    python bench/stops.py [--baseline-src /path/to/other/src] [--grace 10] [--repeat 1]
                          [--only SUBSTRING]

For each phase a `stagecrawl` process is started against loopback origins (the demo mirror,
a Wikidata slice, a trickling download, a database dump on disk), SIGINT or SIGTERM is sent
once the phase is under way, and the table shows the exit code, the seconds from the signal
to the exit, the requests the origins logged after the signal (their own log, on this
process's clock), and whether a plain rerun (the same command without what slowed it down)
then completes. With --baseline-src the same runs with that tree's code (e.g. main's),
interleaved and in alternating order, so the two columns share the machine's load; with
--repeat N each cell is the median of N runs (requests after: the most seen; rerun: all ok).

The promise (issue 20): nothing is on the wire in the waiting phases, so the exit comes
within about 2 s whatever the grace period, with 0 requests after the signal; a download
or a dump load is cancelled at once; a plain rerun completes. The one phase with a request
on the wire (lock against a stalled index) takes the grace period, and no more.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from stagecrawl.demo.advisories import CRATES_ADVISORIES, osv_zip
from stagecrawl.demo.registry import CRATES, build_mirror
from stagecrawl.demo.wikidata import install
from stagecrawl.testing.dbdump import build_dump
from stagecrawl.testing.origin import TestOrigin
from stagecrawl.testing.registry import write_cargo_lock

NAMES = sorted(CRATES)
SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass
class Run:
    """One phase's origins and files, fresh for each run."""

    index: TestOrigin
    api: TestOrigin
    other: TestOrigin  # a Wikidata slice, a download
    work: Path
    db: str

    @property
    def crates_urls(self) -> list[str]:
        return [
            "--db",
            self.db,
            "--index-url",
            self.index.url + "/",
            "--api-url",
            self.api.url + "/",
        ]

    def requests_after(self, moment: float) -> int:
        origins = (self.index, self.api, self.other)
        return sum(1 for origin in origins for r in list(origin.log) if r.time >= moment)


@dataclass
class Phase:
    name: str
    # (the slowed-down command, the plain rerun) for this run's origins and files
    args: Callable[[Run], tuple[list[str], list[str]]]
    ready: Callable[[Run], bool]  # the phase is under way: send the signal
    rules: Callable[[Run], None] = lambda _run: None  # what slows the origins down
    rerun_codes: tuple[int, ...] = (0,)


def seeded(run: Run, names: list[str]) -> bool:
    """Every name was asked of the index: from now on only the phase under test sends."""
    return len(run.index.log) >= len(names)


def crawl(names: list[str], *slow: str) -> Callable[[Run], tuple[list[str], list[str]]]:
    def args(run: Run) -> tuple[list[str], list[str]]:
        plain = ["crates", "crawl", *names, *run.crates_urls]
        return plain + list(slow), plain

    return args


def seed_args(run: Run) -> tuple[list[str], list[str]]:
    plain = ["crates", "seed", *NAMES, *run.crates_urls]
    return [*plain, "--index-rate", "1"], plain


def lock_args(run: Run) -> tuple[list[str], list[str]]:
    lock = write_cargo_lock(run.work / "Cargo.lock", NAMES)
    plain = ["crates", "lock", "--lockfile", str(lock), *run.crates_urls]
    return [*plain, "--index-rate", "1"], plain


def lock_stalled_args(run: Run) -> tuple[list[str], list[str]]:
    plain = lock_args(run)[1]  # at the default index rate: the stall is the origin's
    return plain, plain


def vulns_args(run: Run) -> tuple[list[str], list[str]]:
    command = ["crates", "vulns", "--db", run.db, "--source"]
    return [*command, run.other.url + "/slow.zip"], [*command, run.other.url + "/all.zip"]


def vulns_rules(run: Run) -> None:
    run.other.add("all.zip", osv_zip(CRATES_ADVISORIES))
    run.other.rule("/slow.zip", trickle=0.05, body=b"x" * 100_000)


def dbdump_args(run: Run) -> tuple[list[str], list[str]]:
    source = run.work / "db-dump.tar.gz"
    if not source.exists():
        build_dump(source, crates=1500, versions_per=40)  # 60,000 versions: seconds to load
    plain = ["crates", "dbdump", "--source", str(source), "--db", run.db]
    return plain, plain


def dbdump_ready(run: Run) -> bool:
    return Path(run.db.removeprefix("sqlite:///")).exists()


def aircraft_args(run: Run) -> tuple[list[str], list[str]]:
    plain = ["aircraft", "crawl", "--out", str(run.work / "air"),
             "--sparql-url", run.other.url + "/sparql",
             "--entities-url", run.other.url + "/w/api.php", "--batch", "1"]  # fmt: skip
    return (
        [*plain, "--sparql-rate", "0.05", "--entities-rate", "0.05"],
        [*plain, "--sparql-rate", "50", "--entities-rate", "50"],
    )


PHASES = [
    Phase("seeding at --index-rate 1", seed_args, lambda run: len(run.index.log) >= 2),
    Phase(
        "collecting at --api-rate 0.1",
        crawl(NAMES[:8], "--api-rate", "0.1"),
        lambda run: seeded(run, NAMES[:8]) and len(run.api.log) >= 1,
    ),
    Phase(
        "a budget wait (--api-budget 2/600s)",
        crawl(NAMES[:6], "--api-rate", "20", "--api-budget", "2/600s"),
        lambda run: seeded(run, NAMES[:6]) and len(run.api.log) >= 2,
    ),
    Phase(
        "a 429 cooldown (Retry-After: 120)",
        crawl(NAMES[:6], "--api-rate", "20"),
        lambda run: seeded(run, NAMES[:6]) and len(run.api.log) >= 1,
        lambda run: run.api.rule("/api/*", too_many=10_000, retry_after="120"),
    ),
    Phase(
        "lock waiting for the index (--index-rate 1)",
        lock_args,
        lambda run: len(run.index.log) >= 2,
        rerun_codes=(0, 1),  # 1: pins the demo index does not list (1.0.0)
    ),
    Phase(
        "lock, an index request on the wire (stalled 60 s)",
        lock_stalled_args,
        lambda run: bool(run.index.log),
        lambda run: run.index.rule("/*", stall=60),
        rerun_codes=(0, 1),
    ),
    Phase("vulns downloading (trickle)", vulns_args, lambda run: bool(run.other.log), vulns_rules),
    Phase("dbdump loading 60,000 versions", dbdump_args, dbdump_ready),
    Phase(
        "aircraft at 0.05 requests/s",
        aircraft_args,
        lambda run: len(run.other.log) >= 2,
        lambda run: install(run.other),
    ),
]


@dataclass
class Result:
    code: int
    took: float  # seconds from the signal to the exit
    after: int  # requests the origins logged after the signal
    rerun: bool  # the plain rerun completed


def run_phase(
    phase: Phase, sig: signal.Signals, src: str | None, grace: float, work: Path
) -> Result:
    mirror = work / "mirror"
    if not mirror.exists():
        build_mirror(mirror)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STAGECRAWL_")}
    env["STAGECRAWL_GRACE_PERIOD"] = str(grace)
    if src:
        env["PYTHONPATH"] = src
    here = Path(tempfile.mkdtemp(dir=work))
    with (
        TestOrigin(mirror / "index") as index,
        TestOrigin(mirror / "api") as api,
        TestOrigin() as other,
    ):
        run = Run(index, api, other, here, f"sqlite:///{here / 'stop.db'}")
        phase.rules(run)
        slow, plain = phase.args(run)
        process = subprocess.Popen(
            [sys.executable, "-m", "stagecrawl", *slow],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        deadline = time.monotonic() + 120
        while not phase.ready(run) and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.02)
        time.sleep(0.2)
        sent = time.monotonic()
        process.send_signal(sig)
        code = process.wait(180)
        took = time.monotonic() - sent
        after = run.requests_after(sent)
        for origin in (index, api, other):
            origin.clear_rules()
        again = subprocess.run(
            [sys.executable, "-m", "stagecrawl", *plain],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            timeout=600,
        )
    return Result(code, took, after, again.returncode in phase.rerun_codes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline-src", help="another src/ tree to run beside this one")
    parser.add_argument("--grace", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--only", help="run the phases whose name contains this")
    args = parser.parse_args()
    trees: list[tuple[str, str | None]] = [("this tree", None)]
    if args.baseline_src:
        trees.append(("baseline", args.baseline_src))
    phases = [p for p in PHASES if not args.only or args.only in p.name]
    load = os.getloadavg()[0]
    results: dict[tuple[str, str, str], list[Result]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        turn = 0
        for _ in range(args.repeat):
            for phase in phases:
                for sig in SIGNALS:
                    # alternate which tree goes first, so neither always meets the same load
                    order = trees if turn % 2 == 0 else trees[::-1]
                    turn += 1
                    for label, src in order:
                        result = run_phase(phase, sig, src, args.grace, Path(tmp))
                        results.setdefault((phase.name, sig.name, label), []).append(result)
    table = Table(
        title=f"from the signal to the exit, grace period {args.grace:g}s, median of"
        f" {args.repeat} (load average {load:.1f} at start, {os.getloadavg()[0]:.1f} at end)"
    )
    for column in ("phase", "signal", "tree", "exit", "s to exit", "requests after", "rerun"):
        table.add_column(column, justify="right")
    for phase in phases:
        for sig in SIGNALS:
            for label, _src in trees:
                got = results[(phase.name, sig.name, label)]
                codes = sorted({r.code for r in got})
                table.add_row(
                    phase.name,
                    sig.name,
                    label,
                    "/".join(map(str, codes)),
                    f"{statistics.median(r.took for r in got):.2f}",
                    str(max(r.after for r in got)),
                    "ok" if all(r.rerun for r in got) else "FAILED",
                )
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
