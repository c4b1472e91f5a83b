"""Engine parts built from a run's resolved settings, one function each.

Every pipeline builds its fetcher, limiter and work-loop settings here, so a setting reaches
every place it configures and no value is written twice (the engine's dataclasses take their
defaults from the settings table too). Registry-specific lanes are built by the registry's
plug-in (`Registry.lanes`) and handed to `build_fetcher`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from stagecrawl.secrets import mask_url, register_url
from stagecrawl.settings import Settings

if TYPE_CHECKING:  # the engine (aiohttp, redis) is imported when a part is built, not before
    from stagecrawl.engine.clock import Clock
    from stagecrawl.engine.fetcher import Fetcher, FetchSettings
    from stagecrawl.engine.ratelimit import Lanes, Limiter
    from stagecrawl.engine.work import LoopSettings
    from stagecrawl.storage.db import Database

MiB = 1024 * 1024


def fetch_settings(s: Settings, *, download: bool = False) -> FetchSettings:
    """The fetcher's knobs. A download (an OSV archive, a database dump) may take up to the
    download deadline as a whole exchange: it is one large body, not a page."""
    from stagecrawl.engine.fetcher import FetchSettings

    return FetchSettings(
        timeout=s.timeout,
        deadline=s.download_deadline if download else s.deadline,
        download_deadline=s.download_deadline,
        retries=s.retries,
        max_retry_after=s.max_retry_after,
        max_body_bytes=int(s.max_body_mb * MiB),
        contact=s.contact,
    )


def build_limiter(s: Settings, clock: Clock | None = None) -> Limiter:
    """The shared Redis limiter when `redis_url` is set, else this process's own."""
    from stagecrawl.engine.ratelimit import LocalLimiter

    if s.redis_url:
        from stagecrawl.engine.redis_limiter import RedisLimiter
        from stagecrawl.secrets import mask_url

        return RedisLimiter(
            s.redis_url, clock, safe_url=mask_url(s.redis_url), outage_seconds=s.outage_seconds
        )
    return LocalLimiter(clock)


def build_fetcher(
    s: Settings,
    lanes: Lanes,
    *,
    clock: Clock | None = None,
    download: bool = False,
    max_body_bytes: int | None = None,
) -> Fetcher:
    """The one way a pipeline gets a fetcher: its lanes, the limiter and the fetch knobs of
    `s`. `max_body_bytes` overrides `max_body_mb` for a download with its own limit."""
    from stagecrawl.engine.fetcher import Fetcher

    settings = fetch_settings(s, download=download)
    if max_body_bytes is not None:
        settings.max_body_bytes = max_body_bytes
    return Fetcher(settings, lanes, limiter=build_limiter(s, clock), clock=clock)


def download_fetcher(s: Settings, url: str, max_body_bytes: int | None = None) -> Fetcher:
    """A fetcher for one download from `url`, on the `download` lane."""
    from stagecrawl.engine.ratelimit import Lane, Lanes, Rate

    # `--source` is no setting: its password or a pre-signed URL's signature is registered
    # here, before the fetcher's errors and logs quote the URL.
    register_url(url)

    lanes = Lanes([Lane("download", url, Rate(s.download_rate))])
    return build_fetcher(s, lanes, download=True, max_body_bytes=max_body_bytes)


def loop_settings(s: Settings, concurrency: int | None = None) -> LoopSettings:
    """The work loop's knobs (`concurrency` for a phase with its own setting, e.g. aircraft)."""
    from stagecrawl.engine.work import LoopSettings

    return LoopSettings(
        concurrency=s.concurrency if concurrency is None else concurrency,
        commit_batch=s.commit_batch,
        commit_bytes=s.commit_bytes,
        commit_linger=s.commit_linger,
        grace_period=s.grace_period,
    )


def effective(fetcher: Fetcher, loops: Mapping[str, LoopSettings]) -> dict[str, Any]:
    """What the built parts of a run actually use (lanes, limiter, fetch knobs, work loops),
    read off the parts themselves: the `settings` section of a command's JSON summary."""
    lanes = {
        lane.name: {
            "url": mask_url(lane.url),
            "rate": lane.rate.per_second if lane.rate else None,
            "burst": lane.rate.burst if lane.rate else None,
            "budgets": [f"{b.limit}/{b.window:g}s" for b in lane.budgets],
            "token": lane.token is not None,
        }
        for lane in fetcher.lanes
    }
    f = fetcher.settings
    return {
        "lanes": lanes,
        "limiter": "redis" if type(fetcher.limiter).__name__ == "RedisLimiter" else "local",
        "fetch": {
            "timeout": f.timeout,
            "deadline": f.deadline,
            "retries": f.retries,
            "max_retry_after": f.max_retry_after,
            "max_body_bytes": f.max_body_bytes,
            "user_agent": f.user_agent(),
        },
        "loops": {
            name: {
                "concurrency": loop.concurrency,
                "commit_batch": loop.commit_batch,
                "commit_bytes": loop.commit_bytes,
                "commit_linger": loop.commit_linger,
                "grace_period": loop.grace_period,
            }
            for name, loop in loops.items()
        },
    }


def open_database(s: Settings, *, read_only: bool = False) -> Database:
    """The run's database (`db`), waiting out a server lost mid-run for up to
    `outage_seconds`, SQLite's memory bounded by `sqlite_memory_mb`: the one way a command
    opens it, so those settings reach every command."""
    from stagecrawl.storage.db import Database

    return Database(
        s.db,
        read_only=read_only,
        outage_seconds=s.outage_seconds,
        sqlite_memory_mb=s.sqlite_memory_mb,
    )
