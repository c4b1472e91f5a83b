"""PyPI on the registry kernel, which seeds, collects, refreshes, locks and audits: PyPI's lanes,
identity rules (PEP 503 names, PEP 440 versions), one project's work (collect.py) and readers."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from stagecrawl.engine.fetcher import Fetcher, Validators
from stagecrawl.engine.ratelimit import Lane, Lanes, Rate
from stagecrawl.errors import FetchError, InputError
from stagecrawl.kernel.failures import explain_failure
from stagecrawl.kernel.registry import (
    CollectContext,
    Collected,
    Listing,
    LockInput,
    RefreshPlan,
    RefreshTarget,
    Registry,
    declared_ecosystem,
)
from stagecrawl.pypi import tables
from stagecrawl.pypi.client import API, FILES, FILES_HOST, INDEX, PyPIClient
from stagecrawl.pypi.collect import (
    PROJECT_PAGE,
    CollectedProject,
    VersionFacts,
    collect_project,
    product_columns,
)
from stagecrawl.pypi.declaration import DECLARATION, PypiSettings
from stagecrawl.pypi.deps import dependencies
from stagecrawl.pypi.licenses import declared_license
from stagecrawl.pypi.locks import parse_lock
from stagecrawl.pypi.metadata import NOTHING_DECLARED
from stagecrawl.pypi.names import name_problem, normalize
from stagecrawl.pypi.simple import SimplePage
from stagecrawl.pypi.versions import is_valid, normalised, version_key
from stagecrawl.sca.matcher import LicenseMatcher
from stagecrawl.settings import Settings
from stagecrawl.storage.db import Database, dumps

_PIN = re.compile(r"^\s*(?P<name>[^=\s]+)\s*==\s*(?P<version>\S+)\s*$")
# PyPI as the SCA core knows it: the OSV ecosystem `PyPI` ordered by PEP 440, purl type `pypi`
# (names PEP 503-normalised, as the purl spec asks) and PYSEC as its advisory database.
PYPI = declared_ecosystem(
    DECLARATION,
    tables.PEP440,
    purl_type="pypi",
    parse_version=Version,  # InvalidVersion is a ValueError: such a version matches no range
    version_kind="PEP 440 version",
    product_key=normalize,
    primary_prefix="PYSEC-",
    database_name="PyPA Advisory Database",
    registry_key="pypi",
    lockfile_name="lock file",
    normalise_version=normalised,  # equality: packaging's Version (the default key)
)


def pep440_matcher(requirement: str) -> Any:
    """A license exception's version requirement (`>=2,<3`, `=1.0`) as PEP 440 reads it."""
    text = requirement.strip()
    if text.startswith("=") and not text.startswith("=="):
        text = "=" + text
    try:
        specifier = SpecifierSet(text)
    except InvalidSpecifier:
        raise ValueError(f"{requirement!r} is not a PEP 440 version specifier") from None
    return lambda version: specifier.contains(version, prereleases=True)


