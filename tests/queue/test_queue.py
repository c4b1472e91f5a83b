"""The generic queue over a table it has never seen (not the LIST): a registry declares the
columns, and claims, leases, expiry, the ladder and the per-run exclusion work on it, on every
backend. The registries' own tests prove the same on their LIST tables."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import (
    Boolean,
    Column,
    DateTime,
    Index,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    select,
    update,
)

from stagecrawl.engine.frontier import Completion, Frontier
from stagecrawl.engine.request import Request
from stagecrawl.engine.work import LoopSettings, WorkLoop
from stagecrawl.queue import (
    Claimed,
    Handler,
    LadderCodes,
    Outcome,
    QueueRun,
    QueueTable,
    RetryLadder,
    RunSettings,
    SqlQueue,
    utcnow,
)
from stagecrawl.queue.workers import Workers
from stagecrawl.storage.db import Database
from tests.services import MARIADB_URL, POSTGRES_URL

CODES = LadderCodes(finished={1: "done"})


def jobs_table(metadata: MetaData, db: Database, indexed: bool = False) -> Table:
    """`indexed`: with the claim indexes (state, group) and (requeue, group), so claims read
    each rung and the requeued rows apart (`SqlQueue.indexed_claims`)."""
    claim_indexes = (
        [Index("IX_TEST_JOBS_STEP", "STEP", "BATCH"), Index("IX_TEST_JOBS_REDO", "REDO", "BATCH")]
        if indexed
        else []
    )
    return Table(
        "TB_TEST_JOBS",
        metadata,
        Column("JOB", String(64), primary_key=True),
        Column("BATCH", String(64), nullable=False),
        Column("STEP", SmallInteger, nullable=False),
        Column("REDO", Boolean, nullable=False, default=False),
        Column("WHY", Text),
        Column("OWNER", String(128)),
        Column("LEASE_END", DateTime),
        Column("CHANGED", DateTime, nullable=False),
        *claim_indexes,
        **db.table_options,
    )


def jobs_spec(table: Table, requeue: str | None = None) -> QueueTable:
    return QueueTable(
        table.name,
        id="JOB",
        group="BATCH",
        state="STEP",
        reason="WHY",
        updated="CHANGED",
        codes=CODES,
        holder="OWNER",
        until="LEASE_END",
        requeue=requeue,
    )


BACKENDS = ["sqlite", "mariadb", "postgresql"]


def backend_url(backend: str, tmp_path: Path) -> str:
    return {
        "sqlite": f"sqlite:///{tmp_path / 'jobs.db'}",
        "mariadb": MARIADB_URL,
        "postgresql": POSTGRES_URL,
    }[backend]


@pytest.fixture(params=[(b, i) for i in (False, True) for b in BACKENDS], ids=str)
def queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlQueue]:
    backend, indexed = request.param
    db = Database(backend_url(backend, tmp_path), create=False)
    metadata = MetaData()
    table = jobs_table(metadata, db, indexed)
    metadata.drop_all(db.engine)
    metadata.create_all(db.engine)
    db.worker.create(db.engine, checkfirst=True)
    now = utcnow()
    rows = [
        {"JOB": f"{batch}-{n}", "BATCH": batch, "STEP": 0, "CHANGED": now}
        for batch in ("a", "b", "c")
        for n in range(3)
    ]
    db.transaction(lambda conn: conn.execute(table.insert(), rows))
    queue = SqlQueue(db, jobs_spec(table, "REDO"), table)
    assert queue.indexed_claims == indexed
    yield queue
    metadata.drop_all(db.engine)
    db.dispose()


def states(queue: SqlQueue) -> dict[str, tuple[int, str | None, str | None]]:
    t = queue.table
    with queue.db.reading() as conn:
        rows = conn.execute(select(t.c.JOB, t.c.STEP, t.c.WHY, t.c.OWNER)).all()
    return {r[0]: (int(r[1]), r[2], r[3]) for r in rows}


def test_claims_whole_groups_with_a_lease_and_skips_what_others_hold(queue: SqlQueue) -> None:
    first = queue.claim("w1", groups=2, lease_seconds=600)
    assert [c.group for c in first] == ["a"] * 3 + ["b"] * 3  # whole groups, in order
    second = queue.claim("w2", groups=2, lease_seconds=600)
    assert {c.group for c in second} == {"c"}  # a and b are leased to w1
    assert queue.claim("w3", groups=2, lease_seconds=600) == []
    queue.release("w1", [c.id for c in first if c.group == "b"])
    assert {c.group for c in queue.claim("w3", groups=5, lease_seconds=600)} == {"b"}
    assert queue.leases_now() == {"w1": 3, "w2": 3, "w3": 3}


def test_an_expired_lease_is_claimable_and_its_late_write_is_refused(queue: SqlQueue) -> None:
    stale = queue.claim("dead", groups=1, lease_seconds=-5)  # already run out
    assert queue.next_lease_expiry() is None  # nothing live to wait for
    taken = queue.claim("alive", groups=1, lease_seconds=600)
    assert [c.id for c in taken] == [c.id for c in stale]
    assert queue.next_lease_expiry() is not None
    late = queue.complete("dead", [[Outcome(c, 1) for c in stale]])
    assert late == [False]
    assert all(s[0] == 0 for s in states(queue).values())  # nothing written by the dead worker
    assert queue.complete("alive", [[Outcome(c, 1) for c in taken]]) == [True]
    done = states(queue)
    assert {k: v for k, v in done.items() if k.startswith("a")} == {
        f"a-{n}": (1, None, None) for n in range(3)
    }


def test_failures_climb_the_one_ladder_and_the_sixth_gives_up(queue: SqlQueue) -> None:
    seen = []
    for _ in range(7):
        rows = queue.claim("w", groups=1, lease_seconds=600, exclude={"b", "c"})
        if not rows:
            break
        state = rows[0].state
        queue.complete("w", [[Outcome(r, CODES.after_failure(r.state), "boom") for r in rows]])
        seen.append(state)
    assert seen == [0, 30, 31, 32, 33, 34]  # claimable until the sixth failure
    assert {v for k, v in states(queue).items() if k.startswith("a")} == {(39, "boom", None)}
    assert CODES.names[39] == "given up" and CODES.names[32] == "transient failure 3"


def test_a_run_does_not_retry_what_failed_in_it_and_gives_every_lease_back(
    queue: SqlQueue,
) -> None:
    Result = tuple[list[Claimed], int]

    class Jobs(Handler[Result]):
        def outcomes(self, result: Result) -> Sequence[Outcome]:
            unit, state = result
            return [Outcome(row, state, None if state == 1 else "failed") for row in unit]

    tries: list[str] = []

    async def main() -> None:
        run: QueueRun[Result] = QueueRun(queue, Jobs(), "w", RunSettings(lease_seconds=600))

        async def work(unit: list[Claimed]) -> Result:
            tries.append(unit[0].group)
            if unit[0].group == "b":
                run.this_run.add("b")  # failed: its next try is the next run
                return unit, CODES.after_failure(unit[0].state)
            return unit, 1

        await run.open()
        try:
            await WorkLoop(run, work, LoopSettings(concurrency=1, grace_period=1)).run()
        finally:
            await run.close()

    asyncio.run(main())
    # b is on the ladder (30, claimable) yet this run did not take it again
    assert tries == ["a", "b", "c"]
    final = states(queue)
    assert {k[0]: v[0] for k, v in final.items()} == {"a": 1, "b": 30, "c": 1}
    assert all(owner is None for _, _, owner in final.values())  # every lease back
    # the next run does retry it
    asyncio.run(main())
    assert tries == ["a", "b", "c", "b"]
    assert states(queue)["b-0"][0] == 31


Result = tuple[list[Claimed], int]


class Jobs(Handler[Result]):
    def outcomes(self, result: Result) -> Sequence[Outcome]:
        return [Outcome(row, 1) for row in result[0]]


async def finish_the_rest(run: QueueRun[Result]) -> list[str]:
    """Claim what is left, write it, and the run is finished: the groups it took."""
    units = await run.claim(10)
    await run.complete([(unit, 1) for unit in units])
    assert await run.is_finished()
    return sorted(unit[0].group for unit in units)


def one_run(queue: SqlQueue) -> QueueRun[Result]:
    """A worker's run over the jobs, each written as done."""
    return QueueRun(queue, Jobs(), "w", RunSettings(lease_seconds=600))


