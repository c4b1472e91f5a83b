"""How fast a stop stops, in every phase, beside another source tree in the same run.

    python bench/stops.py [--baseline-src /path/to/other/src] [--grace 10] [--repeat 1]
                          [--phase WORD ...]

For each phase a `stagecrawl` process is started against loopback origins, SIGINT and then
SIGTERM is sent once the phase is under way, and the table shows the exit code, the seconds
from the signal to the exit, the requests the origins logged after the signal (their own log,
on this process's clock), and whether a plain rerun (the same command without the flags that
made it wait, the origins back to normal) then completes. With --baseline-src the same runs
with that tree's code (e.g. main's), the order of the two trees alternating run by run, so the
two columns share the machine's load; with --repeat the seconds are medians.

The promise (issue 20): nothing is on the wire in these phases (a download is cancelled, a
dump load polls the stop), so the exit comes within about 2 s whatever the grace period,
with 0 requests after the signal, and the rerun completes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from stagecrawl.demo.registry import CRATES, build_mirror
from stagecrawl.demo.wikidata import install
from stagecrawl.testing.dbdump import build_dump
from stagecrawl.testing.origin import TestOrigin

NAMES = sorted(CRATES)
OSV_FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "osv"
SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass
class Run:
    """One phase, set up: the command, what makes it wait (dropped for the rerun), the
    origins whose logs count, when it is under way, and how the origins heal for the rerun."""

    args: list[str]
    waiting: list[str]
    origins: list[TestOrigin]
    ready: Callable[[], bool]
    heal: Callable[[], None] = lambda: None
    rerun_codes: tuple[int, ...] = (0,)
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Phase:
    name: str
    setup: Callable[[Path, contextlib.ExitStack], Run]


def _mirror(work: Path, stack: contextlib.ExitStack) -> tuple[TestOrigin, TestOrigin, list[str]]:
    mirror = work.parent / "mirror"
    if not mirror.exists():
        build_mirror(mirror)
    index = stack.enter_context(TestOrigin(mirror / "index"))
    api = stack.enter_context(TestOrigin(mirror / "api"))
    return index, api, ["--index-url", index.url + "/", "--api-url", api.url + "/"]


def _seeding(work: Path, stack: contextlib.ExitStack) -> Run:
    index, api, urls = _mirror(work, stack)
    return Run(
        ["crates", "seed", *NAMES, "--db", _db(work), *urls],
        ["--index-rate", "1"],
        [index, api],
        lambda: len(index.log) >= 2,
    )


def _collecting(work: Path, stack: contextlib.ExitStack) -> Run:
    index, api, urls = _mirror(work, stack)
    return Run(
        ["crates", "crawl", *NAMES[:8], "--db", _db(work), *urls],
        ["--api-rate", "0.1"],
        [index, api],
        lambda: len(index.log) >= 8 and len(api.log) >= 1,  # seeded: API only
    )


def _budget(work: Path, stack: contextlib.ExitStack) -> Run:
    index, api, urls = _mirror(work, stack)
    return Run(
        ["crates", "crawl", *NAMES[:6], "--db", _db(work), *urls],
        ["--api-rate", "20", "--api-budget", "2/600s"],
        [index, api],
        lambda: len(index.log) >= 6 and len(api.log) >= 2,
    )


def _cooldown(work: Path, stack: contextlib.ExitStack) -> Run:
    index, api, urls = _mirror(work, stack)
    api.rule("/api/*", too_many=10_000, retry_after="120")
    return Run(
        ["crates", "crawl", *NAMES[:6], "--db", _db(work), *urls, "--api-rate", "20"],
        [],
        [index, api],
        lambda: len(index.log) >= 6 and len(api.log) >= 1,
        heal=api.clear_rules,
    )


def _lock(work: Path, stack: contextlib.ExitStack) -> Run:
    index, api, urls = _mirror(work, stack)
    lock = work / "Cargo.lock"
    lock.write_text(
        "version = 3\n"
        + "".join(
            f'\n[[package]]\nname = "{n}"\nversion = "1.0.0"\n'
            'source = "registry+https://github.com/rust-lang/crates.io-index"\n'
            for n in NAMES
        )
    )
    return Run(
        ["crates", "lock", "--lockfile", str(lock), "--db", _db(work), *urls],
        ["--index-rate", "1"],
        [index, api],
        lambda: len(index.log) >= 2,
        rerun_codes=(0, 1),  # 1: pins the index does not list (registered all the same)
    )


def _osv_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(OSV_FIXTURES.glob("RUSTSEC-*.json")):
            archive.writestr(path.name, json.dumps(json.loads(path.read_text())))
    return buffer.getvalue()


def _download(command: str, body: Callable[[Path], bytes]) -> Callable[..., Run]:
    """A download on the wire (trickled a byte at a time): a stop cancels it at once."""

    def setup(work: Path, stack: contextlib.ExitStack) -> Run:
        origin = stack.enter_context(TestOrigin())
        data = body(work)
        origin.rule("/source", trickle=0.05, body=data)
        origin.add("source", data)
        extra = ["--scope", "all"] if command == "vulns" else []
        return Run(
            ["crates", command, "--source", origin.url + "/source", "--db", _db(work), *extra],
            [],
            [origin],
            lambda: bool(origin.log),
            heal=origin.clear_rules,
        )

    return setup


def _small_dump(work: Path) -> bytes:
    path = work / "small-dump.tar.gz"
    build_dump(path, crates=20, versions_per=5)
    return path.read_bytes()


def _dump_load(work: Path, stack: contextlib.ExitStack) -> Run:
    source = work.parent / "db-dump.tar.gz"
    if not source.exists():
        build_dump(source, crates=1500, versions_per=40)  # 60,000 versions: seconds to load
    db_file = work / "dump.db"
    return Run(
        ["crates", "dbdump", "--source", str(source), "--db", f"sqlite:///{db_file}"],
        [],
        [],
        db_file.exists,
    )


def _aircraft(work: Path, stack: contextlib.ExitStack) -> Run:
    origin = stack.enter_context(TestOrigin())
    install(origin)
    return Run(
        ["aircraft", "crawl", "--out", str(work / "air"), "--batch", "1",
         "--sparql-url", origin.url + "/sparql", "--entities-url", origin.url + "/w/api.php"],
        ["--sparql-rate", "0.05", "--entities-rate", "0.05"],
        [origin],
        lambda: len(origin.log) >= 2,
    )  # fmt: skip


PHASES = [
    Phase("seeding at --index-rate 1", _seeding),
    Phase("collecting at --api-rate 0.1", _collecting),
    Phase("a budget wait (--api-budget 2/600s)", _budget),
    Phase("a 429 cooldown (Retry-After: 120)", _cooldown),
    Phase("lock waiting for the index (1/s)", _lock),
    Phase("vulns downloading (trickled)", _download("vulns", lambda _work: _osv_zip())),
    Phase("dbdump downloading (trickled)", _download("dbdump", _small_dump)),
    Phase("dbdump loading 60,000 versions", _dump_load),
    Phase("aircraft waiting for its lanes (0.05/s)", _aircraft),
]


def _db(work: Path) -> str:
    return f"sqlite:///{work / 'stop.db'}"


@dataclass
class Outcome:
    code: int
    took: float  # seconds from the signal to the exit
    after: int  # requests the origins logged after the signal
    rerun: bool  # a plain rerun completed


def run_phase(
    phase: Phase, sig: signal.Signals, src: str | None, grace: float, work: Path
) -> Outcome:
    work.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STAGECRAWL_")}
    env["STAGECRAWL_GRACE_PERIOD"] = str(grace)
    if src:
        env["PYTHONPATH"] = src
    with contextlib.ExitStack() as stack:
        run = phase.setup(work, stack)
        command = [sys.executable, "-m", "stagecrawl", *run.args]
        process = subprocess.Popen(
            command + run.waiting, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
        )
        deadline = time.monotonic() + 120
        while not run.ready() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.02)
        time.sleep(0.2)
        sent = time.monotonic()
        process.send_signal(sig)
        code = process.wait(180)
        took = time.monotonic() - sent
        after = sum(1 for origin in run.origins for r in list(origin.log) if r.time >= sent)
        run.heal()
        rerun = subprocess.run(command, capture_output=True, env=env, timeout=600)
    return Outcome(code, took, after, rerun.returncode in run.rerun_codes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--baseline-src", help="another src/ tree to run beside this one")
    parser.add_argument("--grace", type=float, default=10.0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--phase", nargs="*", help="only the phases whose name has a word")
    args = parser.parse_args()
    trees = [("this tree", None)] + ([("baseline", args.baseline_src)] if args.baseline_src else [])
    phases = [p for p in PHASES if not args.phase or any(w in p.name for w in args.phase)]
    load = os.getloadavg()[0]
    results: dict[tuple[str, str, str], list[Outcome]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        turn = 0
        for _ in range(args.repeat):
            for phase in phases:
                for sig in SIGNALS:
                    turn += 1  # alternate which tree goes first: neither always runs second
                    for label, src in trees if turn % 2 else trees[::-1]:
                        work = Path(tmp) / f"run-{turn}-{label.replace(' ', '-')}"
                        outcome = run_phase(phase, sig, src, args.grace, work)
                        results.setdefault((phase.name, label, sig.name), []).append(outcome)
    table = Table(
        title=f"time from the signal to the exit, grace period {args.grace:g}s, "
        f"median of {args.repeat} (load average {load:.1f} at start, "
        f"{os.getloadavg()[0]:.1f} at the end)"
    )
    for column in ("phase", "tree", "signal", "exit", "s to exit", "requests after", "rerun"):
        table.add_column(column, justify="right")
    for (name, label, sig_name), outcomes in results.items():
        codes = sorted({o.code for o in outcomes})
        table.add_row(
            name,
            label,
            sig_name,
            "/".join(map(str, codes)),
            f"{statistics.median(o.took for o in outcomes):.2f}",
            str(max(o.after for o in outcomes)),
            "ok" if all(o.rerun for o in outcomes) else "FAILED",
        )
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
