"""Lock mode: which crates a Rust project uses, from its resolved Cargo.lock at each git tag.

A repository is cloned once (bare) into a cache folder; each tag's tree is exported with
`git archive` into a temporary folder. A committed Cargo.lock is parsed as it is; otherwise
`cargo generate-lockfile` resolves one (the union across targets and features: everything the
project could pull). cargo always runs with a private CARGO_HOME, never the user's ~/.cargo;
when the index is a mirror, that CARGO_HOME's config replaces the crates-io source with it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from stagecrawl.crates.client import CratesClient, explain
from stagecrawl.crates.config import DEFAULT_INDEX_URL
from stagecrawl.crates.index import IndexFormatError
from stagecrawl.crates.names import validate_name, validate_version
from stagecrawl.crates.queue import NewEvent, register
from stagecrawl.engine.git import GitRepo as GitRepo  # re-exported: moved to the core
from stagecrawl.engine.git import last_error_line as _last_error_line
from stagecrawl.engine.git import run_git as _run
from stagecrawl.engine.git import select_tags as select_tags
from stagecrawl.engine.shutdown import GracefulStop, Interrupted, Unsent
from stagecrawl.errors import FetchError, InputError, NotFound
from stagecrawl.storage.db import Database

log = logging.getLogger("stagecrawl.lock")
CRATES_IO_SOURCES = frozenset(
    {
        "registry+https://github.com/rust-lang/crates.io-index",
        "sparse+https://index.crates.io/",
    }
)
COMMITTED, GENERATED, LOCKFILE = "committed-lock", "generated-lock", "lockfile"
LOCK_VERSIONS = (1, 2, 3, 4)  # v1 has no `version` key; v2 is implied by its layout
CARGO_TIMEOUT = 600.0


@dataclass(frozen=True)
class LockedPackage:
    name: str
    version: str
    source: str | None


def parse_lockfile(text: str, where: str) -> list[LockedPackage]:
    """Every `[[package]]` of a Cargo.lock, any format version (v1's `[metadata]` checksums
    through v4). Raises InputError naming `where` when it is not TOML or has no packages."""
    try:
        document = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:  # Recursion: nested too deeply
        raise InputError(f"{where} is not a Cargo.lock: not TOML ({exc})") from None
    version = document.get("version", 1)
    if version not in LOCK_VERSIONS:
        raise InputError(
            f"{where}: Cargo.lock format version {version!r} is not one stagecrawl reads"
            f" (it reads {', '.join(map(str, LOCK_VERSIONS))})"
        )
    packages = document.get("package")
    if not isinstance(packages, list) or not packages:
        raise InputError(f"{where} is not a Cargo.lock: it has no [[package]] entries")
    result: list[LockedPackage] = []
    for entry in packages:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise InputError(f"{where}: a [[package]] entry has no name")
        if not isinstance(entry.get("version"), str):
            raise InputError(f"{where}: package {entry['name']} has no version")
        source = entry.get("source")
        result.append(
            LockedPackage(
                entry["name"], entry["version"], source if isinstance(source, str) else None
            )
        )
    return result


def external_crates(packages: list[LockedPackage]) -> list[LockedPackage]:
    """Only crates.io packages: the workspace's own crates, path and git dependencies go."""
    seen: dict[tuple[str, str], LockedPackage] = {}
    for package in packages:
        if package.source in CRATES_IO_SOURCES:
            seen.setdefault((package.name, package.version), package)
    return sorted(seen.values(), key=lambda p: (p.name, p.version))


def cargo_home(cache_dir: Path, index_url: str) -> Path:
    """A private CARGO_HOME; for a mirror, its config replaces crates-io with the mirror."""
    home = cache_dir.resolve() / "cargo-home"  # absolute: cargo runs inside the tree
    home.mkdir(parents=True, exist_ok=True)
    config = home / "config.toml"
    if index_url.rstrip("/") == DEFAULT_INDEX_URL.rstrip("/"):
        config.unlink(missing_ok=True)
    else:
        config.write_text(
            "[source.crates-io]\n"
            'replace-with = "stagecrawl-mirror"\n\n'
            "[source.stagecrawl-mirror]\n"
            f'registry = "sparse+{index_url.rstrip("/")}/"\n'
        )
    return home


