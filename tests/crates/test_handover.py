"""On SQLite a crawl's seeder registers the events it finds new already leased to the collector
alongside (`QueueRun.lease_terms`, `adopt`): the collector takes them without claiming them
back from the LIST, and they are held as claimed rows are: a killed run leaves them to the
next one, a close gives them back, and nothing is handed over once a stop is asked."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from sqlalchemy import event, select

from stagecrawl.kernel.collecting import CollectSettings, CollectSummary, UnitResult
from stagecrawl.kernel.collecting import collect_queue as kernel_queue
from stagecrawl.kernel.registry import Listing
from stagecrawl.kernel.seeding import SeedHandler, SeedReport, SeedResult
from stagecrawl.queue import Claimed, Lease, QueueRun
from stagecrawl.queue.events import NewEvent
from stagecrawl.queue.lists import COLLECTED, PENDING
from stagecrawl.storage.db import Database
from tests.crates.kernel import CRATES, event_list, rust

EVENTS = [
    NewEvent("alpha", "1.0.0", "seed"),
    NewEvent("alpha", "2.0.0", "seed"),
    NewEvent("beta", "1.0.0", "seed"),
]


def crates_queue(
    db: Database,
    worker: str,
    settings: CollectSettings,
    more_coming: Callable[[], bool],
    stopping: Callable[[], bool] | None = None,
) -> QueueRun[UnitResult]:
    summary = CollectSummary(CRATES.decl.words)
    return kernel_queue(db, CRATES, worker, settings, summary, more_coming, stopping)


def collector_queue(
    db: Database, worker: str, stopping: Callable[[], bool] = lambda: False
) -> QueueRun[UnitResult]:
    # a seeder alongside is still at work (more_coming)
    return crates_queue(db, worker, CollectSettings(), lambda: True, stopping=stopping)


def register(db: Database, lease: Lease | None) -> None:
    db.transaction(lambda conn: event_list(db).register_on(conn, EVENTS, lease=lease))


def leases(db: Database) -> list[tuple[str, str, str | None]]:
    table = rust(db).list
    with db.reading() as conn:
        rows = conn.execute(select(table.c.NAME, table.c.VERSION, table.c.CLAIMED_BY)).all()
    return sorted((str(n), str(v), c) for n, v, c in rows)


async def test_new_events_come_leased_and_are_handed_out_without_a_claim(tmp_path: Any) -> None:
    db = Database(f"sqlite:///{tmp_path / 'handover.db'}")
    run = collector_queue(db, "w1")
    await run.open()
    lease = run.lease_terms()
    assert lease is not None
    register(db, lease)
    await asyncio.to_thread(run.adopt, lease, False)
    assert leases(db) == [
        ("alpha", "1.0.0", "w1"),
        ("alpha", "2.0.0", "w1"),
        ("beta", "1.0.0", "w1"),
    ]

    statements: list[str] = []
    event.listen(db.engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    units = await run.claim(10)
    got = [[(e.name, e.version) for e in unit] for unit in units]
    assert got == [[("alpha", "1.0.0"), ("alpha", "2.0.0")], [("beta", "1.0.0")]]
    # nothing was leased by a claim: the seeder's transaction did it
    assert not [s for s in statements if s.lstrip().upper().startswith("UPDATE")]

    # Killed (never closed): the next run takes the leases back when it opens, and claims them.
    again = collector_queue(db, "w2")
    await again.open()
    units = await again.claim(10)
    assert sorted(e.version for unit in units for e in unit) == ["1.0.0", "1.0.0", "2.0.0"]
    assert {c for _n, _v, c in leases(db)} == {"w2"}
    await again.close()
    db.dispose()


async def test_a_close_gives_back_what_is_handed_over_and_a_stop_takes_nothing(
    tmp_path: Any,
) -> None:
    db = Database(f"sqlite:///{tmp_path / 'handover.db'}")
    run = collector_queue(db, "w1")
    await run.open()
    lease = run.lease_terms()
    assert lease is not None
    register(db, lease)
    await run.close()  # before the registration's rows were adopted
    await asyncio.to_thread(run.adopt, lease, False)
    assert run.released_rows == 3
    assert {c for _n, _v, c in leases(db)} == {None}
    assert run.lease_terms() is None  # closed

    stop = [False]
    stopping = collector_queue(db, "w2", stopping=lambda: stop[0])
    await stopping.open()
    assert stopping.lease_terms() is not None
    stop[0] = True
    assert stopping.lease_terms() is None
    await stopping.close()
    db.dispose()


async def test_only_sqlite_hands_over(db_url: str) -> None:
    """Elsewhere other workers share the LIST and the seeder registers in transactions of its
    own: its events are claimed as before."""
    db = Database(db_url)
    run = collector_queue(db, "w1")
    await run.open()
    terms = run.lease_terms()
    await run.close()
    db.dispose()
    assert (terms is not None) == db_url.startswith("sqlite")


async def test_events_registered_unleased_are_claimed_while_the_seeder_goes_on(
    db_url: str,
) -> None:
    """Where nothing is handed over (a row limit, as `crawl --limit`; MariaDB and PostgreSQL,
    where the seeder registers in transactions of its own) the collector, which found the
    LIST empty at its start, must claim the events the seeder registers while it is at work,
    not only once it has finished (a crawl then collected nothing until every name was
    seeded)."""
    db = Database(db_url)
    collect = CollectSettings(limit=10 if db.is_sqlite else None)
    run = crates_queue(db, "w1", collect, lambda: True)
    await run.open()
    assert await run.claim(10) == []  # nothing yet: the seeder has not registered anything
    assert run.lease_terms() is None  # registered unleased

    seeder = SeedHandler(db, CRATES, SeedReport(CRATES.decl.words), False)
    seeder.hand_to = run
    listing = Listing("alpha", {"1": False, "2": False})
    seed = Claimed("alpha", "alpha", PENDING, False, "alpha", "")
    results = [SeedResult(seed, listing, COLLECTED)]
    # as the work loop finishes a seed: prepare, the finishing transaction, its commit
    await asyncio.to_thread(seeder.prepare, results)
    db.transaction(lambda conn: seeder.write(conn, results))
    seeder.committed(results)

    units = await run.claim(10)
    assert sorted(e.version for unit in units for e in unit) == ["1", "2"]
    await run.close()
    db.dispose()


async def test_a_registration_told_during_a_short_claim_is_claimed_next(tmp_path: Any) -> None:
    """The seeder tells the collector of unleased rows from its own thread, whenever its
    commit ends: if that falls while a claim is reading (and the rows committed after the
    read began), the claim comes back short, yet the next claim must look for them, not
    wait for another registration or the seeder's end."""
    db = Database(f"sqlite:///{tmp_path / 'race.db'}")
    run = crates_queue(db, "w1", CollectSettings(limit=10), lambda: True)
    await run.open()
    claim = run.queue.claim

    def claim_while_the_seeder_commits(*args: Any, **kwargs: Any) -> list[Claimed]:
        rows = claim(*args, **kwargs)  # read: nothing there yet
        register(db, None)  # the seeder's commit ends after that read …
        run.adopt(None, True)  # … and it tells the collector, in the middle of the claim
        return rows

    run.queue.claim = claim_while_the_seeder_commits  # type: ignore[method-assign]
    assert await run.claim(10) == []
    run.queue.claim = claim  # type: ignore[method-assign]
    units = await run.claim(10)
    assert sorted((e.name, e.version) for unit in units for e in unit) == [
        ("alpha", "1.0.0"),
        ("alpha", "2.0.0"),
        ("beta", "1.0.0"),
    ]
    await run.close()
    db.dispose()
