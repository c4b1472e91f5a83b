"""Git as the lock modes of every registry use it: a bare clone in a cache folder, reused and
fetched by later runs, its tags listed, each tag's tree exported with `git archive` (no work
tree). git runs with a restricted protocol list, no terminal prompt, a timeout and the run's
stop. Moved here from crates/lock.py so the PyPI lock mode uses the same code.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import hashlib
import io
import logging
import os
import re
import secrets
import shutil
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

from stagecrawl.engine.commands import CommandResult, CommandTimeout, run_command
from stagecrawl.engine.filelock import FileLock
from stagecrawl.engine.jsonstore import fsync_dir
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.errors import InputError
from stagecrawl.secrets import register_url

# git may only talk these protocols: never `fd::`, `ext::` or other transports that run
# commands or wait on a file descriptor.
GIT_PROTOCOLS = "file:git:http:https:ssh"
GIT_TIMEOUT = 600.0  # a clone of a large repository over a slow link
# Written into a clone last, before it is renamed into the cache: an entry without it is not
# one this code finished (an older stagecrawl cloned in place, and a stop left half a clone).
COMPLETE_MARKER = "stagecrawl-clone-complete"
MARKER_TEXT = "stagecrawl: this bare clone was made whole, then moved here\n"
# Beside an entry, what a run makes before it is whole (a clone) or after (an entry replaced):
# hidden names that the next run removes.
LEFTOVER_PREFIX = "."

log = logging.getLogger("stagecrawl.git")


async def run_git(
    args: list[str],
    what: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = GIT_TIMEOUT,
    stop: GracefulStop | None = None,
) -> CommandResult:
    base = env if env is not None else dict(os.environ)
    env = {**base, "GIT_ALLOW_PROTOCOL": GIT_PROTOCOLS, "GIT_TERMINAL_PROMPT": "0"}
    """Run a command (git, or a resolver such as cargo) with git's restrictions; a timeout or a
    missing program is an InputError naming `what`."""
    try:
        return await run_command(args, timeout=timeout, cwd=cwd, env=env, stop=stop)
    except CommandTimeout as exc:
        raise InputError(f"{what}: {exc}") from None
    except FileNotFoundError:
        raise InputError(f"{what}: {args[0]} is not installed") from None


def last_error_line(stderr: bytes) -> str:
    lines = [line.strip() for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    # cargo puts the cause last ("Caused by: …"), git puts it in its "fatal:" line.
    errors = [line for line in lines if line.lower().startswith(("error", "fatal"))]
    picked = (errors[:1] + lines[-1:]) if errors and errors[0] != lines[-1] else errors or lines
    return " … ".join(picked or ["(no message)"])[:500]


class GitRepo:
    """A bare clone in the cache, reused (and fetched) by later runs.

    The cache never holds half a clone: a clone is made beside the entry under a leftover's
    name (`.NAME.tmp-…`), marked whole (`COMPLETE_MARKER`, written last) and renamed into
    place. An entry without the marker (a clone an older stagecrawl was stopped in), one whose
    refs name missing objects, or one a tag cannot be exported from is cloned again. Every
    change to the entry is made under its lock file (`NAME.lock`, see engine/filelock.py), so
    what a stopped or killed run left beside it (leftovers, git's own `*.lock` files inside it)
    can be removed by the next run without touching a live one's work.
    """

    def __init__(
        self,
        location: str,
        cache_dir: Path,
        stop: GracefulStop | None = None,
        timeout: float = GIT_TIMEOUT,
    ) -> None:
        # A remote's credentials (`https://TOKEN@host/…`, `https://u:pw@host/…`) are masked in
        # every message that quotes the location (git's own errors included).
        register_url(location)
        self.location = location
        self.stop = stop
        self.timeout = timeout
        local = Path(location).expanduser()
        self.source = str(local.resolve()) if local.exists() else location
        digest = hashlib.sha256(self.source.encode()).hexdigest()[:16]
        # The name is the path's last part: never a query or fragment (`?token=…`), which would
        # be stored in REF_TAGS and written into the cache's folder name.
        path = re.split(r"[?#]", self.source, maxsplit=1)[0]
        self.label = re.sub(r"\.git$", "", path.rstrip("/").rsplit("/", 1)[-1]) or "repo"
        self.path = cache_dir.resolve() / "repos" / f"{self.label}-{digest}.git"
        self._rebuilt = False  # cloned again after an export failed: not twice in one run

    async def _git(self, *args: str, what: str) -> CommandResult:
        return await run_git(["git", *args], what, timeout=self.timeout, stop=self.stop)

    async def sync(self) -> None:
        """Make the cache entry whole and current: fetch into a whole one, else clone."""
        what = f"cannot clone {self.location}"
        async with self._locked():
            if await self._whole():
                done = await self._fetch(what)
                if done.returncode == 0:
                    return
                if await self._whole(deep=True):  # the entry is fine: the remote or link failed
                    raise InputError(f"{what}: {last_error_line(done.stderr)}")
                log.warning("the cached clone of %s is broken: cloning it again", self.location)
            elif self.path.exists():
                log.warning(
                    "the cached clone of %s %s: cloning it again",
                    self.location,
                    "is damaged"
                    if (self.path / COMPLETE_MARKER).is_file()
                    else "was never marked whole (a clone stopped before it ended, or one an"
                    " older stagecrawl made)",
                )
            await self._clone(what)

    async def _fetch(self, what: str) -> CommandResult:
        return await self._git(
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

    async def _clone(self, what: str) -> None:
        """A new clone beside the entry, renamed into place once whole."""
        building = self._leftover("clone")
        try:
            # `--` : a location that starts with a dash is a path, never an option
            done = await self._git(
                "clone", "--quiet", "--bare", "--", self.source, str(building), what=what
            )
            if done.returncode != 0:
                raise InputError(f"{what}: {last_error_line(done.stderr)}")
            (building / COMPLETE_MARKER).write_text(MARKER_TEXT)
            self._put_in_place(building)
        finally:
            if building.exists():
                await asyncio.to_thread(shutil.rmtree, building, ignore_errors=True)

    def _put_in_place(self, building: Path) -> None:
        """Rename `building` to the entry; an entry already there is moved aside first and
        removed after (a kill between the renames leaves no entry: the next run clones)."""
        old = self._leftover("old")
        if self.path.exists():
            self.path.rename(old)
        building.rename(self.path)
        fsync_dir(self.path.parent)
        shutil.rmtree(old, ignore_errors=True)

    async def _whole(self, deep: bool = False) -> bool:
        """Whether the entry is a finished clone whose every ref names an object it has (a cheap
        check: the objects a ref reaches are read by an export, see `export`); `deep` (after a
        fetch failed) also walks every object the refs reach, without the network."""
        if not (self.path / COMPLETE_MARKER).is_file():
            return False
        check = ["for-each-ref", "--format=%(objecttype)"]
        if deep:
            check = ["fsck", "--connectivity-only", "--no-dangling", "--no-progress"]
        done = await self._git(
            "--git-dir",
            str(self.path),
            *check,
            what=f"check of the cached clone of {self.location}",
        )
        return done.returncode == 0

    def _leftover(self, purpose: str) -> Path:
        """A name beside the entry that the next run recognises as left over (and removes)."""
        tail = f"{purpose}-{os.getpid()}-{secrets.token_hex(4)}"
        return self.path.with_name(f"{LEFTOVER_PREFIX}{self.path.name}.tmp-{tail}")

    def _leftovers(self) -> list[Path]:
        return sorted(self.path.parent.glob(f"{LEFTOVER_PREFIX}{self.path.name}.tmp-*"))

    async def _clear_leftovers(self) -> None:
        """Remove what a stopped or killed run left (under the entry's lock: nobody else works
        here now). A killed run's git may still be writing into its clone (git runs in its own
        session and outlives a kill -9 of stagecrawl): the clone is renamed away first, which
        makes that git fail, then removed."""
        for leftover in self._leftovers():
            trash = self._leftover("removed")
            try:
                leftover.rename(trash)
            except OSError:
                continue  # gone meanwhile
            log.info("removing %s, left by a run that was stopped", leftover.name)
            await asyncio.to_thread(shutil.rmtree, trash, ignore_errors=True)
        # git's own lock files in the entry, left by a fetch that was killed: they would make
        # every later fetch fail (`Unable to create '…/refs/heads/main.lock': File exists`).
        if self.path.is_dir():
            stale = [*self.path.glob("*.lock"), *(self.path / "refs").rglob("*.lock")]
            for path in stale:
                with contextlib.suppress(OSError):
                    path.unlink()

    @contextlib.asynccontextmanager
    async def _locked(self) -> AsyncIterator[None]:
        """The entry's lock for the block (waiting, bounded by the git timeout, for another run
        that holds it; a stop ends the wait), with the leftovers cleared first."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(self.path.with_name(f"{self.path.name}.lock"))
        waiting = lock.wait(self.timeout, f"the cached clone of {self.location}")
        await (self.stop.cancelling(waiting) if self.stop is not None else waiting)
        try:
            await self._clear_leftovers()
            yield
        finally:
            lock.release()

    async def tags(self) -> list[str]:
        done = await self._git("--git-dir", str(self.path), "tag", "--list", what="git tag")
        if done.returncode != 0:
            raise InputError(
                f"cannot list the tags of {self.location}: {last_error_line(done.stderr)}"
            )
        return sorted(t for t in done.stdout.decode().splitlines() if t)

    async def export(self, tag: str, destination: Path) -> None:
        """The tree at `tag`, written into `destination` (no work tree juggling). A tag the
        entry lists but cannot export (objects lost from the cache) is exported again from a
        new clone, once a run."""
        done = await self._archive(tag)
        if done.returncode != 0 and not self._rebuilt and await self._has_tag(tag):
            log.warning(
                "tag %s of the cached clone of %s cannot be read (%s): cloning it again",
                tag,
                self.location,
                last_error_line(done.stderr),
            )
            self._rebuilt = True
            async with self._locked():
                await self._clone(f"cannot clone {self.location}")
            done = await self._archive(tag)
        if done.returncode != 0:
            if await self._has_tag(tag):
                raise InputError(
                    f"cannot export tag {tag} of {self.location}: {last_error_line(done.stderr)}"
                )
            raise InputError(f"tag {tag} not found in {self.location}")
        with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
            archive.extractall(destination, filter="data")

    async def _archive(self, tag: str) -> CommandResult:
        return await self._git(
            "--git-dir",
            str(self.path),
            "archive",
            "--format=tar",
            f"refs/tags/{tag}",
            what=f"export of tag {tag}",
        )

    async def _has_tag(self, tag: str) -> bool:
        done = await self._git(
            "--git-dir",
            str(self.path),
            "rev-parse",
            "--verify",
            "--quiet",
            f"refs/tags/{tag}",
            what=f"git rev-parse {tag}",
        )
        return done.returncode == 0


def select_tags(
    available: list[str], wanted: list[str], pattern: str | None, all_tags: bool
) -> list[str]:
    if all_tags:
        return available
    chosen = list(wanted)
    if pattern:
        chosen += [t for t in available if fnmatch.fnmatchcase(t, pattern) and t not in chosen]
    return chosen
