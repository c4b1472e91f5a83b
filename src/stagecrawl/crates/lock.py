"""Lock mode: which crates a Rust project uses, from its resolved Cargo.lock at each git tag.

A repository is cloned once (bare) into a cache folder; each tag's tree is exported with
`git archive` into a temporary folder. A committed Cargo.lock is parsed as it is; otherwise
`cargo generate-lockfile` resolves one (the union across targets and features: everything the
project could pull). cargo always runs with a private CARGO_HOME, never the user's ~/.cargo;
when the index is a mirror, that CARGO_HOME's config replaces the crates-io source with it.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import io
import logging
import os
import re
import tarfile
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from stagecrawl.crates.client import CratesClient, explain
from stagecrawl.crates.config import DEFAULT_INDEX_URL
from stagecrawl.crates.index import IndexFormatError
from stagecrawl.crates.names import validate_name, validate_version
from stagecrawl.crates.queue import NewEvent, register
from stagecrawl.engine.commands import CommandResult, CommandTimeout, run_command
from stagecrawl.engine.shutdown import GracefulStop, Interrupted
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
# git may only talk these protocols: never `fd::`, `ext::` or other transports that run
# commands or wait on a file descriptor.
GIT_PROTOCOLS = "file:git:http:https:ssh"
GIT_TIMEOUT = 600.0  # a clone of a large repository over a slow link
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
    except tomllib.TOMLDecodeError as exc:
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


async def _run(
    args: list[str],
    what: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = GIT_TIMEOUT,
    stop: GracefulStop | None = None,
) -> CommandResult:
    base = env if env is not None else dict(os.environ)
    env = {**base, "GIT_ALLOW_PROTOCOL": GIT_PROTOCOLS, "GIT_TERMINAL_PROMPT": "0"}
    try:
        return await run_command(args, timeout=timeout, cwd=cwd, env=env, stop=stop)
    except CommandTimeout as exc:
        raise InputError(f"{what}: {exc}") from None
    except FileNotFoundError:
        raise InputError(f"{what}: {args[0]} is not installed") from None


def _last_error_line(stderr: bytes) -> str:
    lines = [line.strip() for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    # cargo puts the cause last ("Caused by: …"), git puts it in its "fatal:" line.
    errors = [line for line in lines if line.lower().startswith(("error", "fatal"))]
    picked = (errors[:1] + lines[-1:]) if errors and errors[0] != lines[-1] else errors or lines
    return " … ".join(picked or ["(no message)"])[:500]


class GitRepo:
    """A bare clone in the cache, reused (and fetched) by later runs."""

    def __init__(self, location: str, cache_dir: Path, stop: GracefulStop | None = None) -> None:
        self.location = location
        self.stop = stop
        local = Path(location).expanduser()
        self.source = str(local.resolve()) if local.exists() else location
        digest = hashlib.sha256(self.source.encode()).hexdigest()[:16]
        self.label = re.sub(r"\.git$", "", self.source.rstrip("/").rsplit("/", 1)[-1]) or "repo"
        self.path = cache_dir.resolve() / "repos" / f"{self.label}-{digest}.git"

    async def _git(self, *args: str, what: str) -> CommandResult:
        return await _run(["git", *args], what, stop=self.stop)

    async def sync(self) -> None:
        what = f"cannot clone {self.location}"
        if (self.path / "HEAD").exists():
            done = await self._git(
                "--git-dir",
                str(self.path),
                "fetch",
                "--quiet",
                "--force",
                "--tags",
                "origin",
                "+refs/heads/*:refs/heads/*",
                what=what,
            )
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # `--` : a location that starts with a dash is a path, never an option
            done = await self._git(
                "clone", "--quiet", "--bare", "--", self.source, str(self.path), what=what
            )
        if done.returncode != 0:
            raise InputError(f"{what}: {_last_error_line(done.stderr)}")

    async def tags(self) -> list[str]:
        done = await self._git("--git-dir", str(self.path), "tag", "--list", what="git tag")
        return sorted(t for t in done.stdout.decode().splitlines() if t)

    async def export(self, tag: str, destination: Path) -> None:
        """The tree at `tag`, written into `destination` (no work tree juggling)."""
        done = await self._git(
            "--git-dir",
            str(self.path),
            "archive",
            "--format=tar",
            f"refs/tags/{tag}",
            what=f"export of tag {tag}",
        )
        if done.returncode != 0:
            raise InputError(f"tag {tag} not found in {self.location}")
        with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
            archive.extractall(destination, filter="data")


def select_tags(
    available: list[str], wanted: list[str], pattern: str | None, all_tags: bool
) -> list[str]:
    if all_tags:
        return available
    chosen = list(wanted)
    if pattern:
        chosen += [t for t in available if fnmatch.fnmatchcase(t, pattern) and t not in chosen]
    return chosen


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
            entry = await client.index(name)
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
