"""Git as the lock modes of every registry use it: a bare clone in a cache folder, reused and
fetched by later runs, its tags listed, each tag's tree exported with `git archive` (no work
tree). git runs with a restricted protocol list, no terminal prompt, a timeout and the run's
stop. Moved here from crates/lock.py so the PyPI lock mode uses the same code.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import os
import re
import tarfile
from pathlib import Path

from stagecrawl.engine.commands import CommandResult, CommandTimeout, run_command
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.errors import InputError
from stagecrawl.secrets import register_url

# git may only talk these protocols: never `fd::`, `ext::` or other transports that run
# commands or wait on a file descriptor.
GIT_PROTOCOLS = "file:git:http:https:ssh"
GIT_TIMEOUT = 600.0  # a clone of a large repository over a slow link


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
    """A bare clone in the cache, reused (and fetched) by later runs."""

    def __init__(self, location: str, cache_dir: Path, stop: GracefulStop | None = None) -> None:
        # A remote's credentials (`https://TOKEN@host/…`, `https://u:pw@host/…`) are masked in
        # every message that quotes the location (git's own errors included).
        register_url(location)
        self.location = location
        self.stop = stop
        local = Path(location).expanduser()
        self.source = str(local.resolve()) if local.exists() else location
        digest = hashlib.sha256(self.source.encode()).hexdigest()[:16]
        # The name is the path's last part: never a query or fragment (`?token=…`), which would
        # be stored in REF_TAGS and written into the cache's folder name.
        path = re.split(r"[?#]", self.source, maxsplit=1)[0]
        self.label = re.sub(r"\.git$", "", path.rstrip("/").rsplit("/", 1)[-1]) or "repo"
        self.path = cache_dir.resolve() / "repos" / f"{self.label}-{digest}.git"

    async def _git(self, *args: str, what: str) -> CommandResult:
        return await run_git(["git", *args], what, stop=self.stop)

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
            raise InputError(f"{what}: {last_error_line(done.stderr)}")

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
