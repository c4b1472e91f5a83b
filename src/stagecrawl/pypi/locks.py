"""Lock mode for Python projects: which PyPI releases a project pins, from the lock files it
commits — `requirements.txt` pins (`==`, hashes allowed), `poetry.lock` (lock-version 1.1 to
2.1), `uv.lock` and `pylock.toml` (PEP 751) — directly or at each tag of a git repository.

There is no resolver: a project without a lock file has no pins here, and a requirement that is
not pinned with `==` is reported as unpinned, never guessed. Packages that do not come from a
package index (editable, path, git, URL) are reported as skipped.
"""

from __future__ import annotations

import re
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from stagecrawl.engine.git import GitRepo
from stagecrawl.errors import InputError
from stagecrawl.pypi.names import name_problem, normalize

REQUIREMENTS, POETRY, UV, PYLOCK = "requirements", "poetry.lock", "uv.lock", "pylock.toml"
LOCK_NAMES = ("poetry.lock", "uv.lock", "pylock.toml", "requirements.txt")
_PYLOCK_NAME = re.compile(r"^pylock\.([^.]+\.)?toml$")
_HASH_OPTION = re.compile(r"\s--hash[=\s]\s*(\S+)")


@dataclass(frozen=True)
class LockedRelease:
    name: str  # normalised
    version: str
    hashes: tuple[str, ...] = ()


@dataclass
class LockFile:
    kind: str
    where: str
    releases: list[LockedRelease] = field(default_factory=list)
    unpinned: list[str] = field(default_factory=list)  # requirement lines without ==
    skipped: list[str] = field(default_factory=list)  # not from a package index

    def pins(self) -> list[LockedRelease]:
        """Each (name, version) once, sorted."""
        unique = {(r.name, r.version): r for r in self.releases}
        return [unique[k] for k in sorted(unique)]


def kind_of(path: str, text: str) -> str:
    """Which format a lock file is, by its name, else by its content."""
    name = path.rsplit("/", 1)[-1]
    if name == "poetry.lock":
        return POETRY
    if name == "uv.lock":
        return UV
    if _PYLOCK_NAME.match(name):
        return PYLOCK
    if name.endswith((".txt", ".in")):
        return REQUIREMENTS
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return REQUIREMENTS
    except RecursionError as exc:  # TOML nested too deeply to read: not a lock file either
        raise InputError(f"{path}: not a lock file stagecrawl reads ({exc})") from None
    if "lock-version" in document:
        return PYLOCK
    if isinstance(document.get("metadata"), dict) and "lock-version" in document["metadata"]:
        return POETRY
    if "version" in document and "package" in document:
        return UV
    raise InputError(f"{path}: not a lock file stagecrawl reads ({', '.join(LOCK_NAMES)})")


def parse_lock(text: str, path: str, where: str | None = None) -> LockFile:
    """Any supported lock file. Raises InputError (one line, naming `where`) when malformed."""
    where = where or path
    kind = kind_of(path, text)
    if kind == REQUIREMENTS:
        return parse_requirements(text, where)
    try:
        document = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:  # Recursion: nested too deeply
        raise InputError(f"{where} is not a {kind}: not TOML ({exc})") from None
    if kind == POETRY:
        return parse_poetry(document, where)
    if kind == UV:
        return parse_uv(document, where)
    return parse_pylock(document, where)


