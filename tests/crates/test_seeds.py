"""Queuing seeds (`add_seeds`, the first step of `crates seed` and `crates crawl`): a long
seed list is written in bounded pieces, and nothing of it stays in memory after."""

from __future__ import annotations

import gc
from typing import Any

from sqlalchemy import event, func, select, update

from stagecrawl.kernel.registry import Listing
from stagecrawl.kernel.seeding import EVENTS_PER_WRITE, SEEDED, SeedHandler, SeedReport, SeedResult
from stagecrawl.kernel.seeding import add_seeds as kernel_add_seeds
from stagecrawl.queue import Claimed
from stagecrawl.queue.events import PENDING
from stagecrawl.queue.seeds import SEED_CHUNK
from stagecrawl.storage.db import Database
from tests.crates.kernel import CRATES, rust


def add_seeds(db: Database, names: list[str]) -> int:
    return kernel_add_seeds(db, CRATES, names)


def _names(count: int) -> list[str]:
    # As given, unlike their keys ("Seed_Name_00001" -> "seed-name-00001"): a key found in
    # memory after seeding was made by the seeding, not kept by the test.
    return [f"Seed_Name_{i:05d}" for i in range(count)]


def test_a_long_seed_list_is_queued_whole_in_bounded_statements(db_url: str) -> None:
    db = Database(db_url)
    names = _names(2 * SEED_CHUNK + 201)
    known = names[SEED_CHUNK - 100 : SEED_CHUNK + 100]  # across a chunk's edge
    add_seeds(db, known)
    with db.engine.begin() as conn:  # seeded before: asked again by the next add_seeds
        conn.execute(update(rust(db).seed).values(STATE=1))
    sizes: list[int] = []

    def count(_conn: Any, _cursor: Any, _sql: str, params: Any, _ctx: Any, many: bool) -> None:
        if many:
            sizes.append(len(params))
        else:
            sizes.append(len(params) if isinstance(params, list | tuple | dict) else 0)

    event.listen(db.engine, "before_cursor_execute", count)
    try:
        assert add_seeds(db, names + names[:10]) == len(names)  # repeated names count once
    finally:
        event.remove(db.engine, "before_cursor_execute", count)
    # every read and write of the seeding holds one chunk's names at most, not the list's
    assert sizes and max(sizes) <= SEED_CHUNK
    with db.engine.connect() as conn:
        rows = conn.execute(
            select(rust(db).seed.c.CRATE_NAME, rust(db).seed.c.NAME, rust(db).seed.c.STATE)
        ).all()
    assert sorted(rows) == sorted((name.lower().replace("_", "-"), name, PENDING) for name in names)


def test_seeding_keeps_no_name_after_it(tmp_path: Any) -> None:
    """The IN read of the known names was cached by SQLAlchemy with its values: the first
    add_seeds of a run kept every key it queued for as long as the process lived."""
    db = Database(f"sqlite:///{tmp_path / 'seeds.db'}")
    names = _names(3 * SEED_CHUNK)
    add_seeds(db, names)
    gc.collect()
    keys = {name.lower().replace("_", "-") for name in names[-3:]}
    kept = [
        type(o).__name__
        for o in gc.get_objects()
        if isinstance(o, list | tuple) and o is not names and any(k in o for k in keys)
    ]
    assert kept == []


def test_a_seeding_batch_writes_its_events_a_slice_at_a_time(tmp_path: Any) -> None:
    """A seeder's commit (up to 256 crates) built every event's row at once; each statement
    now holds EVENTS_PER_WRITE events at most, or one crate that lists more, and the batch
    is still one transaction that registers every event."""
    db = Database(f"sqlite:///{tmp_path / 'slices.db'}")
    sizes = [30] * 80 + [EVENTS_PER_WRITE + 76] + [30] * 20
    results = []
    for n, versions in enumerate(sizes):
        name = f"slice-{n:03d}"
        listing = Listing(name, {f"0.{v}.0": False for v in range(versions)})
        results.append(SeedResult(Claimed(name, name, PENDING, False, name, ""), listing, SEEDED))
    handler = SeedHandler(db, CRATES, SeedReport(CRATES.decl.words), False)
    inserts: list[int] = []

    def count(_conn: Any, _cursor: Any, sql: str, params: Any, _ctx: Any, many: bool) -> None:
        if many and sql.startswith("INSERT") and rust(db).list.name in sql.split("(")[0]:
            inserts.append(len(params))

    event.listen(db.engine, "before_cursor_execute", count)
    try:
        db.transaction(lambda conn: handler.write(conn, results))
    finally:
        event.remove(db.engine, "before_cursor_execute", count)
    handler.finished(results, [True] * len(results))
    assert handler.report.counts.new == sum(sizes)
    with db.engine.connect() as conn:
        stored = conn.execute(select(func.count()).select_from(rust(db).list)).scalar_one()
    assert stored == sum(sizes)
    assert sum(inserts) == sum(sizes) and len(inserts) > 1
    assert max(inserts) == EVENTS_PER_WRITE + 76  # the large crate, whole
    assert sorted(inserts)[-2] <= EVENTS_PER_WRITE
