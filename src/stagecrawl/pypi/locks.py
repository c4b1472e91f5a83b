"""Lock mode for Python projects: which PyPI releases a project pins, from the lock files it
commits — `requirements.txt` pins (read as pip reads them), `poetry.lock` (lock-version 1.1 to
2.1), `uv.lock` and `pylock.toml` (PEP 751) — directly or at each tag of a git repository.

There is no resolver: a project without a lock file has no pins here, and a requirement that is
not pinned with `==` is reported as unpinned, never guessed. A package that does not come from
a package index (editable, path, git, URL) is named with its version, where the lock says it,
and why it is not audited (`LockFile.not_audited`): it never passes for clean.
"""

from __future__ import annotations

import optparse
import os
import re
import shlex
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet

from stagecrawl.engine.git import GitRepo
from stagecrawl.errors import InputError
from stagecrawl.pypi.names import name_problem, normalize

REQUIREMENTS, POETRY, UV, PYLOCK = "requirements", "poetry.lock", "uv.lock", "pylock.toml"
LOCK_NAMES = ("poetry.lock", "uv.lock", "pylock.toml", "requirements.txt")
_PYLOCK_NAME = re.compile(r"^pylock\.([^.]+\.)?toml$")


@dataclass(frozen=True)
class LockedRelease:
    name: str  # normalised
    version: str
    hashes: tuple[str, ...] = ()
    where: str = ""  # the file it is pinned in, when not the lock itself (a `-r` include)
    line: int | None = None  # its line there (requirements files)


@dataclass(frozen=True)
class SkippedPin:
    """A package of a lock that is not audited, and why: it does not come from a package
    index (git, URL, path, editable…: `version` where the lock says it), or it is not pinned
    (`fails`: nothing can be said of it, so the audit fails)."""

    name: str  # the project's name, or the line itself when the line does not say it
    version: str | None
    where: str  # "requirements.txt line 6", "uv.lock"
    reason: str
    fails: bool = False


@dataclass
class LockFile:
    kind: str
    where: str
    releases: list[LockedRelease] = field(default_factory=list)
    unpinned: list[str] = field(default_factory=list)  # requirement lines without ==
    skipped: list[str] = field(default_factory=list)  # not from a package index
    not_audited: list[SkippedPin] = field(default_factory=list)  # the two above, named
    notes: list[str] = field(default_factory=list)  # what was read otherwise than asked

    def pins(self) -> list[LockedRelease]:
        """Each (name, version) once, sorted."""
        unique: dict[tuple[str, str], LockedRelease] = {}
        for release in self.releases:
            unique.setdefault((release.name, release.version), release)
        return [unique[k] for k in sorted(unique)]

    def skip(self, pin: SkippedPin, text: str) -> None:
        """A package not from a package index: named, not audited."""
        self.skipped.append(text)
        self.not_audited.append(pin)

    def unpin(self, pin: SkippedPin, text: str) -> None:
        """A requirement that is not a pin: reported, never guessed."""
        self.unpinned.append(text)
        self.not_audited.append(pin)


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


def parse_lock(
    text: str,
    path: str,
    where: str | None = None,
    file: Path | None = None,
    root: Path | None = None,
) -> LockFile:
    """Any supported lock file. Raises InputError (one line, naming `where`) when malformed.
    `file` is where the text was read from: a requirements file's `-r`/`-c` includes are read
    relative to it (none of them outside `root`, when given)."""
    where = where or path
    kind = kind_of(path, text)
    if kind == REQUIREMENTS:
        return parse_requirements(text, where, file, root)
    try:
        document = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:  # Recursion: nested too deeply
        raise InputError(f"{where} is not a {kind}: not TOML ({exc})") from None
    if kind == POETRY:
        return parse_poetry(document, where)
    if kind == UV:
        return parse_uv(document, where)
    return parse_pylock(document, where)


