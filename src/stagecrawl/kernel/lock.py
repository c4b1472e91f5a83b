"""Lock mode, for every registry: what a project's lock files pin, from files or a git
repository at each tag, registered as LIST events (source `lock`, tagged with the input's
label). The registry reads its lock files (`read_lock`, `locks_at_tag`: cargo resolves a tag
without a committed Cargo.lock); the kernel checks every input before anything is registered
or opened, validates each pin where it enters (a name or version that could not be the
registry's, or does not fit its column, is rejected with its reason and never registered),
registers in chunks that a stop interrupts within a second, and reports.

With `expand`, every version the source lists for each locked package is registered, not
only the pins (crates' default: lock mode then seeds the packages a project uses).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stagecrawl.components import effective, open_database
from stagecrawl.engine.git import GitRepo, select_tags
from stagecrawl.engine.shutdown import GracefulStop, Interrupted, Unsent
from stagecrawl.errors import FetchError, InputError, NotFound, UnreadableAnswer
from stagecrawl.kernel.failures import explain_failure
from stagecrawl.kernel.lockfiles import read_file
from stagecrawl.kernel.phases import registry_fetcher
from stagecrawl.kernel.registry import LockInput, Registry
from stagecrawl.queue.events import NewEvent, RegisterCounts
from stagecrawl.sca.audit import Unaudited
from stagecrawl.settings import Settings
from stagecrawl.storage.db import Database

log = logging.getLogger("stagecrawl.lock")
# Events per registering call: a stop between two is honoured within about a second even
# for a lock of hundreds of thousands of pins.
REGISTER_SLICE = 5000


@dataclass
class LockSources:
    """What lock mode reads (any of): lock files, a repository's tags."""

    lockfiles: Sequence[Path] = ()
    repo: str | None = None
    tags: Sequence[str] = ()
    tags_matching: str | None = None
    all_tags: bool = False
    label: str | None = None  # REF_TAGS label of lock files (default: their folder's name)

    def __bool__(self) -> bool:
        return bool(self.lockfiles or self.repo)

    def check(self) -> None:
        if self.repo is not None and not (self.tags or self.tags_matching or self.all_tags):
            raise InputError(
                "say which tags: --tag T (repeatable), --tags-matching GLOB or --all-tags"
            )
        if self.repo is None and (self.tags or self.tags_matching or self.all_tags):
            # a tag without a repository would be silently ignored
            if self.lockfiles:  # a lock file is one resolution already
                raise InputError(
                    "--tag, --tags-matching and --all-tags choose a repository's tags;"
                    " with --lockfile give none (--label names its input)"
                )
            raise InputError(
                "--tag, --tags-matching and --all-tags choose a repository's tags: give the"
                " repository too"
            )


@dataclass
class ReadLock:
    """One input as read: its label (REF_TAGS), and its lock files or why it has none."""

    label: str
    locks: list[LockInput] = field(default_factory=list)
    error: str | None = None


def read_lockfile(registry: Registry[Any], path: Path) -> LockInput:
    """A lock file from disk, read by its registry (InputError: one line, nothing done)."""
    return registry.read_lock(path, read_file(path))


async def read_lockfiles(
    registry: Registry[Any], paths: Sequence[Path], stop: GracefulStop | None
) -> list[LockInput]:
    """Lock files from disk, each read once, off the loop when a stop is watched (a large file
    takes seconds to parse, and a stop then ends the wait at once)."""
    if stop is None:
        return [read_lockfile(registry, path) for path in paths]
    return [
        await stop.off_the_loop(functools.partial(read_lockfile, registry, path)) for path in paths
    ]


