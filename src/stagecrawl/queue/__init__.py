"""The generic durable work queue: any declared SQL table, one retry ladder, leases, workers.

Imports no registry package. A registry declares its table (`QueueTable`: which column is the
id, group, state, reason, lease …, and its `LadderCodes`), and runs a `QueueRun` with its
`Handler` on the engine's work loop. See docs/architecture.md.

The names below are loaded on first use (PEP 562), so importing a standard-library-only
module of this package (queue/reads.py, lists.py, ladder.py, table.py: what `stagecrawl
status` reads with) loads neither SQLAlchemy nor asyncio.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stagecrawl.pauses import NotAsked, Waiting
    from stagecrawl.queue.ladder import LADDER, LadderCodes, RetryLadder, ThisRun
    from stagecrawl.queue.run import Handler, QueueRun, RunSettings, Unit
    from stagecrawl.queue.sql import SqlQueue, waiting_on
    from stagecrawl.queue.table import Claimed, Lease, Outcome, QueueTable, utcnow
    from stagecrawl.queue.workers import WorkerProgress, Workers, worker_id

# name -> the module that defines it
_WHERE = {
    "NotAsked": "stagecrawl.pauses",
    "Waiting": "stagecrawl.pauses",
    "LADDER": "stagecrawl.queue.ladder",
    "LadderCodes": "stagecrawl.queue.ladder",
    "RetryLadder": "stagecrawl.queue.ladder",
    "ThisRun": "stagecrawl.queue.ladder",
    "Handler": "stagecrawl.queue.run",
    "QueueRun": "stagecrawl.queue.run",
    "RunSettings": "stagecrawl.queue.run",
    "Unit": "stagecrawl.queue.run",
    "SqlQueue": "stagecrawl.queue.sql",
    "waiting_on": "stagecrawl.queue.sql",
    "Claimed": "stagecrawl.queue.table",
    "Lease": "stagecrawl.queue.table",
    "Outcome": "stagecrawl.queue.table",
    "QueueTable": "stagecrawl.queue.table",
    "utcnow": "stagecrawl.queue.table",
    "WorkerProgress": "stagecrawl.queue.workers",
    "Workers": "stagecrawl.queue.workers",
    "worker_id": "stagecrawl.queue.workers",
}

__all__ = [
    "LADDER",
    "Claimed",
    "Handler",
    "LadderCodes",
    "Lease",
    "NotAsked",
    "Outcome",
    "QueueRun",
    "QueueTable",
    "RetryLadder",
    "RunSettings",
    "SqlQueue",
    "ThisRun",
    "Unit",
    "Waiting",
    "WorkerProgress",
    "Workers",
    "utcnow",
    "waiting_on",
    "worker_id",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
