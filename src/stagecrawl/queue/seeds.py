"""Names onto a registry's seed table (its key column — CRATE_NAME, PROJECT_NAME … —, NAME
as given, STATE, RESYNC, LAST_ERROR, NOT_BEFORE, LAST_UPDATED): new ones inserted pending,
known ones made pending again.

Written `SEED_CHUNK` names at a time, all in the one transaction: the rows built for the
executes (a dict per name) and the `IN` read of the known ones are bounded by the chunk, not
by the seed list. Built whole, a `crates crawl` of 10,000 names held ~7 MB of them at once at
the start, and the read's statement, kept in SQLAlchemy's compiled cache with its values, held
every key of the first call for the rest of the run (~0.6 MB at 10,000).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from sqlalchemy import Connection, Table, bindparam, case, literal, or_, select, update
from sqlalchemy.exc import IntegrityError

from stagecrawl.queue.events import PENDING
from stagecrawl.queue.table import utcnow
from stagecrawl.storage.db import Database

# Names per read and write inside the seeding transaction.
SEED_CHUNK = 500


def queue_seeds(
    db: Database,
    table: Table,
    unique: Mapping[str, str],
    resync: bool,
    group: str = "CRATE_NAME",
    case_sensitive: bool = False,
) -> None:
    """`unique`: key -> the name as given, in input order; `group` the table's key column.
    One transaction; redone once when another process queued one of them between the read
    and the insert."""
    if not unique:
        return
    keys = list(unique)
    now = utcnow()

    def work(conn: Connection) -> None:
        for start in range(0, len(keys), SEED_CHUNK):
            chunk = keys[start : start + SEED_CHUNK]
            _queue_chunk(conn, table, chunk, unique, resync, now, group, case_sensitive)

    try:
        db.transaction(work)
    except IntegrityError:  # another process queued one of them between read and insert
        db.transaction(work)


def _queue_chunk(
    conn: Connection,
    table: Table,
    keys: Sequence[str],
    unique: Mapping[str, str],
    resync: bool,
    now: datetime,
    group: str,
    case_sensitive: bool,
) -> None:
    # The keys are bound at execution (an expanding parameter), not in the statement: the
    # statement SQLAlchemy caches holds none of them.
    key = table.c[group]
    known_query = select(key).where(key.in_(bindparam("seed_keys", expanding=True)))
    found = (str(r[0]) for r in conn.execute(known_query, {"seed_keys": list(keys)}))
    known = set(found) if case_sensitive else {k.lower() for k in found}
    fresh = [
        {
            group: k,
            "NAME": unique[k],
            "STATE": PENDING,
            "RESYNC": resync,
            "LAST_UPDATED": now,
        }
        for k in keys
        if k not in known
    ]
    if fresh:
        conn.execute(table.insert(), fresh)
    again = [{"b_key": k, "NAME": unique[k], "RESYNC": resync} for k in sorted(known)]
    if again:
        conn.execute(
            update(table)
            .where(key == bindparam("b_key"))
            .values(
                NAME=bindparam("NAME"),
                STATE=PENDING,
                RESYNC=or_(table.c.RESYNC, bindparam("RESYNC")),
                # a seed that waits for a host's pause keeps its reason (and its time)
                LAST_ERROR=case(
                    (table.c.NOT_BEFORE > literal(now), table.c.LAST_ERROR), else_=None
                ),
                LAST_UPDATED=now,
            ),
            again,
        )
