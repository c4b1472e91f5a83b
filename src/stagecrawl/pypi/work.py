"""One unit of PyPI work, as the queue's handlers run it: seeding a name (its Simple page says
which versions exist) and collecting a project's pending versions (rows for VERSION and
PRODUCT). Failures come back typed with a one-line reason for the retry ladder, a host's pause as
WAITING with its reason and time; nothing here writes to the database."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from packaging.version import Version

from stagecrawl.errors import FetchError, NotFound, RateLimited
from stagecrawl.pypi.client import PyPIClient, SimplePage
from stagecrawl.pypi.collect import CollectedProject, collect_project
from stagecrawl.pypi.collect import product_row as build_product_row
from stagecrawl.pypi.collect import version_row as build_version_row
from stagecrawl.pypi.simple import SimpleFormatError
from stagecrawl.pypi.versions import version_key
from stagecrawl.queue import utcnow
from stagecrawl.sca.matcher import LicenseMatcher
from stagecrawl.secrets import redact

SEEDED, NOT_FOUND, FAILED = "seeded", "not-found", "failed"
# Not attempted: the host asked for a pause longer than the run may wait (its Retry-After, our
# backoff after 429s) or our budget is spent. The work waits until `until`, off the retry
# ladder: no failure of its own.
WAITING = "waiting"


def explain(exc: Exception) -> str:
    """A failure as one stored line (secrets masked)."""
    if isinstance(exc, SimpleFormatError):
        text = f"unreadable reply: {exc}"
    elif isinstance(exc, FetchError):
        text = str(exc)
    else:
        text = f"unexpected {type(exc).__name__}: {exc}"
    return redact(" ".join(text.split()))[:2000]


def pause(exc: RateLimited) -> tuple[str, datetime]:
    """Why work waits (naming the source, secrets masked) and until when."""
    return redact(exc.pause_text), exc.until or utcnow()


@dataclass
class SeedOutcome:
    name: str
    page: SimplePage | None
    state: str
    error: str | None = None
    until: datetime | None = None  # WAITING: not before then


async def seed_one(client: PyPIClient, name: str) -> SeedOutcome:
    try:
        page = await client.simple(name)
    except NotFound:
        return SeedOutcome(name, None, NOT_FOUND, "not on the index")
    except RateLimited as exc:
        reason, until = pause(exc)
        return SeedOutcome(name, None, WAITING, reason, until)
    except (FetchError, SimpleFormatError) as exc:
        return SeedOutcome(name, None, FAILED, f"index: {explain(exc)}")
    assert page is not None
    return SeedOutcome(name, page, SEEDED)


@dataclass
class ProjectResult:
    name: str
    state: str
    error: str | None = None
    collected: CollectedProject | None = None
    version_rows: list[dict[str, Any]] = field(default_factory=list)
    product_row: dict[str, Any] | None = None
    missing: set[str] = field(default_factory=set)  # asked for, not on the Simple page
    until: datetime | None = None  # WAITING: not before then

    @property
    def listed(self) -> dict[Version | str, bool]:
        """Every version the Simple page lists, with its yanked flag, by `version_key` (PEP
        440 equality: a pin `3.13.0` finds the release listed as `3.13`)."""
        if self.collected is None:
            return {}
        return {version_key(r.version): r.yanked for r in self.collected.page.project.releases}


async def collect_one(
    client: PyPIClient,
    name: str,
    versions: set[str],
    now: datetime,
    licenses: LicenseMatcher | None = None,
    skip: set[str] | None = None,
) -> ProjectResult:
    """Collect the `versions` of one project asked for (those in `skip` are already stored:
    listed, not enriched again)."""
    try:
        collected = await collect_project(client, name, wanted=versions, skip=skip)
    except NotFound:
        return ProjectResult(name, NOT_FOUND, "not on the index")
    except RateLimited as exc:  # on any of its requests: the project waits whole
        reason, until = pause(exc)
        return ProjectResult(name, WAITING, reason, until=until)
    except (FetchError, SimpleFormatError) as exc:
        return ProjectResult(name, FAILED, explain(exc))
    listed = {version_key(r.version) for r in collected.page.project.releases}
    return ProjectResult(
        name,
        SEEDED,
        collected=collected,
        version_rows=[build_version_row(collected, f, now, licenses) for f in collected.versions],
        product_row=build_product_row(collected, now),
        missing={v for v in versions if version_key(v) not in listed},
    )
