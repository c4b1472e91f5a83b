"""The demo's PyPI step: every version of the look-alike's projects (real PyPI replies,
stagecrawl.testing.pypi_origin) crawled through the same pipeline a real run uses, then the
bundled PYSEC advisories (data/osv-pypi, CC-BY-4.0, PyPA Advisory Database) imported and a
small requirements lock audited against them."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from rich.console import Console

from stagecrawl.engine.progress import ProgressReporter
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.kernel.collecting import CollectSettings
from stagecrawl.kernel.phases import ai_client, collect, started
from stagecrawl.kernel.sca import AuditRequest, Inputs, import_records, run_audit
from stagecrawl.pypi.plugin import REGISTRY as PYPI
from stagecrawl.settings import Settings
from stagecrawl.storage.db import Database
from stagecrawl.testing.pypi_origin import PyPIOrigin

LOCK = "requests==2.18.0\npy==1.5.3\nPyYAML==3.13\nblack==19.10b0\nsix==1.11.0\n"


async def run_pypi(
    db: Database, out: Path, console: Console, quiet: bool, stop: GracefulStop
) -> str:
    """Crawl, import, audit; returns the step's one-line summary."""
    origin = PyPIOrigin().load_fixtures()
    with origin:
        flags = {
            "pypi.index_url": f"{origin.url}/simple/",
            "pypi.api_url": f"{origin.url}/",
            "pypi.index_rate": 50.0,
            "pypi.api_rate": 20.0,
            "pypi.files_rate": 50.0,
            "contact": "stagecrawl-demo@example.org",
            "db": db.url,
        }
        s = Settings.resolve(flags, {})
        names = sorted(p.display_name for p in origin.projects.values())
        async with started(PYPI, s) as (fetcher, client):
            with ProgressReporter("pypi crawl", console=console, quiet=quiet) as progress:
                crawled = await collect(
                    db,
                    PYPI,
                    client,
                    CollectSettings.from_settings(s),
                    stop,
                    names,
                    progress=progress,
                    ai=ai_client(s, fetcher),
                )
    folder = Path(str(resources.files("stagecrawl.demo") / "data" / "osv-pypi"))
    imported = import_records(db, PYPI, folder, "all", 4 * 1024 * 1024)
    lock = out / "requirements.txt"
    lock.write_text(LOCK)
    audited = await run_audit(PYPI, s, AuditRequest(Inputs(lockfiles=(lock,))), stop)
    summary = crawled.collect
    assert summary is not None
    return (
        f"{summary.outcomes[1]} versions of {summary.units} PyPI projects"
        f" ({summary.yanked} yanked, {summary.counts['unknown_dependencies']} with unknown"
        " dependencies),"
        f" 429s seen: {sum(crawled.rate_limited.values())};"
        f" {imported.advisories} PYSEC advisories; audit of {lock.name}:"
        f" {len(audited.vulnerabilities)} vulnerabilities"
    )
