"""The demo's PyPI step: every version of the look-alike's projects (real PyPI replies,
stagecrawl.testing.pypi_origin) crawled through the same pipeline a real run uses, then the
bundled PYSEC advisories (data/osv-pypi, CC-BY-4.0, PyPA Advisory Database) imported and a
small requirements lock audited against them."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from rich.console import Console

from stagecrawl import components
from stagecrawl.engine.progress import ProgressReporter
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.pypi import pipeline, sca
from stagecrawl.pypi.client import PyPIClient
from stagecrawl.pypi.pipeline import CollectSettings, PyPIEndpoints
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
            "pypi_index_url": f"{origin.url}/simple/",
            "pypi_api_url": f"{origin.url}/",
            "pypi_index_rate": 50.0,
            "pypi_api_rate": 20.0,
            "pypi_files_rate": 50.0,
            "contact": "stagecrawl-demo@example.org",
        }
        s = Settings.resolve(flags, {})
        e = PyPIEndpoints(
            s.pypi_index_url, s.pypi_api_url, s.pypi_index_rate, s.pypi_api_rate, s.pypi_files_rate
        )
        fetcher = components.build_fetcher(s, pipeline.pypi_lanes(e))
        client = PyPIClient(fetcher, s.pypi_index_url, s.pypi_api_url)
        names = sorted(p.display_name for p in origin.projects.values())
        async with fetcher:
            with ProgressReporter("pypi crawl", console=console, quiet=quiet) as progress:
                crawled = await pipeline.collect(
                    db,
                    client,
                    CollectSettings(concurrency=8),
                    stop,
                    names,
                    progress=progress,
                    licenses=sca.license_matcher(db),
                )
    folder = Path(str(resources.files("stagecrawl.demo") / "data" / "osv-pypi"))
    imported = sca.import_osv(db, folder, "all", 4 * 1024 * 1024)
    lock = out / "requirements.txt"
    lock.write_text(LOCK)
    audited = sca.audit_pypi(
        db.engine.url.render_as_string(False), sca.audit_inputs([], [lock]), []
    )
    summary = crawled.collect
    assert summary is not None
    return (
        f"{summary.outcomes[1]} versions of {summary.projects} PyPI projects"
        f" ({summary.yanked} yanked, {summary.unknown_dependencies} with unknown dependencies),"
        f" 429s seen: {sum(crawled.rate_limited.values())};"
        f" {imported.advisories} PYSEC advisories; audit of {lock.name}:"
        f" {len(audited.vulnerabilities)} vulnerabilities"
    )