async def read_sources(
    registry: Registry[Any],
    s: Settings,
    sources: LockSources,
    stop: GracefulStop | None,
    files_read: Sequence[LockInput] | None = None,
) -> list[ReadLock]:
    """Every input read and checked: the lock files first (from disk alone, nothing cloned or
    asked; `files_read` when the caller has read them already), then each chosen tag of the
    repository (a tag that cannot be read is an error for that tag, not the run)."""
    sources.check()
    found: list[ReadLock] = []
    if files_read is None:
        files_read = [read_lockfile(registry, path) for path in sources.lockfiles]
    for path, lock in zip(sources.lockfiles, files_read, strict=True):
        label = sources.label or path.resolve().parent.name or "lockfile"
        found.append(ReadLock(label, [lock]))
    if sources.repo is None:
        return found
    git = GitRepo(sources.repo, Path(s.cache_dir), stop)
    await git.sync()
    chosen = select_tags(
        await git.tags(), list(sources.tags), sources.tags_matching, sources.all_tags
    )
    if not chosen:
        raise InputError(f"no tag of {sources.repo} matches {sources.tags_matching!r}")
    for tag in chosen:
        if stop is not None and stop.requested:
            raise Interrupted("lock reading stopped")
        label = f"{git.label}@{tag}"
        try:
            locks = await registry.locks_at_tag(git, tag, s, stop)
        except InputError as exc:
            found.append(ReadLock(label, error=str(exc)))
            continue
        if not locks:
            found.append(ReadLock(label, error=f"{label}: no lock file at the top of the tree"))
        else:
            found.append(ReadLock(label, locks))
    return found


@dataclass
class InputReport:
    label: str
    kind: str = ""
    packages: int = 0  # entries of the lock (pins and the rest)
    units: frozenset[str] = frozenset()  # the registry's packages it pins
    new_events: int = 0
    not_found: tuple[str, ...] = ()
    index_failed: dict[str, str] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)  # "name version" -> why
    unaudited: list[Unaudited] = field(default_factory=list)  # not the registry's, and why
    unpinned: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def problems(self) -> bool:
        return bool(self.error or self.not_found or self.rejected or self.unpinned)


@dataclass
class LockReport:
    units_word: str
    inputs: list[InputReport] = field(default_factory=list)
    interrupted: bool = False
    settings: dict[str, Any] = field(default_factory=dict)  # what the run's parts used

    @property
    def problems(self) -> bool:
        return any(i.problems for i in self.inputs)

    def as_json(self) -> dict[str, Any]:
        return {
            "inputs": [
                {
                    "label": r.label,
                    "lock": r.kind,
                    "packages": r.packages,
                    f"external_{self.units_word}": len(r.units),
                    "new_events": r.new_events,
                    "not_found": list(r.not_found),
                    "index_failed": dict(sorted(r.index_failed.items())),
                    "rejected": dict(sorted(r.rejected.items())),
                    "not_from_the_registry": [u.text() for u in r.unaudited if not u.fails],
                    "unpinned": r.unpinned,
                    "error": r.error,
                }
                for r in self.inputs
            ],
            f"unique_{self.units_word}": len(frozenset().union(*(r.units for r in self.inputs))),
            "new_events": sum(r.new_events for r in self.inputs),
            "interrupted": self.interrupted,
            **({"settings": self.settings} if self.settings else {}),
        }


def checked_pins(
    registry: Registry[Any], lock: LockInput, report: InputReport
) -> dict[str, set[str]]:
    """The lock's pins that may enter the queue, by name; the others rejected with why."""
    pins: dict[str, set[str]] = {}
    for pin in lock.pins:
        name, version = pin.name, pin.version
        try:  # before any URL is built from it or anything is registered
            registry.validate_name(name)
            registry.check_version(name, version)
        except InputError as exc:
            shown = f"{name[:80]} {version[:80]}"
            report.rejected[shown] = str(exc)
            log.debug("%s: package skipped, never registered: %s", report.label, exc)
            continue
        pins.setdefault(name, set()).add(version)
    report.rejected.update(lock.rejected)
    return pins