def read_lock(path: Path) -> LockFile:
    """A lock file from disk (a requirements file with its includes)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    return parse_lock(text, path.name, str(path), path)


def _release(
    name: Any, version: Any, where: str, hashes: list[str], line: int | None = None, at: str = ""
) -> LockedRelease:
    if not isinstance(name, str) or name_problem(name):
        raise InputError(f"{where}: a package has no valid name ({name!r})")
    if not isinstance(version, str) or not version.strip():
        raise InputError(f"{where}: package {name} has no version")
    return LockedRelease(normalize(name), version.strip(), tuple(hashes), at, line)


# -- requirements files, as pip reads them (pip/_internal/req/req_file.py) ------------------

# pip: a comment starts at `#` at the line's start or after whitespace
_COMMENT = re.compile(r"(^|\s+)#.*$")
# pip expands only `${NAME}` (upper-case letters, digits, `_`), from the environment
_ENV_VAR = re.compile(r"\$\{([A-Z0-9_]+)\}")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_VCS = ("git+", "hg+", "svn+", "bzr+")
_ARCHIVES = (".whl", ".zip", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz", ".tar")
# a pin packaging cannot read (`foo==not.a.ver`): read as a pin of an unreadable version, as
# poetry.lock, uv.lock and pylock.toml pins are, and reported by the audit
_LOOSE_PIN = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*===?\s*(?P<version>[^\s;]+)$"
)


def _option_parser() -> optparse.OptionParser:
    """The options pip reads in a requirements file (file-wide ones, and those of a
    requirement line: --hash, --config-settings, --global-option)."""
    parser = optparse.OptionParser(add_help_option=False)
    store = ("-i", "--index-url", "--only-binary", "--no-binary")
    for flags in (store[:2], store[2:3], store[3:]):
        parser.add_option(*flags)
    for flags in (
        ("--extra-index-url",),
        ("-c", "--constraint"),
        ("-r", "--requirement"),
        ("-e", "--editable"),
        ("-f", "--find-links"),
        ("--trusted-host",),
        ("--use-feature",),
        ("--no-deps-for",),
        ("--global-option",),
        ("--hash",),
        ("-C", "--config-settings"),
    ):
        parser.add_option(*flags, action="append", default=[])
    for flags in (("--no-index",), ("--prefer-binary",), ("--require-hashes",), ("--pre",)):
        parser.add_option(*flags, action="store_true")

    def refuse(_self: Any, message: str | None = None, *_: Any) -> None:
        raise ValueError(message or "bad option")

    parser.error = refuse  # type: ignore[method-assign,assignment]
    parser.exit = refuse  # type: ignore[method-assign,assignment]
    return parser


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """pip's preprocessing: `\\` continuations joined (not after a comment), comments
    removed, blank lines dropped; each line with the number of its first physical line."""
    joined: list[tuple[int, str]] = []
    pending: list[str] = []
    first = 0
    for number, line in enumerate(text.splitlines(), 1):
        if not line.endswith("\\") or _COMMENT.match(line):
            if _COMMENT.match(line):
                line = " " + line
            if pending:
                joined.append((first, "".join([*pending, line])))
                pending = []
            else:
                joined.append((number, line))
        else:
            if not pending:
                first = number
            pending.append(line.strip("\\"))
    if pending:
        joined.append((first, "".join(pending)))
    result = []
    for number, line in joined:
        line = _COMMENT.sub("", line).strip()
        if line:
            result.append((number, line))
    return result


def _break_args_options(line: str) -> tuple[str, str]:
    """pip's split of a line into the requirement and its options: the words before the first
    one starting with `-`."""
    tokens = line.split(" ")
    for position, token in enumerate(tokens):
        if token.startswith("-"):
            return " ".join(tokens[:position]).strip(), " ".join(tokens[position:])
    return line.strip(), ""


@dataclass
class _Wanted:
    """A requirement that is not a pin, waiting for a constraint to pin it."""

    name: str
    specifier: SpecifierSet
    text: str
    file: str  # the file it is in ("" for the lock itself)
    line: int

    def at(self, lock: LockFile) -> str:
        return f"{self.file or lock.where} line {self.line}"


class _RequirementsReader:
    """One requirements file and everything it includes, read as pip reads them: `-r` files
    are more requirements, `-c` files constraints (a constraint pins what a requirement names
    and leaves unpinned; alone it is not installed, so not a dependency), includes relative to
    the file that names them, a cycle read once."""

    def __init__(self, lock: LockFile, root: Path | None) -> None:
        self.lock = lock
        self.root = root.resolve() if root is not None else None
        self.read_files: set[tuple[Path, bool]] = set()
        self.wanted: list[_Wanted] = []
        self.constraints: dict[str, tuple[str, str, int]] = {}  # name → version, where, line

    def read(
        self,
        text: str,
        where: str,
        file: Path | None,
        constraint: bool,
        chain: tuple[Path, ...] = (),
    ) -> None:
        if "\x00" in text:
            raise InputError(f"{where} is not a requirements file: it holds binary data")
        lines = _logical_lines(text)
        for number, original in lines:
            line = _ENV_VAR.sub(lambda m: os.environ.get(m.group(1), m.group(0)), original)
            args, options_text = _break_args_options(line)
            at = f"{where} line {number}"
            try:
                options, _ = _option_parser().parse_args(shlex.split(options_text))
            except ValueError as exc:
                self.lock.unpin(
                    SkippedPin(
                        original, None, at, f"an option pip does not read here ({exc})", True
                    ),
                    self._line(where, number, f"{original} (option not read: {exc})"),
                )
                continue
            if args:
                self._requirement(args, original, options, at, where, number, constraint)
            elif options.editable:
                self._editable(options.editable[0], where, number, original)
            for include, nested_constraint in [
                *((r, False) for r in options.requirement),
                *((c, True) for c in options.constraint),
            ]:
                if args or options.editable:
                    break  # pip reads includes only on an option line
                self._include(include, nested_constraint, where, number, file, chain)

    def _line(self, where: str, number: int, text: str) -> str:
        """A line of the lock as `unpinned` and `skipped` say it (`line 5: …`), naming the
        included file it is in when it is not the lock itself."""
        return (
            f"line {number}: {text}"
            if where == self.lock.where
            else f"{where} line {number}: {text}"
        )

    def _include(
        self,
        target: str,
        constraint: bool,
        where: str,
        number: int,
        file: Path | None,
        chain: tuple[Path, ...],
    ) -> None:
        option = "-c" if constraint else "-r"
        at = f"{where} line {number}"
        if _URL.match(target):
            self.lock.unpin(
                SkippedPin(
                    target, None, at, f"{option} {target}: a file by URL, not fetched", True
                ),
                self._line(where, number, f"{option} {target} (a file by URL, not fetched)"),
            )
            return
        if file is None:
            self.lock.unpin(
                SkippedPin(target, None, at, f"{option} {target}: no file beside to read", True),
                self._line(where, number, f"{option} {target} (not followed: no file beside)"),
            )
            return
        path = (file.parent / target).resolve()
        if self.root is not None and not path.is_relative_to(self.root):
            self.lock.unpin(
                SkippedPin(target, None, at, f"{option} {target}: outside the tree", True),
                self._line(where, number, f"{option} {target} (not followed: outside the tree)"),
            )
            return
        if path in chain:
            cycle = " → ".join([*(p.name for p in chain), path.name])
            self.lock.notes.append(f"{at}: {option} {target} closes an include cycle ({cycle})")
            return
        if (path, constraint) in self.read_files:
            return  # read already (two files include a third): its pins once
        self.read_files.add((path, constraint))
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{at}: cannot read {option} {target}: {exc}") from None
        if self.root is None:  # as the user would write it: beside the file that names it
            label = os.path.normpath(os.path.join(os.path.dirname(where), target))
        else:
            label = _relative(path, self.root, self.lock.where)
        self.read(text, label, path, constraint, (*chain, path))

    def _editable(self, target: str, where: str, number: int, original: str) -> None:
        shown = _original_option(original, target)
        name = _egg(target) or shown
        at = f"{where} line {number}"
        self.lock.skip(
            SkippedPin(name, None, at, f"editable ({shown}): not from a package index"),
            self._line(where, number, original),
        )

    def _requirement(
        self,
        args: str,
        original: str,
        options: optparse.Values,
        at: str,
        where: str,
        number: int,
        constraint: bool,
    ) -> None:
        if _URL.match(args) or args.startswith(_VCS) or _looks_like_path(args):
            if constraint:
                return  # a URL constraint installs nothing by itself
            kind = "a VCS checkout" if args.startswith(_VCS) else "a URL"
            if not _URL.match(args) and not args.startswith(_VCS):
                kind = "a local path"
            shown = _remove_options(original)  # as written: a ${TOKEN} is not spelled out
            name = _egg(args) or shown
            self.lock.skip(
                SkippedPin(name, None, at, f"{kind} ({shown}): not from a package index"),
                self._line(where, number, original),
            )
            return
        try:
            requirement = Requirement(args)
        except InvalidRequirement as exc:
            loose = _LOOSE_PIN.match(args)
            if loose is None:
                detail = str(exc).splitlines()[0][:120]
                raise InputError(f"{where} line {number}: not a requirement ({detail})") from None
            self._pin(loose["name"], loose["version"], options, where, at, number, constraint)
            return
        if requirement.url:
            if not constraint:
                self.lock.skip(
                    SkippedPin(
                        normalize(requirement.name),
                        None,
                        at,
                        f"a direct reference ({_remove_options(original)}): not from a package"
                        " index",
                    ),
                    self._line(where, number, _remove_options(original)),
                )
            return
        specs = list(requirement.specifier)
        pinned = (
            len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version
        )
        if pinned:
            self._pin(requirement.name, specs[0].version, options, where, at, number, constraint)
        elif not constraint:  # an unpinned constraint only narrows: nothing to audit
            text = _remove_options(original)
            source = "" if where == self.lock.where else where
            self.wanted.append(
                _Wanted(normalize(requirement.name), requirement.specifier, text, source, number)
            )

    def _pin(
        self,
        name: str,
        version: str,
        options: optparse.Values,
        where: str,
        at: str,
        number: int,
        constraint: bool,
    ) -> None:
        if constraint:
            self.constraints.setdefault(normalize(name), (version, at, number))
            return
        hashes = list(options.hash)
        source = "" if where == self.lock.where else where
        self.lock.releases.append(_release(name, version, where, hashes, number, source))

    def finish(self) -> None:
        """Requirements left unpinned take the version a constraint pins (pip installs that
        one); the others are unpinned. Constraints nothing requires are said in a note."""
        used: set[str] = set()
        for wanted in self.wanted:
            pinned = self.constraints.get(wanted.name)
            if pinned is not None and wanted.specifier.contains(pinned[0], prereleases=True):
                used.add(wanted.name)
                version, at, _ = pinned
                self.lock.releases.append(
                    LockedRelease(wanted.name, version, (), wanted.file, wanted.line)
                )
                self.lock.notes.append(f"{wanted.at(self.lock)}: {wanted.text} is pinned by {at}")
                continue
            said = f"line {wanted.line}: {wanted.text}"
            self.lock.unpin(
                SkippedPin(
                    wanted.name, None, wanted.at(self.lock), f"not pinned ({wanted.text})", True
                ),
                f"{wanted.file}: {said}" if wanted.file else said,
            )
        spare = sorted(f"{n}=={v}" for n, (v, _, _) in self.constraints.items() if n not in used)
        if spare:
            self.lock.notes.append(
                f"{self.lock.where}: {len(spare)} constraint pins that no requirement names are"
                " not audited (pip installs a constraint only when a requirement needs it;"
                f" nothing is resolved here): {', '.join(spare)}"
            )


def _relative(path: Path, root: Path, where: str) -> str:
    prefix = where.rsplit(" ", 1)[0] if " " in where else ""
    relative = path.relative_to(root).as_posix()
    return f"{prefix} {relative}" if prefix else relative


def _remove_options(line: str) -> str:
    return _break_args_options(line)[0]


def _original_option(original: str, expanded: str) -> str:
    """An option's value as the file writes it (before `${VAR}` expansion), when it can be
    found; the expanded one otherwise."""
    try:
        words = shlex.split(original)
    except ValueError:
        return expanded
    for position, word in enumerate(words):
        if word in ("-e", "--editable") and position + 1 < len(words):
            return words[position + 1]
        if word.startswith("--editable="):
            return word.split("=", 1)[1]
    return expanded


def _egg(target: str) -> str | None:
    """The project a URL or path names in its `#egg=` fragment (pip's old convention)."""
    match = re.search(r"[#&]egg=([A-Za-z0-9][A-Za-z0-9._-]*)", target)
    return normalize(match.group(1)) if match else None


def _looks_like_path(text: str) -> bool:
    """pip's test for a requirement that is a path: a separator, a leading `.`, or an
    archive's name."""
    head = text.split(";", 1)[0].strip()
    if " @ " in text or "@" in head.split("/", 1)[0]:
        return False  # `name @ url`: a PEP 508 direct reference
    return "/" in head or "\\" in head or head.startswith(".") or head.endswith(_ARCHIVES)


def parse_requirements(
    text: str, where: str, file: Path | None = None, root: Path | None = None
) -> LockFile:
    """pip requirements, as pip reads them: `name==version` pins (extras, markers, `--hash`,
    `--config-settings` allowed; `${VAR}` from the environment), `-r` files read as more
    requirements and `-c` files as constraints (relative to the file naming them: `file`),
    option lines (`--index-url`…) accepted. A requirement pinned otherwise is in `unpinned`;
    an editable, VCS, URL or path line is named in `not_audited`, the rest of the file read. A
    line that is not a requirement at all is an error, as for pip."""
    lock = LockFile(REQUIREMENTS, where)
    reader = _RequirementsReader(lock, root)
    chain: tuple[Path, ...] = ()
    if file is not None:
        chain = (file.resolve(),)
        reader.read_files.add((chain[0], False))
    reader.read(text, where, file, False, chain)
    reader.finish()
    included = len(reader.read_files) > len(chain)
    if not (lock.releases or lock.unpinned or lock.skipped or included):
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
            kind = str(source.get("type"))
            lock.skip(
                _foreign(entry, where, kind, source.get("url"), source.get("resolved_reference")),
                f"{entry.get('name')} ({kind})",
            )
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


def _foreign(
    entry: dict[str, Any], where: str, kind: str, location: Any = None, commit: Any = None
) -> SkippedPin:
    """A locked package that does not come from a package index, named with its version
    (werkzeug 0.15.0 from git) and where it comes from."""
    name = entry.get("name")
    if not isinstance(name, str) or name_problem(name):
        raise InputError(f"{where}: a package has no valid name ({name!r})")
    version = entry.get("version")
    from_ = f"{kind} {location}" if isinstance(location, str) and location else kind
    if isinstance(commit, str) and commit:
        from_ += f" @ {commit}"
    return SkippedPin(
        normalize(name),
        version if isinstance(version, str) and version.strip() else None,
        where,
        f"from {from_}: not from a package index",
    )


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
            text = f"{entry.get('name')} ({kind})"
            if kind in ("editable", "virtual"):
                lock.skipped.append(text)  # the project's own code (a workspace member)
            else:
                location = source.get(kind) if isinstance(source, dict) else None
                lock.skip(_foreign(entry, where, kind, location), text)
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
            place = entry[foreign] if isinstance(entry[foreign], dict) else {}
            kind = str(place.get("type") or foreign) if foreign == "vcs" else foreign
            location, commit = place.get("url") or place.get("path"), place.get("commit-id")
            lock.skip(
                _foreign(entry, where, kind, location, commit), f"{entry.get('name')} ({foreign})"
            )
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
    caller reports a tag without a lock file; there is no resolver to make one). A requirements
    file's includes are read from the same tree, never from outside it."""
    with tempfile.TemporaryDirectory(prefix="stagecrawl-tag-") as tmp:
        tree = Path(tmp)
        await repo.export(tag, tree)
        return [
            parse_lock(
                path.read_text(encoding="utf-8", errors="replace"),
                path.name,
                f"{repo.label}@{tag} {path.name}",
                path,
                tree,
            )
            for path in find_locks(tree)
        ]