def _release(name: Any, version: Any, where: str, hashes: list[str]) -> LockedRelease:
    if not isinstance(name, str) or name_problem(name):
        raise InputError(f"{where}: a package has no valid name ({name!r})")
    if not isinstance(version, str) or not version.strip():
        raise InputError(f"{where}: package {name} has no version")
    return LockedRelease(normalize(name), version.strip(), tuple(hashes))


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Lines with `\\` continuations joined and comments removed, with their first line number."""
    result: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = pending + line
        pending = ""
        # pip: a comment starts at `#` at the line start or after whitespace
        whole = re.sub(r"(^|\s)#.*$", "", whole).strip()
        if whole:
            result.append((start, whole))
    if pending.strip():
        result.append((start, re.sub(r"(^|\s)#.*$", "", pending).strip()))
    return result


def parse_requirements(text: str, where: str) -> LockFile:
    """pip requirements: `name==version` pins (extras, markers and `--hash` options allowed).
    Lines pinned otherwise are reported in `unpinned`; `-e`, URLs and paths in `skipped`;
    options such as `-r` or `--index-url` are reported, not followed. A line that is not a
    requirement at all is an error."""
    lock = LockFile(REQUIREMENTS, where)
    if "\x00" in text:
        raise InputError(f"{where} is not a requirements file: it holds binary data")
    for number, line in _logical_lines(text):
        hashes = _HASH_OPTION.findall(" " + line)
        requirement_text = _HASH_OPTION.sub("", " " + line).strip()
        if requirement_text.startswith("-"):
            option = requirement_text.split()[0]
            if option in ("-e", "--editable"):
                lock.skipped.append(f"line {number}: {requirement_text}")
            else:
                lock.unpinned.append(f"line {number}: {requirement_text} (option not followed)")
            continue
        if not requirement_text:
            continue
        try:
            requirement = Requirement(requirement_text)
        except InvalidRequirement as exc:
            detail = str(exc).splitlines()[0][:120]
            raise InputError(f"{where} line {number}: not a requirement ({detail})") from None
        if requirement.url:
            lock.skipped.append(f"line {number}: {requirement.name} @ {requirement.url}")
            continue
        specs = list(requirement.specifier)
        pinned = (
            len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version
        )
        if not pinned:
            lock.unpinned.append(f"line {number}: {requirement_text}")
            continue
        lock.releases.append(_release(requirement.name, specs[0].version, where, hashes))
    if not lock.releases and not lock.unpinned and not lock.skipped:
        raise InputError(f"{where} is not a requirements file: it names no requirement")
    return lock


def parse_poetry(document: dict[str, Any], where: str) -> LockFile:
    """poetry.lock 1.1 (hashes in `[metadata.files]`) through 2.1 (`files` per package)."""
    metadata = document.get("metadata")
    version = str(metadata.get("lock-version", "")) if isinstance(metadata, dict) else ""
    if not re.match(r"^[12]\.\d+$", version):
        raise InputError(
            f"{where}: poetry.lock lock-version {version or '(none)'} is not one stagecrawl reads"
            " (1.x, 2.x)"
        )
    packages = document.get("package")
    if not isinstance(packages, list):
        raise InputError(f"{where} is not a poetry.lock: it has no [[package]] entries")
    assert isinstance(metadata, dict)
    old_files = metadata.get("files") if isinstance(metadata.get("files"), dict) else {}
    lock = LockFile(POETRY, where)
    for entry in packages:
        if not isinstance(entry, dict):
            raise InputError(f"{where}: a [[package]] entry is not a table")
        source = entry.get("source")
        if isinstance(source, dict) and source.get("type") in ("git", "directory", "file", "url"):
            lock.skipped.append(f"{entry.get('name')} ({source.get('type')})")
            continue
        name = entry.get("name")
        files = entry.get("files") or []
        if not files and isinstance(name, str):
            files = (old_files or {}).get(name, [])
        if not isinstance(files, list):
            raise InputError(f"{where}: {name!r}: `files` is not a list")
        hashes = [str(f["hash"]) for f in files if isinstance(f, dict) and "hash" in f]
        lock.releases.append(_release(entry.get("name"), entry.get("version"), where, hashes))
    return lock


def parse_uv(document: dict[str, Any], where: str) -> LockFile:
    """uv.lock version 1 (with or without `revision`): registry packages only."""
    if document.get("version") != 1:
        raise InputError(
            f"{where}: uv.lock version {document.get('version')!r} is not one stagecrawl reads (1)"
        )
    packages = document.get("package")
    if not isinstance(packages, list):
        raise InputError(f"{where} is not a uv.lock: it has no [[package]] entries")
    lock = LockFile(UV, where)
    for entry in packages:
        if not isinstance(entry, dict):
            raise InputError(f"{where}: a [[package]] entry is not a table")
        source = entry.get("source")
        if not isinstance(source, dict) or "registry" not in source:
            kind = next(iter(source), "no source") if isinstance(source, dict) else "no source"
            lock.skipped.append(f"{entry.get('name')} ({kind})")
            continue
        hashes: list[str] = []
        for dist in _dists(entry, where):
            if isinstance(dist, dict) and isinstance(dist.get("hash"), str):
                hashes.append(dist["hash"])
        lock.releases.append(_release(entry.get("name"), entry.get("version"), where, hashes))
    return lock


def _dists(entry: dict[str, Any], where: str) -> list[Any]:
    """A uv.lock or pylock.toml package's sdist and wheels (whose hashes it records)."""
    wheels = entry.get("wheels") or []
    if not isinstance(wheels, list):
        raise InputError(f"{where}: {entry.get('name')!r}: `wheels` is not a list")
    return [entry.get("sdist"), *wheels]


def parse_pylock(document: dict[str, Any], where: str) -> LockFile:
    """PEP 751 lock-version 1.x: packages from an index (not vcs, directory or archive)."""
    version = str(document.get("lock-version", ""))
    if not re.match(r"^1(\.\d+)?$", version):
        raise InputError(
            f"{where}: pylock lock-version {version or '(none)'} is not one stagecrawl reads (1.x)"
        )
    packages = document.get("packages")
    if not isinstance(packages, list):
        raise InputError(f"{where} is not a pylock.toml: it has no [[packages]] entries")
    lock = LockFile(PYLOCK, where)
    for entry in packages:
        if not isinstance(entry, dict):
            raise InputError(f"{where}: a [[packages]] entry is not a table")
        foreign = next((k for k in ("vcs", "directory", "archive") if k in entry), None)
        if foreign is not None:
            lock.skipped.append(f"{entry.get('name')} ({foreign})")
            continue
        hashes: list[str] = []
        for dist in _dists(entry, where):
            if isinstance(dist, dict) and isinstance(dist.get("hashes"), dict):
                hashes += [f"{k}:{v}" for k, v in dist["hashes"].items()]
        lock.releases.append(_release(entry.get("name"), entry.get("version"), where, hashes))
    return lock


def find_locks(tree: Path) -> list[Path]:
    """The lock files at the top of a tree, in LOCK_NAMES order (pylock.*.toml included)."""
    found = [tree / name for name in LOCK_NAMES if (tree / name).is_file()]
    found += sorted(p for p in tree.glob("pylock.*.toml") if p.is_file())
    return found


async def locks_at_tag(repo: GitRepo, tag: str) -> list[LockFile]:
    """Every lock file committed at the top of the tree at `tag` (none is not an error: the
    caller reports a tag without a lock file; there is no resolver to make one)."""
    with tempfile.TemporaryDirectory(prefix="stagecrawl-tag-") as tmp:
        tree = Path(tmp)
        await repo.export(tag, tree)
        return [
            parse_lock(
                path.read_text(encoding="utf-8", errors="replace"),
                path.name,
                f"{repo.label}@{tag} {path.name}",
            )
            for path in find_locks(tree)
        ]
