"""The generic durable work queue: any declared SQL table, one retry ladder, leases, workers.

Imports no registry package. A registry declares its table (`QueueTable`: which column is the
id, group, state, reason, lease …, and its `LadderCodes`), and runs a `QueueRun` with its
`Handler` on the engine's work loop. See docs/architecture.md.
"""

from stagecrawl.pauses import NotAsked, Waiting
from stagecrawl.queue.ladder import LADDER, LadderCodes, RetryLadder, ThisRun
from stagecrawl.queue.run import Handler, QueueRun, RunSettings, Unit
from stagecrawl.queue.sql import SqlQueue, waiting_on
from stagecrawl.queue.table import Claimed, Lease, Outcome, QueueTable, utcnow
from stagecrawl.queue.workers import WorkerProgress, Workers, worker_id

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