async def resolve_tree(
    tree: Path, home: Path, where: str, stop: GracefulStop | None = None
) -> tuple[str, str]:
    """(Cargo.lock text, RESOLVE_KIND) for an exported tree."""
    committed = tree / "Cargo.lock"
    if committed.is_file():
        return committed.read_text(encoding="utf-8", errors="replace"), COMMITTED
    if not (tree / "Cargo.toml").is_file():
        raise InputError(f"{where}: no Cargo.toml at the top of the tree")
    env = {**os.environ, "CARGO_HOME": str(home), "CARGO_TERM_COLOR": "never"}
    done = await _run(
        ["cargo", "generate-lockfile", "--quiet"],
        f"{where}: cargo generate-lockfile",
        cwd=tree,
        env=env,
        timeout=CARGO_TIMEOUT,
        stop=stop,
    )
    if done.returncode != 0 or not committed.is_file():
        raise InputError(f"{where}: cargo could not resolve: {_last_error_line(done.stderr)}")
    return committed.read_text(encoding="utf-8"), GENERATED


async def lock_at_tag(repo: GitRepo, tag: str, home: Path) -> tuple[list[LockedPackage], str]:
    where = f"{repo.label}@{tag}"
    with tempfile.TemporaryDirectory(prefix="stagecrawl-tag-") as tmp:
        tree = Path(tmp)
        await repo.export(tag, tree)
        text, kind = await resolve_tree(tree, home, where, repo.stop)
    return parse_lockfile(text, f"{where} Cargo.lock"), kind


@dataclass
class TagReport:
    label: str
    kind: str = ""
    packages: int = 0
    external: int = 0
    new_events: int = 0
    not_found: tuple[str, ...] = ()
    crates: frozenset[str] = frozenset()
    error: str | None = None
    index_failed: dict[str, str] | None = None
    # "name version" -> why crates.io could not have published it: never registered
    rejected: dict[str, str] = field(default_factory=dict)


async def register_lock(
    db: Database,
    client: CratesClient | None,
    report: TagReport,
    packages: list[LockedPackage],
    pinned_only: bool,
    stop: GracefulStop | None = None,
) -> None:
    """Register the events one lock asks for, tagged with its label: every version of each
    crate it names (from the index, yanked flagged), or with `pinned_only` just the pins,
    from the lock file alone (the collect that follows asks the index, the authority)."""
    external = []
    for package in external_crates(packages):
        try:  # before any URL is built from it or anything is registered
            validate_name(package.name)
            validate_version(package.version, package.name)
            external.append(package)
        except InputError as exc:
            report.rejected[f"{package.name} {package.version}"] = str(exc)
            log.warning("%s: package skipped, never registered: %s", report.label, exc)
    report.packages = len(packages)
    report.crates = frozenset(p.name for p in external)
    report.external = len(report.crates)
    pins: dict[str, set[str]] = {}
    for package in external:
        pins.setdefault(package.name, set()).add(package.version)
    events: list[NewEvent] = []
    missing: list[str] = []
    failed: dict[str, str] = {}
    for name, versions in sorted(pins.items()):
        if pinned_only or client is None:
            events += [
                NewEvent(name, vers, "lock", False, report.kind, (report.label,))
                for vers in sorted(versions)
            ]
            continue
        if stop is not None and stop.requested:
            raise Interrupted("lock registration stopped")
        try:
            # On the wire when a stop comes: it may finish within the grace period, then it
            # is cancelled (never an unbounded wait on a stalled index).
            asked = client.index(name)
            entry = await (stop.within_grace(asked) if stop is not None else asked)
        except Unsent as unsent:  # stopped while waiting for its turn: nothing was sent
            raise Interrupted("lock registration stopped") from unsent
        except NotFound:
            missing.append(name)
            continue
        except (FetchError, IndexFormatError) as exc:
            # Not lost: its pins are registered, and collect asks the index again.
            failed[name] = explain(exc)
            events += [
                NewEvent(name, vers, "lock", False, report.kind, (report.label,))
                for vers in sorted(versions)
            ]
            continue
        yanked = {v.vers: v.yanked for v in entry.versions}
        # A pin the readable lines do not list but that may sit on an unreadable line is
        # registered all the same; collect then says which line it waits on.
        listed = list(yanked) + sorted(
            v for v in versions - set(yanked) if entry.unreadable_reason(v) is not None
        )
        events += [
            NewEvent(
                entry.real_name, vers, "lock", yanked.get(vers, False), report.kind, (report.label,)
            )
            for vers in listed
        ]
    counts = await asyncio.to_thread(register, db, events)
    report.new_events = counts.new
    report.not_found = tuple(missing)
    report.index_failed = failed
