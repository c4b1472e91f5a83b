"""PyPI's part of `stagecrawl status`: its queue ladders and table totals, asked of their
owners' status reads (queue/reads.py). Its own module so `status` never imports the crawling
side (aiohttp, the fetcher), and standard library only, so on SQLite it loads no SQLAlchemy."""

from __future__ import annotations

from typing import Any

from stagecrawl.pauses import Waiting
from stagecrawl.queue.lists import LIST_CODES, PENDING
from stagecrawl.queue.reads import registry_reads
from stagecrawl.storage.names import PYPI
from stagecrawl.storage.reads import ReadSource


def status(source: ReadSource) -> dict[str, Any] | None:
    """PyPI's queue ladders, what waits for a pause and table totals, asked of their owners
    (read-only); None for a database made before PyPI's tables existed."""
    tables = registry_reads(PYPI)
    events, seeds = tables.events, tables.seeds
    with source.reads() as r:
        present = {name.upper() for name in r.table_names()}
        if PYPI.list.upper() not in present:
            return None
        by_state = events.queue.by_state(r)
        reasons = events.queue.on_ladder(r, 20)
        seed_ladder = seeds.on_ladder(r, 50)
        # not attempted (a host's pause): seeds and events together, as the runs report it
        waiting = Waiting.merge([seeds.waiting(r), events.queue.waiting(r)])
        document = {
            "list": [
                {"processed": p, "meaning": LIST_CODES.names.get(p, "?"), "events": n}
                for p, n in by_state
            ],
            "sources": events.sources(r),
            "ladder": [{"project": n, "processed": p, "reason": e} for n, p, e in reasons],
            "seed_ladder": [{"project": n, "state": p, "reason": e} for n, p, e in seed_ladder],
            "seeds_pending": seeds.count(r, PENDING),
            "versions": tables.versions.count(r),
            "products": tables.products.count(r),
            "waiting": None if waiting is None else waiting.as_json(),
        }
    return document