async def register_lock(
    db: Database,
    registry: Registry[Any],
    client: Any,
    label: str,
    lock: LockInput,
    report: InputReport,
    expand: bool,
    stop: GracefulStop | None,
) -> None:
    """Register the events one lock asks for, tagged with its label: its pins, or with
    `expand` every version the source lists for each of its packages (yanked flagged)."""
    report.kind = lock.kind
    report.packages = len(lock.pins) + len(lock.unaudited)
    report.unaudited, report.unpinned = list(lock.unaudited), lock.unpinned
    pins = checked_pins(registry, lock, report)
    report.units = frozenset(pins)
    events: list[NewEvent] = []
    missing: list[str] = []
    for name, versions in sorted(pins.items()):
        pinned = [NewEvent(name, v, "lock", False, lock.kind, (label,)) for v in sorted(versions)]
        if not expand or client is None:
            events += pinned
            continue
        if stop is not None and stop.requested:
            raise Interrupted("lock registration stopped")
        try:
            # On the wire when a stop comes: it may finish within the grace period, then it
            # is cancelled (never an unbounded wait on a stalled source).
            asked = registry.seed_one(client, name)
            listing = await (stop.within_grace(asked) if stop is not None else asked)
        except Unsent as unsent:  # stopped while waiting for its turn: nothing was sent
            raise Interrupted("lock registration stopped") from unsent
        except NotFound:
            missing.append(name)
            continue
        except (FetchError, UnreadableAnswer) as exc:
            # Not lost: its pins are registered, and collect asks the source again.
            report.index_failed[name] = explain_failure(exc)
            events += pinned
            continue
        # A pin the readable listing lacks but that may sit on an unreadable part is
        # registered all the same; collect then says what it waits on.
        listed = list(listing.versions)
        extra = sorted(v for v in versions - set(listing.versions) if listing.may_list(v))
        events += [
            NewEvent(listing.name, v, "lock", listing.versions.get(v, False), lock.kind, (label,))
            for v in listed + extra
        ]
    report.not_found = tuple(missing)
    counts = await asyncio.to_thread(register_events, db, registry, events, stop)
    report.new_events = counts.new


def register_events(
    db: Database, registry: Registry[Any], events: list[NewEvent], stop: GracefulStop | None
) -> RegisterCounts:
    """Register in slices, a stop between two honoured (what is registered stays: it is
    idempotent, and the rerun registers the rest)."""
    counts = RegisterCounts()
    event_list = registry.event_list(db)
    for start in range(0, len(events), REGISTER_SLICE):
        if stop is not None and stop.requested:
            raise Interrupted("lock registration stopped")
        counts.add(event_list.register(events[start : start + REGISTER_SLICE]))
    return counts


async def run_lock(
    registry: Registry[Any],
    s: Settings,
    stop: GracefulStop,
    sources: LockSources,
    expand: bool = False,
) -> LockReport:
    """`<registry> lock`: the inputs are checked (a bad lock file refused) before anything is
    asked or opened; then each input's pins are registered. The database is opened on the
    first registration: an input that fails throughout creates nothing."""
    if not sources or (sources.repo and sources.lockfiles):
        raise InputError("give either a repository or --lockfile PATH")
    sources.check()  # the options before any file is read
    registry.configure(s)
    report = LockReport(registry.decl.words.units)
    # from disk alone: nothing cloned or asked
    files_read = await read_lockfiles(registry, sources.lockfiles, stop)
    # With `expand` the source is asked: its settings are checked before a clone; pins alone
    # ask nothing of the registry (a Python lock file is its own resolution).
    fetcher = registry_fetcher(registry, s) if expand else None
    async with fetcher or contextlib.nullcontext():
        inputs = await read_sources(registry, s, sources, stop, files_read)
        client = registry.client(fetcher, s) if fetcher is not None else None
        db: Database | None = None
        for read in inputs:
            if stop.requested:
                report.interrupted = True
                break
            if read.error is not None:
                report.inputs.append(InputReport(read.label, error=read.error))
                continue
            for lock in read.locks:
                entry = InputReport(read.label if len(read.locks) == 1 else lock.where)
                report.inputs.append(entry)
                try:
                    db = db or open_database(s)
                    await register_lock(db, registry, client, read.label, lock, entry, expand, stop)
                except Interrupted:
                    report.interrupted = True
                    entry.error = "interrupted"
                    break
            if report.interrupted:
                break
        if fetcher is not None:
            report.settings = effective(fetcher, {})
    return report
