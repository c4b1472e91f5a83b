"""Collecting one project: its Simple page says which versions exist (and which are yanked);
each version's dependencies and license come from the core metadata of a file that offers it
(files lane), else from the JSON API's release form (api lane); the project form gives the
display name and summary. The result is the VERSION and PRODUCT rows, ready for their owners.

A version with no metadata file and `requires_dist: null` in the JSON API has *unknown*
dependencies (DEPENDENCIES NULL), never "none" (`[]`): PyPI's per-release metadata comes from
the first upload, often an sdist that never reported them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

from stagecrawl.engine.fanout import all_or_none
from stagecrawl.pypi.client import MetadataMismatch, PyPIClient
from stagecrawl.pypi.jsonapi import ApiRelease
from stagecrawl.pypi.metadata import Declared
from stagecrawl.pypi.simple import SimplePage, SimpleRelease
from stagecrawl.pypi.versions import version_key
from stagecrawl.storage.db import dumps

PROJECT_PAGE = "https://pypi.org/project/"


@dataclass
class VersionFacts:
    """What stagecrawl knows of one version after enrichment."""

    release: SimpleRelease
    metadata: Declared | None = None
    api: ApiRelease | None = None
    problem: str | None = None

    @property
    def source(self) -> str | None:
        """Where its dependencies and license came from (None: neither source answered)."""
        return "metadata" if self.metadata else "json-api" if self.api else None


@dataclass
class CollectedProject:
    name: str  # normalised
    display_name: str
    page: SimplePage
    project_api: ApiRelease | None
    versions: list[VersionFacts] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        found = list(self.page.problems)
        return found + [f"{v.release.version}: {v.problem}" for v in self.versions if v.problem]


async def collect_project(
    client: PyPIClient, name: str, wanted: set[str] | None = None
) -> CollectedProject:
    """Fetch and enrich one project. `wanted` limits enrichment to those versions (every
    version is still listed; compared by PEP 440 equality: a pin `3.13.0` is the release PyPI
    lists as `3.13`). Raises NotFound for an unknown project and SimpleFormatError for an
    unreadable Simple page.

    Every lane starts as soon as what it needs is known: the Simple page names each core
    metadata file, so the files lane starts with the JSON API's project form beside it, not
    behind it (a crawl on one strict host otherwise left the files lane, the largest, idle
    for each project's API round trip); only the versions without metadata wait for the
    project form, whose display name their release form is asked by (the normalised name
    would cost a 301 each)."""
    page = await client.simple(name)
    assert page is not None  # no validators were sent, so no 304
    wanted_keys = None if wanted is None else {version_key(v) for v in wanted}
    chosen = [
        r for r in page.releases if wanted_keys is None or version_key(r.version) in wanted_keys
    ]
    project_api, *facts = await all_or_none(
        [partial(client.project, page.name)] + [partial(_metadata_facts, client, r) for r in chosen]
    )
    assert project_api is None or isinstance(project_api, ApiRelease)
    display = project_api.display_name if project_api else page.name
    versions = [f for f in facts if isinstance(f, VersionFacts)]
    await all_or_none([partial(_api_facts, client, display, f) for f in versions if not f.source])
    return CollectedProject(page.name, display, page, project_api, versions)


async def _metadata_facts(client: PyPIClient, release: SimpleRelease) -> VersionFacts:
    facts = VersionFacts(release)
    offered = release.metadata_file()
    if offered is not None:
        try:
            facts.metadata = await client.metadata(offered)
        except MetadataMismatch as exc:
            facts.problem = str(exc)
    return facts


async def _api_facts(client: PyPIClient, display: str, facts: VersionFacts) -> None:
    facts.api = await client.release(display, facts.release.version)  # None: not there


def product_columns(project: CollectedProject) -> dict[str, Any]:
    """A project's own PRODUCT columns (`Registry.product_row` makes the row)."""
    api, invalid = project.project_api, project.page.invalid_versions
    scm = {"home_page": api.home_page, "project_urls": api.project_urls} if api else None
    return {
        "DESCRIPTION": api.summary if api else None,
        "URL": f"{PROJECT_PAGE}{project.name}/",
        "SCM": dumps(scm),
        "CATEGORIES": dumps(list(api.classifiers)) if api else None,
        "PROJECT_STATUS": project.page.status,
        "LAST_SERIAL": project.page.last_serial,
        "ETAG": project.page.validators.etag,
        "INVALID_VERSIONS": dumps(list(invalid)) if invalid else None,
    }
