"""The demo's PyPI step: the made-up projects below, served by the PyPI look-alike
(stagecrawl.testing.pypi_origin), crawled through the same pipeline a real run uses; then the
demo's made-up advisories (demo/advisories.py) imported and a small requirements lock audited
against them.

Every project here is made up (names `demo-…`), written to show what real PyPI data holds: a
display name that is not the normalised one (`Demo.Yaml`), pre-, post- and dev releases, yanked
releases with their reasons, dependencies with extras and markers, licenses as an SPDX
expression, as free text or only as classifiers, and releases whose dependencies PyPI cannot
tell (no core metadata, `requires_dist` null).
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from stagecrawl.demo.advisories import PYPI_ADVISORIES, write_folder
from stagecrawl.engine.progress import ProgressReporter
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.kernel.collecting import CollectSettings
from stagecrawl.kernel.phases import ai_client, collect, started
from stagecrawl.kernel.sca import AuditRequest, Inputs, import_records, run_audit
from stagecrawl.pypi.plugin import REGISTRY as PYPI
from stagecrawl.settings import Settings
from stagecrawl.storage.db import Database
from stagecrawl.testing.pypi_origin import Project, PyPIOrigin, Release, build_project

LOCK = (
    "demo-http==1.0.0\nDemo.Yaml==3.13.0\ndemo-certs==2021.5.30\ndemo-cli==1.0\ndemo-six==1.16.0\n"
)
APACHE = "License :: OSI Approved :: Apache Software License"
MIT = "License :: OSI Approved :: MIT License"
BSD = "License :: OSI Approved :: BSD License"
MPL = "License :: OSI Approved :: Mozilla Public License 2.0 (MPL 2.0)"
HTTP_NEEDS = [
    "demo-certs>=2020.1",
    "demo-idna<4,>=2.5",
    "demo-charset<4,>=3.0.2",
    'demo-socks!=1.5.7,>=1.5.6; extra == "socks"',
]


def projects() -> list[Project]:
    """The demo's PyPI projects (made up), built in code."""

    def http(
        version: str,
        yanked: bool | str = False,
        requires_python: str = ">=3.8",
        license_expression: str | None = None,
    ) -> Release:
        return Release(
            version,
            requires=HTTP_NEEDS,
            license="Apache 2.0",
            license_expression=license_expression,
            classifiers=[APACHE],
            requires_python=requires_python,
            yanked=yanked,
        )

    def unknown(version: str) -> Release:
        """A release of an old sdist: no core metadata, no dependencies in the JSON API."""
        return Release(version, license=None, metadata=False)

    return [
        build_project(
            "demo-http",
            [
                http("1.0.0"),
                http("1.1.0"),
                http("1.2.0", yanked="made up: the wheel imports a module it does not ship"),
                http("1.3.0"),
                http("2.0.0rc1", requires_python=">=3.9"),
                http("2.0.0", requires_python=">=3.9", license_expression="Apache-2.0"),
            ],
            summary="HTTP for people (a made-up demo project)",
        ),
        build_project(
            "Demo.Yaml",
            [
                unknown("3.11"),
                unknown("3.12"),
                unknown("3.13"),
                Release("5.1", license="MIT", classifiers=[MIT]),
                Release("5.3.1", license="MIT", classifiers=[MIT]),
                Release("6.0", license="MIT", classifiers=[MIT], requires_python=">=3.9"),
            ],
            summary="YAML reader and writer (a made-up demo project)",
        ),
        build_project(
            "demo-certs",
            [
                Release(v, license="MPL-2.0", classifiers=[MPL])
                for v in ("2020.1", "2021.5.30", "2023.7.22", "2024.2.2")
            ],
            summary="Root certificates (a made-up demo project)",
        ),
        build_project(
            "demo_idna",
            [Release(v, license="BSD License", classifiers=[BSD]) for v in ("2.5", "2.8", "3.7")],
            summary="Internationalised domain names (a made-up demo project)",
        ),
        build_project(
            "demo-charset",
            [
                Release("3.0.2", license="LGPL"),
                Release("3.0.4", license="LGPL"),
                Release("3.3.2", license="MIT", classifiers=[MIT]),
            ],
            summary="Character set detection (a made-up demo project)",
        ),
        build_project(
            "demo-socks",
            [Release("1.5.6", license="BSD"), Release("1.7.1", license="BSD", classifiers=[BSD])],
        ),
        build_project(
            "demo-cli",
            [
                Release(v, license_expression="MIT OR Apache-2.0", license=None)
                for v in ("0.1.0", "0.2.0.dev1", "0.2.0", "1.0", "1.0.post1", "2.0a1")
            ],
            summary="Command lines from functions (a made-up demo project)",
        ),
        build_project(
            "demo-six",
            [
                Release("1.10.0", metadata=False, json_api=True),  # requires_dist null
                Release("1.11.0", metadata=False, json_api=True),
                Release("1.16.0", classifiers=[MIT]),
            ],
        ),
        build_project(
            "demo-formatter",
            [
                Release("19.10b0", requires=["demo-cli>=0.2"], requires_python=">=3.6"),
                Release("21.11b0", requires=["demo-cli>=1.0"], yanked="made up: wrong wheel tags"),
                Release("22.1.0", requires=["demo-cli>=1.0", "demo-six"]),
            ],
        ),
        build_project(
            "demo-testkit",
            [
                Release(
                    v, requires=["demo-six>=1.10.0", "demo-plugin<2.0,>=0.5"], license="MIT license"
                )
                for v in ("3.5.0", "3.5.1", "4.0.0", "7.4.0")
            ],
        ),
        build_project(
            "demo-plugin",
            [Release(v, license="MIT") for v in ("0.5.0", "0.6.0", "0.13.1", "1.0.0")],
        ),
        build_project("demo-oldlib", [unknown("0.9"), unknown("1.0"), unknown("1.1")]),
    ]


async def run_pypi(
    db: Database, out: Path, console: Console, quiet: bool, stop: GracefulStop
) -> str:
    """Crawl, import, audit; returns the step's one-line summary."""
    origin = PyPIOrigin(projects=projects())
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
    folder = write_folder(out / "advisories" / "PyPI", PYPI_ADVISORIES)
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
        f" {imported.advisories} made-up advisories; audit of {lock.name}:"
        f" {len(audited.vulnerabilities)} vulnerabilities"
    )