def test_rows_a_heartbeat_took_back_after_the_last_claim_are_not_taken_for_the_end(
    queue: SqlQueue,
) -> None:
    """A worker whose claims found every row leased by another, then whose heartbeat took
    them back from that worker when it died, ended its run with them undone: nobody held
    them any more, so the run looked finished (a crates collect beside a killed one exited
    0 with 12 rows left). The rows freed after the last claim began are claimed instead."""
    workers = Workers(queue.db)

    async def main() -> list[str]:
        run = one_run(queue)
        await run.open()
        try:
            workers.register("other", False, 60)
            assert queue.claim("other", 10, 600)  # every group, while "other" is alive
            assert await run.claim(10) == []
            # "other" dies (silent for an hour); this run's next heartbeat takes its rows back
            with queue.db.engine.begin() as conn:
                conn.execute(
                    update(queue.db.worker)
                    .where(queue.db.worker.c.WORKER_ID == "other")
                    .values(HEARTBEAT=utcnow() - timedelta(hours=1))
                )
            await asyncio.to_thread(run._beat)
            assert not await run.is_finished()
            return await finish_the_rest(run)
        finally:
            await run.close()

    assert asyncio.run(main()) == ["a", "b", "c"]
    assert {v[0] for v in states(queue).values()} == {1}


