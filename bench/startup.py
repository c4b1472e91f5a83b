"""How long the `stagecrawl` command takes to start, against `python -c pass`.

    python bench/startup.py [--runs 5] [--against /path/to/other/src]

Each command runs `--runs` times as a user runs it (a fresh interpreter: `python -m
stagecrawl …`, this tree's `src` first on PYTHONPATH); the table shows the median wall time,
and its ratio to the interpreter's own start-up (`python -c pass`) and to the import of the
CLI framework alone (typer with its help renderer), both measured in the same run; a third
baseline adds the pydantic that typer imports to coerce any option's value (every command that
runs, and every sub-command's `--help`, pays it). `status` runs three times: on a missing
database (an error before any query), on an empty one named by `--db` (every count read), and
on the default database in the folder it runs in (`stagecrawl status` as a user types it; on
SQLite its reads use the standard library's sqlite3, storage/reads.py). With `--against`, the
same commands from another tree (e.g. main's `src`) run interleaved with
these, for a before/after under the same load. Issue 20's targets: `--version` ≤ 0.15 s,
`--help` and `status` ≤ 0.4 s (median of 5 on an idle machine).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

SRC = Path(__file__).resolve().parents[1] / "src"
DEFAULT_DB = "sqlite:///stagecrawl.db"  # storage/db.py's DEFAULT_DB_URL, as a user has it


def seconds(
    argv: list[str], env: dict[str, str], cwd: Path | None = None
) -> tuple[float, float, int]:
    """Wall time, the child's CPU time (user + system: less moved by other processes' load
    than the wall time is), exit code."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, env=env, cwd=cwd)
    took = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return took, cpu, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--against", type=Path, help="another tree's src folder")
    args = parser.parse_args()
    trees = {"this tree": SRC} | ({"against": args.against} if args.against else {})
    python = [sys.executable]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        # As installed: pip writes a package's bytecode, so the modules load from a bytecode
        # cache (here in tmp, not in the source trees) that one untimed run of each command
        # fills. Without it (PYTHONDONTWRITEBYTECODE) every run would compile all of
        # stagecrawl's sources, a cost no installed stagecrawl has.
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("STAGECRAWL_") and k != "PYTHONDONTWRITEBYTECODE"
        }
        base["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "bytecode")
        envs = {name: {**base, "PYTHONPATH": str(src)} for name, src in trees.items()}
        db = f"sqlite:///{Path(tmp) / 'missing.db'}"
        empty = f"sqlite:///{Path(tmp) / 'empty.db'}"
        create = f"from stagecrawl.storage.db import Database; Database({empty!r})"
        subprocess.run([*python, "-c", create], env=envs["this tree"], check=True)
        # the default database (sqlite:///stagecrawl.db), in the folder status runs in
        home = Path(tmp) / "home"
        home.mkdir()
        default = f"from stagecrawl.storage.db import Database; Database({DEFAULT_DB!r})"
        subprocess.run([*python, "-c", default], env=envs["this tree"], check=True, cwd=home)
        cases = [
            ("python -c pass (baseline)", [*python, "-c", "pass"]),
            ("import typer + its help renderer", [*python, "-c", "import typer.rich_utils"]),
            (
                "  + typer's pydantic coercion",
                [*python, "-c", "import typer.rich_utils, typer._adapters"],
            ),
            ("stagecrawl --version", [*python, "-m", "stagecrawl", "--version"]),
            ("stagecrawl --help", [*python, "-m", "stagecrawl", "--help"]),
            ("stagecrawl crates --help", [*python, "-m", "stagecrawl", "crates", "--help"]),
            (
                "stagecrawl status (no database)",
                [*python, "-m", "stagecrawl", "status", "--db", db],
            ),
            (
                "stagecrawl status (empty database)",
                [*python, "-m", "stagecrawl", "status", "--db", empty],
            ),
            ("stagecrawl status (default database)", [*python, "-m", "stagecrawl", "status"]),
        ]
        # each command in a folder of its own but the default database's status
        where = {label: home if "default" in label else None for label, _ in cases}
        for label, argv in cases:  # the warm-up that writes the bytecode
            for env in envs.values():
                seconds(argv, env, where[label])
        times: dict[tuple[str, str], list[float]] = {}
        cpus: dict[tuple[str, str], list[float]] = {}
        codes: dict[tuple[str, str], int] = {}
        for _ in range(args.runs):  # interleaved: a change of load hits every row alike
            for label, argv in cases:
                for tree, env in envs.items():
                    took, cpu, code = seconds(argv, env, where[label])
                    times.setdefault((label, tree), []).append(took)
                    cpus.setdefault((label, tree), []).append(cpu)
                    codes[(label, tree)] = code
    load = f"load average {load_before:.1f} → {os.getloadavg()[0]:.1f}"
    table = Table(title=f"start-up, median of {args.runs} ({load})", title_justify="left")
    columns = ["command", "tree", "exit", "median s", "range s", "× python", "× typer import"]
    columns += ["× against"] if args.against else []
    columns += ["CPU s"] + (["CPU × against"] if args.against else [])
    for column in columns:
        table.add_column(column, justify="left" if column in ("command", "tree") else "right")
    for label, _ in cases:
        for tree in envs:
            median = statistics.median(times[(label, tree)])
            baseline = statistics.median(times[(cases[0][0], tree)])
            framework = statistics.median(times[(cases[1][0], tree)])
            cells = [
                label,
                tree,
                str(codes[(label, tree)]),
                f"{median:.3f}",
                f"{min(times[(label, tree)]):.2f}–{max(times[(label, tree)]):.2f}",
                f"{median / baseline:.1f}",
                f"{median / framework:.2f}",
            ]
            if args.against:  # this tree's median over the other's, same command, same run
                cells.append(f"{median / statistics.median(times[(label, 'against')]):.2f}")
            cpu = statistics.median(cpus[(label, tree)])
            cells.append(f"{cpu:.3f}")
            if args.against:
                cells.append(f"{cpu / statistics.median(cpus[(label, 'against')]):.2f}")
            table.add_row(*cells)
    Console().print(table)


if __name__ == "__main__":
    main()
