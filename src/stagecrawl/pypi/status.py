"""PyPI's part of `stagecrawl status`: its queue ladders and table totals, asked of their
owners. Its own module so `status` never imports the crawling side (aiohttp, the fetcher)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import inspect

from stagecrawl.pypi import tables
from stagecrawl.queue import Waiting
from stagecrawl.queue.events import LIST_CODES, PENDING
from stagecrawl.storage.db import Database


def status(db: Database) -> dict[str, Any] | None:
    """PyPI's queue ladders, what waits for a pause and table totals, asked of their owners
    (read-only); None for a database made before PyPI's tables existed."""
    events, seeds = tables.event_list(db), tables.seed_queue(db)
    with db.reading() as conn:
        present = {name.upper() for name in inspect(conn).get_table_names()}
        if events.table.name.upper() not in present:
            return None
        by_state = events.queue.by_state(conn)
        reasons = events.queue.on_ladder(conn, 20)
        seed_ladder = seeds.on_ladder(conn, 50)
        # not attempted (a host's pause): seeds and events together, as the runs report it
        waiting = Waiting.merge([seeds.waiting(conn), events.queue.waiting(conn)])
        document = {
            "list": [
                {"processed": p, "meaning": LIST_CODES.names.get(p, "?"), "events": n}
                for p, n in by_state
            ],
            "sources": events.sources(conn),
            "ladder": [{"project": n, "processed": p, "reason": e} for n, p, e in reasons],
            "seed_ladder": [{"project": n, "state": p, "reason": e} for n, p, e in seed_ladder],
            "seeds_pending": seeds.count(conn, PENDING),
            "versions": tables.versions(db).count(conn),
            "products": tables.products(db).count(conn),
            "waiting": None if waiting is None else waiting.as_json(),
        }
    return document