def test_a_stopped_run_gives_back_what_its_commits_claimed_ahead_and_the_next_run_ends_it(
    queue: SqlQueue,
) -> None:
    """On SQLite a commit also tops the read-ahead up (in its transaction, holding the write
    lock); a stop ends that, and whatever was claimed ahead goes back at close: no lease is
    left, and every group is done exactly once over the two runs."""
    now, table = utcnow(), queue.table
    more = [
        {"JOB": f"g{g:02d}-{n}", "BATCH": f"g{g:02d}", "STEP": 0, "CHANGED": now}
        for g in range(30)
        for n in range(2)
    ]
    queue.db.transaction(lambda conn: conn.execute(table.insert(), more))
    done: list[str] = []
    Result = list[Claimed]

    class Jobs(Handler[Result]):
        def outcomes(self, result: Result) -> Sequence[Outcome]:
            return [Outcome(row, 1) for row in result]

    given_back: list[int] = []

    async def main(stop_after: int | None) -> None:
        loop_settings = LoopSettings(concurrency=1, commit_batch=1, grace_period=5)
        loop: WorkLoop[list[Claimed], Result]
        run: QueueRun[Result] = QueueRun(
            queue,
            Jobs(),
            "w",
            RunSettings(lease_seconds=600, claim_batch=2),
            stopping=lambda: loop.stop.requested,
        )

        async def work(unit: list[Claimed]) -> Result:
            done.append(unit[0].group)
            if stop_after is not None and len(done) >= stop_after and not loop.stop.requested:
                loop.stop.request()  # once: a second request is the "exit now" one
            await asyncio.sleep(0)
            return unit

        loop = WorkLoop(run, work, loop_settings)
        await run.open()
        try:
            await loop.run()
        finally:
            await run.close()
        given_back.append(run.released_rows)
        assert all(owner is None for _, _, owner in states(queue).values())  # all given back

    asyncio.run(main(stop_after=9))
    first = len(done)
    assert 9 <= first < 33
    if queue.db.is_sqlite:  # what the commits claimed ahead was there at the stop
        assert given_back[0] > 0
    asyncio.run(main(stop_after=None))
    assert sorted(done) == sorted({*"abc", *(f"g{g:02d}" for g in range(30))})  # once each
    assert {v[0] for v in states(queue).values()} == {1}


@pytest.fixture(params=BACKENDS)
def indexed_queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlQueue]:
    db = Database(backend_url(request.param, tmp_path), create=False)
    metadata = MetaData()
    table = jobs_table(metadata, db, indexed=True)
    metadata.drop_all(db.engine)
    metadata.create_all(db.engine)
    yield SqlQueue(db, jobs_spec(table, "REDO"), table)
    metadata.drop_all(db.engine)
    db.dispose()


def add_jobs(queue: SqlQueue, batch: str, step: int, count: int, redo: bool = False) -> None:
    now, table = utcnow(), queue.table
    rows = [
        {"JOB": f"{batch}-{step}-{n:03d}", "BATCH": batch, "STEP": step, "REDO": redo,
         "CHANGED": now}
        for n in range(count)
    ]  # fmt: skip
    queue.db.transaction(lambda conn: conn.execute(table.insert(), rows))


def test_a_claim_through_the_claim_indexes_takes_every_rung_and_requeue_in_group_order(
    indexed_queue: SqlQueue,
) -> None:
    queue = indexed_queue
    add_jobs(queue, "a", 1, 2, redo=True)  # done, asked again
    add_jobs(queue, "b", 1, 2)  # done
    add_jobs(queue, "c", 0, 2)
    add_jobs(queue, "d", 30, 2)  # one group on two rungs
    add_jobs(queue, "d", 0, 1)
    add_jobs(queue, "e", 31, 1, redo=True)  # failing and asked again: read once
    add_jobs(queue, "f", 0, 1)
    first = queue.claim("w1", groups=4, lease_seconds=600)
    assert [c.group for c in first] == ["a", "a", "c", "c", "d", "d", "d", "e"]
    assert {c.state for c in first if c.group == "d"} == {0, 30}
    assert [c.group for c in queue.claim("w2", groups=4, lease_seconds=600)] == ["f"]
    assert queue.claim("w3", groups=4, lease_seconds=600) == []


