"""A queue without leases (the seed tables) is read on from where its run left off: the cost of
a read stays the same however many names are done before it, and a name added behind the run's
position is still taken."""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import event

from stagecrawl.engine.work import LoopSettings, WorkLoop
from stagecrawl.queue import Claimed, Handler, Outcome, QueueRun, RunSettings
from stagecrawl.queue.lists import COLLECTED, PENDING
from stagecrawl.storage.db import Database
from tests.crates.kernel import rust, seed_queue

STAMP = "2026-01-01 00:00:00.000000"
LATE = "a00000x"  # added mid-run, among the done names: behind the run's position


def pending_names(count: int) -> list[str]:
    return [f"p{n:04d}" for n in range(count)]  # after every done name, in name order


def run_seeds(tmp_path: Path, done: int, pending: int) -> tuple[list[str], list[int]]:
    """Seed `done` finished names and `pending` ones, run the queue over them ten names a
    read, and return the names taken and SQLite's VM steps for each read that found names."""
    path = tmp_path / f"done-{done}-{pending}.db"
    db = Database(f"sqlite:///{path}")
    rows = [(f"a{n:05d}", f"a{n:05d}", COLLECTED) for n in range(done)]
    rows += [(name, name, PENDING) for name in pending_names(pending)]
    with sqlite3.connect(path) as conn:
        conn.executemany(
            f"INSERT INTO {rust(db).seed.name} (CRATE_NAME, NAME, STATE, RESYNC, LAST_UPDATED)"
            f" VALUES (?, ?, ?, 0, '{STAMP}')",
            rows,
        )
    db.engine.dispose()
    steps = [0]

    def count(_: Any = None) -> int:
        steps[0] += 1
        return 0  # go on

    @event.listens_for(db.engine, "connect")
    def _counting(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.set_progress_handler(count, 100)  # a tick every 100 VM steps

    queue = seed_queue(db)
    taken: list[str] = []
    costs: list[int] = []
    peek = queue.peek

    def counted_peek(*args: Any, **kwargs: Any) -> list[Claimed]:
        before = steps[0]
        rows = peek(*args, **kwargs)
        if rows:
            costs.append((steps[0] - before) * 100)
        return rows

    queue.peek = counted_peek  # type: ignore[method-assign]

    class Seeds(Handler[list[Claimed]]):
        def outcomes(self, result: list[Claimed]) -> Sequence[Outcome]:
            return [Outcome(row, COLLECTED) for row in result]

    async def main() -> None:
        run: QueueRun[list[Claimed]] = QueueRun(queue, Seeds(), "w", RunSettings())

        async def work(unit: list[Claimed]) -> list[Claimed]:
            taken.append(unit[0].group)
            if len(taken) == 30:  # another process queues a name behind the run's position
                with sqlite3.connect(path) as conn:
                    conn.execute(
                        f"INSERT INTO {rust(db).seed.name} (CRATE_NAME, NAME, STATE, RESYNC,"
                        f" LAST_UPDATED) VALUES ('{LATE}', '{LATE}', 0, 0, '{STAMP}')"
                    )
            return unit

        await run.open()
        try:
            settings = LoopSettings(concurrency=1, claim_ahead=10, commit_batch=10)
            await WorkLoop(run, work, settings).run()
        finally:
            await run.close()

    asyncio.run(main())
    db.dispose()
    return taken, costs


def test_a_read_costs_the_same_however_many_names_are_done_and_none_is_missed(
    tmp_path: Path,
) -> None:
    """What a read that finds names costs (the median over the run's reads: a run still reads
    from the start a few times, when it wraps round for a name added behind it or for one
    left at its end, and how often it asks at its end depends on the machine's speed), with
    100 and with 20,000 names done before them."""
    per_read = {}
    for done in (100, 20_000):
        taken, costs = run_seeds(tmp_path, done, 600)
        assert sorted(taken) == sorted([*pending_names(600), LATE])  # each once
        per_read[done] = statistics.median(costs)
    # From the start, every read walked past the done names: ~200 × the steps at 20,000
    assert per_read[20_000] < 3 * per_read[100], per_read