class Pypi(Registry[PyPIClient]):
    decl = DECLARATION
    language, repository = tables.LANGUAGE, tables.REPOSITORY
    order = tables.PEP440
    ecosystem = PYPI
    schema = tables.SCHEMA
    lanes_shown = (INDEX, API, FILES)
    version_matcher = staticmethod(pep440_matcher)
    product_key = staticmethod(normalize)  # PEP 503
    version_key = staticmethod(version_key)  # PEP 440 equality: 3.13 == 3.13.0
    is_version, not_a_version = staticmethod(is_valid), "not a PEP 440 version"
    contact_policy = (
        "PyPI refuses generic clients and asks crawlers to say how to reach their operator"
    )
    etag_column = "ETAG"  # the Simple page's

    # -- identity ---------------------------------------------------------------------------

    def validate_name(self, name: str) -> str:
        problem = name_problem(name)
        if problem:
            raise InputError(problem)
        return name

    # -- sources ----------------------------------------------------------------------------

    def lanes(self, s: Settings) -> Lanes:
        """The three lanes. The files lane is chosen by name for every core metadata URL,
        whatever host the Simple page points to (files.pythonhosted.org, a mirror)."""
        p = s.section(PypiSettings)
        return Lanes(
            [
                Lane(INDEX, p.index_url, Rate(p.index_rate)),
                Lane(API, p.api_url.rstrip("/") + "/pypi/", Rate(p.api_rate)),
                Lane(FILES, FILES_HOST, Rate(p.files_rate)),
            ]
        )

    def client(self, fetcher: Fetcher, s: Settings) -> PyPIClient:
        p = s.section(PypiSettings)
        return PyPIClient(fetcher, p.index_url, p.api_url)

    async def seed_one(self, client: PyPIClient, name: str) -> Listing:
        page = await client.simple(name)  # kept for the crawl's collector (the run cache)
        assert page is not None  # no validators sent: no 304
        return _listing(page)

    async def collect_one(
        self, client: PyPIClient, name: str, versions: Sequence[str], context: CollectContext
    ) -> Collected:
        project = await collect_project(client, name, wanted=set(versions))
        client.forget(name)
        rows = [
            self.release_row(project, f, context.now, context.licenses) for f in project.versions
        ]
        releases = project.page.releases
        return Collected(
            listed={version_key(r.version): r.yanked for r in releases},
            rows=(rows, self.project_product_row(project, context.now)),
            problems=project.problems,
            counts=Counter(unknown_dependencies=sum(1 for r in rows if r["DEPENDENCIES"] is None)),
            yanked_rows=sum(1 for r in rows if r["YANKED"]),
        )

    def release_row(
        self,
        project: CollectedProject,
        facts: VersionFacts,
        now: datetime,
        licenses: LicenseMatcher | None = None,
    ) -> dict[str, Any]:
        """One VERSION row. With `licenses` (the SCA core's matcher over TB_LICENSE_V2), the
        free-text License field is standardised as for every registry and the chosen
        expression fills the standard columns; without, it is kept as declared
        (License-Expression or the classifier table)."""
        release = facts.release
        declared = facts.metadata or facts.api or NOTHING_DECLARED
        standardise = None if licenses is None else (lambda t: licenses.standardise(t).expression)
        license_ = declared_license(
            declared.license_expression, declared.license, declared.classifiers, standardise
        )
        deps = dependencies(declared.requires_dist)
        features: dict[str, list[str]] = {}
        for dep in deps or []:
            if dep.get("extra"):
                features.setdefault(dep["extra"], []).append(dep["name"])
        expression = license_.expression
        standard = licenses.standardise(expression) if licenses and expression else None
        extras = declared.provides_extra
        return self.version_row(
            project.display_name, release.version, now, standard, expression,
            DESCRIPTION=declared.summary, LICENSE=license_.text,
            DEPENDENCIES=None if deps is None else dumps(deps), FEATURES=dumps(features),
            CHECKSUM=next((f.hashes.get("sha256") for f in release.files if f.hashes), None),
            YANKED=release.yanked, URL=f"{PROJECT_PAGE}{project.name}/{release.version}/",
            SCM=dumps({"home_page": declared.home_page, "project_urls": declared.project_urls}),
            RELEASE_DATE=release.first_upload,
            YANKED_REASON=release.yanked_reason,
            REQUIRES_PYTHON=release.requires_python or declared.requires_python,
            EXTRAS=None if extras is None else dumps(list(extras)),
            FILES=dumps([f.as_row() for f in release.files]), DEPENDENCY_SOURCE=facts.source,
            LICENSE_SOURCE=license_.source, VERSION_VALID=is_valid(release.version),
        )  # fmt: skip

    def project_product_row(self, project: CollectedProject, now: datetime) -> dict[str, Any]:
        """A collected project's PRODUCT row: every release it lists, its own columns."""
        pairs = [(r.version, r.yanked) for r in project.page.releases]
        return self.product_row(project.display_name, pairs, now, **product_columns(project))

    # -- refresh: conditional GETs of the Simple pages ------------------------------------

    async def refresh_plan(
        self, client: PyPIClient, db: Database, names: Sequence[str]
    ) -> RefreshPlan:
        """Only the projects whose `_last-serial` in the root listing moved past the one
        stored (bandersnatch's way; one request for the whole index, then one per changed
        project); every stored project, with its conditional GET, when the index gives no
        listing (a mirror without serials) or a project has no stored serial."""
        targets = self.refresh_targets(db, names)
        try:
            serials = await client.serials()
        except (FetchError, ValueError) as exc:
            why = explain_failure(exc)
            return RefreshPlan(targets, note=f"no root listing ({why}): every project asked")
        with db.reading() as conn:
            stored: dict[str, Any] = self.products(db).column(conn, "LAST_SERIAL")
        changed = [
            # moved: asked whole (a 304 to the stored ETag would leave the old serial stored,
            # and the project asked again by every refresh); unknown: asked conditionally
            RefreshTarget(t.name, t.key, None if t.key in serials else t.stored)
            for t in targets
            if stored.get(t.key) is None
            or serials.get(t.key) is None
            or serials[t.key] > stored[t.key]
        ]
        note = f"{len(changed)} of {len(targets)} stored projects' serials moved (root listing)"
        return RefreshPlan(changed, note=note, requests=1)

    async def refresh_one(self, client: PyPIClient, target: RefreshTarget) -> Listing | None:
        validators = Validators(etag=target.stored) if target.stored else None
        page = await client.simple(target.name, validators)
        return None if page is None else _listing(page)

    def refresh_extra(self, listing: Listing) -> dict[str, Any]:
        page: SimplePage = listing.state
        return {"ETAG": page.validators.etag, "LAST_SERIAL": page.last_serial}

    # -- locks and pins ---------------------------------------------------------------------

    def read_lock(
        self, path: Path, text: str, where: str | None = None, root: Path | None = None
    ) -> LockInput:
        """Any of PyPI's lock files; a requirements file with its `-r`/`-c` includes."""
        return parse_lock(text, path.name, where or str(path), path, root)

    def parse_pin(self, text: str) -> tuple[str, str | None]:
        """`NAME==VERSION` (a bare NAME, or another specifier, is refused: no resolver)."""
        match = _PIN.match(text)
        if match is None:
            raise InputError(f"{text!r}: give NAME==VERSION (pins only; nothing is resolved)")
        problem = name_problem(match["name"])
        if problem:
            raise InputError(f"{text!r}: {problem}")
        return normalize(match["name"]), match["version"]

    def policy_license(self, expression: str | None, text: str | None) -> str | None:
        """PyPI's License-Expression (PEP 639), or the classifiers' or free text's expression
        stagecrawl made, before the free text itself."""
        return expression or text


def _listing(page: SimplePage) -> Listing:
    return Listing(page.name, {r.version: r.yanked for r in page.releases}, [*page.problems], page)


REGISTRY = Pypi()