def test_a_group_longer_than_the_claims_window_comes_whole_from_two_rungs(
    indexed_queue: SqlQueue,
) -> None:
    queue = indexed_queue
    add_jobs(queue, "a", 0, 50)
    add_jobs(queue, "a", 30, 50)  # 100 rows: past one group's window (64) on either rung
    add_jobs(queue, "b", 0, 20)  # fills the first rung's window: the rows are cut there
    rows = queue.claim("w1", groups=1, lease_seconds=600)
    assert len(rows) == 100 and {c.group for c in rows} == {"a"}
    assert [c.group for c in queue.claim("w2", groups=2, lease_seconds=600)] == ["b"] * 20


def test_the_frontier_climbs_the_same_ladder(tmp_path: Path) -> None:
    frontier = Frontier(tmp_path / "f.sqlite", ladder=RetryLadder(max_failures=2))
    frontier.add([Request("http://127.0.0.1:9/x")])
    for _ in range(2):
        frontier.close()
        frontier = Frontier(tmp_path / "f.sqlite", ladder=RetryLadder(max_failures=2))
        (request,) = frontier.claim(5)
        assert frontier.claim(5) == []  # a failed request waits for the next run
        frontier.complete([Completion(request, [], error="boom")])
        assert frontier.claim(5) == []
    assert frontier.ladder() == [("http://127.0.0.1:9/x", 4, 2, "boom")]  # given up
    frontier.close()


def test_the_owners_hold_the_one_latest_version_rule_and_the_yanked_flip(tmp_path: Path) -> None:
    from stagecrawl.crates import tables

    db = Database(f"sqlite:///{tmp_path / 'owners.db'}")
    versions, products = tables.versions(db), tables.products(db)
    rule = products.latest
    assert rule([("1.0.0", False), ("1.1.0-rc.1", False), ("2.0.0", True)]).latest == "1.0.0"
    assert rule([("1.0.0", True), ("1.1.0-rc.1", False)]).latest == "1.1.0-rc.1"
    assert rule([("1.0.0", True), ("0.9.0", True)]).status == "YANKED"
    assert rule([]).latest is None
    now = utcnow()
    base = {"LANGUAGE": "rust", "REPOSITORY": "Cargo", "PRODUCT_KEY": "x", "NAME": "x"}
    rows = [
        {**base, "VERSION": v, "DEPENDENCIES": "[]", "FEATURES": "{}", "YANKED": False,
         "LAST_UPDATED": now}
        for v in ("1.0.0", "2.0.0")
    ]  # fmt: skip
    product = {**base, "COMP_STATUS": "ACTIVE", "VERSION_COUNT": 2, "LAST_UPDATED": now}

    def write(conn: Any) -> int:
        versions.upsert(conn, rows)
        products.upsert(conn, [product])
        flipped = versions.flip_yanked(conn, "x", {"2.0.0": True, "1.0.0": False}, now)
        products.set_versions(conn, "x", [("1.0.0", False), ("2.0.0", True)], now)
        return flipped

    assert db.transaction(write) == 1
    assert versions.existing(["x", "y"]) == {"x": {"1.0.0", "2.0.0"}, "y": set()}
    with db.reading() as conn:
        assert versions.by_product(conn) == {"x": ["1.0.0", "2.0.0"]}
        assert products.keys(conn) == {"x"}
        latest = conn.execute(select(products.table.c.LATEST_VERSION)).scalar_one()
        yanked = dict(conn.execute(select(versions.table.c.VERSION, versions.table.c.YANKED)).all())
    assert latest == "1.0.0" and yanked == {"1.0.0": False, "2.0.0": True}
    db.dispose()


def test_rows_another_claim_is_taking_are_not_taken_for_the_end(queue: SqlQueue) -> None:
    """A claim skips the rows another worker's claim has locked and not committed yet (SKIP
    LOCKED): no lease shows, so the run looked finished, and a worker started beside another
    ended at once with nothing done. Rows claimable now keep it going; it then takes them."""
    if queue.db.is_sqlite:
        pytest.skip("one writer on SQLite: no claim runs beside another")

    async def main() -> list[str]:
        run = one_run(queue)
        await run.open()
        try:
            other = queue.db.engine.connect()  # another worker's claim, in flight
            other.begin()
            other.execute(select(queue.table).with_for_update())
            assert await run.claim(10) == []  # skipped: locked
            assert not await run.is_finished()
            other.rollback()  # that claim took nothing in the end
            other.close()
            return await finish_the_rest(run)
        finally:
            await run.close()

    assert asyncio.run(main()) == ["a", "b", "c"]
