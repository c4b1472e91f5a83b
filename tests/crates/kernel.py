"""The crates registry's parts as tests reach them: its tables, LIST and seed queue through
the registry (one way to each), and a client on a fetcher built from a run's settings."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

from stagecrawl.crates.client import CratesClient
from stagecrawl.crates.lock import lock_graph as crates_lock_graph
from stagecrawl.crates.plugin import REGISTRY as CRATES
from stagecrawl.crates.rows import VERSION_COLUMNS
from stagecrawl.crates.tables import IndexStateTable
from stagecrawl.engine.clock import Clock
from stagecrawl.kernel.phases import registry_fetcher
from stagecrawl.kernel.sca import audit_packages, store_records
from stagecrawl.kernel.sca import check_database as kernel_check_database
from stagecrawl.kernel.sca import policy_from_config as kernel_policy
from stagecrawl.queue import Claimed, Outcome
from stagecrawl.queue.events import EventList, NewEvent, RegisterCounts
from stagecrawl.queue.sql import SqlQueue
from stagecrawl.sca.audit import AuditReport, DependencyGraph, Package
from stagecrawl.sca.config import GateConfig
from stagecrawl.sca.matcher import BackfillReport, LicenseMatcher
from stagecrawl.sca.matcher import backfill as sca_backfill
from stagecrawl.sca.osv_import import ImportReport
from stagecrawl.sca.osv_model import Affected, affected_packages
from stagecrawl.sca.osv_model import vuln_id as osv_vuln_id
from stagecrawl.sca.policy import LicenseCheck, Policy
from stagecrawl.settings import Settings
from stagecrawl.storage.db import Database
from stagecrawl.storage.schema import RegistryTables

__all__ = ["CRATES", "NewEvent"]


def rust(db: Database) -> RegistryTables:
    """TB_COMP_LIB_RUST_LIST, _VERSION_RUST, _PRODUCT_RUST, TB_STAGECRAWL_SEED, VULN_CARGO_*."""
    return CRATES.tables(db)


def event_list(db: Database) -> EventList:
    return CRATES.event_list(db)


def seed_queue(db: Database) -> SqlQueue:
    return CRATES.seed_queue(db)


def register(db: Database, events: Iterable[NewEvent], resync: bool = False) -> RegisterCounts:
    return event_list(db).register(events, resync)


def claim(
    db: Database,
    worker: str,
    crates: int,
    lease_seconds: float,
    exclude: Collection[str] | None = None,
    max_events: int | None = None,
    after: str | None = None,
) -> list[Claimed]:
    return event_list(db).queue.claim(worker, crates, lease_seconds, exclude, max_events, after)


def release(db: Database, worker: str, ids: Sequence[Hashable]) -> None:
    event_list(db).queue.release(worker, ids)


def outcome(
    event: Claimed, processed: int, yanked: bool | None = None, error: str | None = None
) -> Outcome:
    values = () if yanked is None else (("YANKED", yanked),)
    return Outcome(event, processed, error, values)


@contextlib.asynccontextmanager
async def crates_client(s: Settings, clock: Clock | None = None) -> AsyncIterator[CratesClient]:
    """The registry's client on the run's fetcher (its lanes and limiter from `s`)."""
    async with registry_fetcher(CRATES, s, clock) as fetcher:
        yield CRATES.client(fetcher, s)


@dataclass
class CrateWrite:
    """What one claimed crate produced, as a test builds it by hand."""

    event_ids: Sequence[Hashable]
    outcomes: list[Outcome]
    versions: list[tuple[Any, ...]] = field(default_factory=list)  # rows.VERSION_COLUMNS
    product: dict[str, Any] | None = None
    index_state: dict[str, Any] | None = None


def write_crates(db: Database, worker: str, batch: Sequence[CrateWrite]) -> list[bool]:
    """One transaction for the batch through the registry's writer, each crate
    lease-checked (as the collector's group commit does); False where the lease is lost."""

    def write(conn: Connection, kept: list[int]) -> None:
        crates = [batch[n] for n in kept]
        rows = [c.versions for c in crates]
        if any(rows):
            CRATES.versions(db).bulk(VERSION_COLUMNS).execute(conn, [r for v in rows for r in v])
        products = [c.product for c in crates if c.product is not None]
        if products:
            CRATES.products(db).upsert(conn, products)
        states = [c.index_state for c in crates if c.index_state is not None]
        if states:
            IndexStateTable(db).upsert(conn, states)

    return event_list(db).queue.complete(
        worker, [c.outcomes for c in batch], write, [c.event_ids for c in batch]
    )


def existing_versions(db: Database, product_keys: Sequence[str]) -> dict[str, set[str]]:
    return CRATES.versions(db).existing(product_keys)


def import_advisories(
    db: Database, records: Iterable[dict[str, Any]], scope: str, report: ImportReport
) -> None:
    """OSV records into the crates VULN tables, as `crates vulns` stores them."""
    store_records(db, CRATES, records, scope, report)


def audit(
    db: Database, packages: Iterable[Package], deny: frozenset[str] = frozenset()
) -> AuditReport:
    """Crate versions against the stored advisories, as `crates audit` evaluates them."""
    return audit_packages(db, CRATES, packages, deny)


def lock_graph(path: Path) -> DependencyGraph:
    return crates_lock_graph(
        path.read_text(encoding="utf-8"), str(path), path.resolve().parent.name
    )


def affected_crates(advisory: dict[str, Any], problems: list[str] | None = None) -> list[Affected]:
    """The crates.io packages of an advisory, several `affected` entries of one crate merged."""
    return affected_packages(advisory, CRATES.ecosystem, problems)


def vuln_id(advisory: dict[str, Any]) -> str:
    """The VULN_ID of an advisory: its CVE alias, else its RUSTSEC id, else its OSV id."""
    return osv_vuln_id(advisory, CRATES.ecosystem.primary_prefix)


def backfill(db: Database, recompute_all: bool = False) -> BackfillReport:
    """The crates VERSION table's license columns from the stored LICENSE, no network."""
    matcher = LicenseMatcher.load(db, CRATES.license_reader)
    return sca_backfill(CRATES.versions(db), matcher, recompute_all)


def check_database(db: Database, policy: Policy) -> LicenseCheck:
    return kernel_check_database(db, CRATES, policy)


def policy_from_config(
    config: GateConfig, allow: list[str], deny: list[str], exceptions: list[str]
) -> Policy:
    return kernel_policy(CRATES, config, allow, deny, exceptions)
