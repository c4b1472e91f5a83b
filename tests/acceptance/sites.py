"""A registry as the acceptance suites drive it: its loopback origin(s), the names to crawl,
the flags that point a command at them, and its tables dumped for comparison — one `Site` per
registry, so every suite that proves a kernel promise runs for each registry through the same
command line."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select

from stagecrawl.demo.registry import build_mirror
from stagecrawl.storage.db import Database
from stagecrawl.testing.go_origin import GoOrigin
from stagecrawl.testing.origin import TestOrigin
from stagecrawl.testing.pypi_origin import PyPIOrigin, synthetic_project
from tests.acceptance.registry import CRATES

VOLATILE = {"TIMESTAMP", "LAST_UPDATED", "CLAIMED_BY", "CLAIMED_UNTIL", "CLAIMED_AT", "CHECKED_AT"}
CONTACT = "acceptance@example.org"
PROJECTS = [f"accept-{i:02d}" for i in range(14)]
MODULES = [f"example.com/accept/m{i:02d}" for i in range(14)]


@dataclass
class Site:
    cli: str  # the command group: crates, pypi, go
    code: str  # its tables' code: RUST, PYPI, GOLANG
    names: list[str]
    origins: list[TestOrigin]
    flags: list[str]  # where the registry is (and the contact it asks for)
    slow: list[str]  # lane rates that keep a collect going long enough to interrupt it
    fast: list[str]  # lane rates that let a run finish quickly
    collect_path: str  # a request a unit's collection makes (not seeding): "/api/*"

    @property
    def origin(self) -> TestOrigin:
        return self.origins[-1]

    def requests(self, pattern: str) -> int:
        return sum(len(o.requests_to(pattern)) for o in self.origins)

    def collect_requests_since(self, mark: int) -> int:
        """Requests to `collect_path` since `mark` (an earlier `requests(collect_path)`): a
        seed may make them too (Go's reads the newest go.mod for its retractions), so a test
        waiting for a collect to be under way counts from after its seed."""
        return self.requests(self.collect_path) - mark

    def collected_sql(self) -> str:
        return f"SELECT COUNT(*) FROM TB_COMP_LIB_{self.code}_LIST WHERE PROCESSED = 1"

    def dump(self, url: str) -> dict[str, list[dict[str, Any]]]:
        """Every row of the registry's LIST, VERSION and PRODUCT, minus the columns that only
        say when (sorted: a run's order is not the data)."""
        db = Database(url)
        t = db.registry(self.code)
        result = {}
        for table in (t.list, t.version, t.product):
            with db.engine.connect() as conn:
                rows = conn.execute(select(table).order_by(*table.primary_key.columns)).all()
            result[table.name] = [
                {k: v for k, v in r._mapping.items() if k not in VOLATILE} for r in rows
            ]
        db.dispose()
        return result


def dump_tables(url: str, cli: str) -> dict[str, list[dict[str, Any]]]:
    """A registry's LIST, VERSION, PRODUCT and its first own table ("own"), every row (the
    columns that only say when left out), by the registry's command group name."""
    from stagecrawl.registries import BY_CLI

    db = Database(url)
    t = db.registry(BY_CLI[cli].code)
    parts = {"LIST": t.list, "VERSION": t.version, "PRODUCT": t.product}
    if t.own:
        parts["own"] = next(iter(t.own.values()))
    result = {}
    with db.engine.connect() as conn:
        for part, table in parts.items():
            rows = conn.execute(select(table).order_by(*table.primary_key.columns)).all()
            result[part] = [
                {k: v for k, v in r._mapping.items() if k not in VOLATILE} for r in rows
            ]
    db.dispose()
    return result


@contextlib.contextmanager
def crates_site(root: Path) -> Iterator[Site]:
    build_mirror(root, CRATES)
    with TestOrigin(root / "index") as index, TestOrigin(root / "api") as api:
        yield Site(
            "crates",
            "RUST",
            sorted(CRATES),
            [index, api],
            ["--index-url", index.url + "/", "--api-url", api.url + "/"],
            ["--api-rate", "4"],
            ["--api-rate", "100", "--index-rate", "200"],
            "/api/*",
        )


@contextlib.contextmanager
def pypi_site() -> Iterator[Site]:
    origin = PyPIOrigin()
    for n, name in enumerate(PROJECTS):
        project = synthetic_project(name, 2 + n % 4, requires=["six>=1.0"], yanked={0})
        if n % 4 == 0:  # no core metadata: the JSON API answers for each release
            for f in project.page["files"]:
                f["core-metadata"] = f["data-dist-info-metadata"] = False
        origin.add_project(project)
    with origin:
        yield Site(
            "pypi",
            "PYPI",
            PROJECTS,
            [origin],
            [
                *("--index-url", f"{origin.url}/simple/", "--api-url", f"{origin.url}/"),
                *("--contact", CONTACT),
            ],
            ["--files-rate", "4", "--api-rate", "4"],
            ["--files-rate", "200", "--api-rate", "200", "--index-rate", "200"],
            "/files/*",
        )


@contextlib.contextmanager
def go_site() -> Iterator[Site]:
    origin = GoOrigin()
    for n, path in enumerate(MODULES):
        for v in range(2 + n % 4):
            retract = "retract v1.0.0\n" if v == 3 else ""
            origin.publish(path, f"v1.{v}.0", f"module {path}\n\ngo 1.22\n{retract}")
    with origin:
        yield Site(
            "go",
            "GOLANG",
            MODULES,
            [origin],
            [
                *("--proxy-url", origin.proxy_url, "--index-url", origin.index_url),
                *("--contact", CONTACT),
            ],
            ["--proxy-rate", "6"],
            ["--proxy-rate", "200"],
            "*.mod",
        )


@contextlib.contextmanager
def site_for(cli: str, root: Path) -> Iterator[Site]:
    sites = {"crates": lambda: crates_site(root), "pypi": pypi_site, "go": go_site}
    with sites[cli]() as site:
        yield site
