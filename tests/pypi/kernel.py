"""PyPI's parts as tests reach them: its tables through the registry, and a client on a
fetcher built from a run's settings against a look-alike."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.kernel import lock as lock_mode
from stagecrawl.kernel.collecting import CollectSettings
from stagecrawl.kernel.phases import CollectReport, registry_fetcher
from stagecrawl.kernel.phases import collect as kernel_collect
from stagecrawl.kernel.refresh import RefreshReport
from stagecrawl.kernel.refresh import refresh as kernel_refresh
from stagecrawl.kernel.sca import AuditRequest, Inputs, import_records, run_audit
from stagecrawl.pypi.client import PyPIClient
from stagecrawl.pypi.plugin import REGISTRY as PYPI
from stagecrawl.sca.audit import AuditReport
from stagecrawl.sca.osv_import import ImportReport
from stagecrawl.settings import Settings
from stagecrawl.storage.db import Database
from stagecrawl.storage.schema import RegistryTables
from stagecrawl.testing.pypi_origin import PyPIOrigin

__all__ = ["PYPI"]
FAST = 200.0


def tables(db: Database) -> RegistryTables:
    return PYPI.tables(db)


def settings(origin: PyPIOrigin, rate: float = FAST, **flags: Any) -> Settings:
    """A run's settings against the look-alike (fast lanes, one quick retry)."""
    return Settings.resolve(
        {
            "pypi.index_url": f"{origin.url}/simple/",
            "pypi.api_url": f"{origin.url}/",
            "pypi.index_rate": rate,
            "pypi.api_rate": rate,
            "pypi.files_rate": rate,
            "contact": "tests@example.org",
            **flags,
        },
        {"STAGECRAWL_RETRIES": "1"},
    )


@contextlib.asynccontextmanager
async def client(origin: PyPIOrigin, rate: float = FAST) -> AsyncIterator[PyPIClient]:
    s = settings(origin, rate)
    async with registry_fetcher(PYPI, s) as fetcher:
        yield PYPI.client(fetcher, s)


async def collect(
    db: Database,
    c: PyPIClient,
    names: Sequence[str] = (),
    collect_settings: CollectSettings | None = None,
) -> CollectReport:
    """A crawl (names given) or a collect, as `pypi crawl` / `pypi collect` run it."""
    chosen = collect_settings or CollectSettings()
    return await kernel_collect(db, PYPI, c, chosen, GracefulStop("t"), names)


async def refresh(db: Database, c: PyPIClient, names: Sequence[str] = ()) -> RefreshReport:
    return await kernel_refresh(db, PYPI, c, names, GracefulStop("t"))


async def register_lockfile(db: Database, path: Path) -> lock_mode.InputReport:
    """One lock file's pins registered, as `pypi lock --lockfile` does."""
    lock = lock_mode.read_lockfile(PYPI, path)
    report = lock_mode.InputReport(path.name)
    await lock_mode.register_lock(db, PYPI, None, path.name, lock, report, False, None)
    return report


def audit(
    db_url: str,
    targets: Sequence[str] = (),
    lockfiles: Sequence[Path] = (),
    deny: Sequence[str] = (),
    strict: bool = False,
) -> AuditReport:
    """`pypi audit` as the command runs it (read-only; the gate from the flags alone)."""
    s = Settings.resolve({"db": db_url}, {})
    inputs = Inputs(tuple(targets), tuple(lockfiles))
    request = AuditRequest(inputs, tuple(deny), strict=strict)
    return asyncio.run(run_audit(PYPI, s, request, None))


def import_osv(db: Database, source: Path | bytes, scope: str, max_entry: int) -> ImportReport:
    """An OSV PyPI dump into the PYPI VULN tables, as `pypi vulns` imports it."""
    return import_records(db, PYPI, source, scope, max_entry)
