"""Lock mode for Python projects: which PyPI releases a project pins, from the lock files it
commits — `requirements.txt` pins (read as pip reads them), `poetry.lock` (lock-version 1.1 to
2.1), `uv.lock` and `pylock.toml` (PEP 751) — directly or at each tag of a git repository.

Each is read into the kernel's `LockInput`. There is no resolver: a project without a lock file
has no pins here, and a requirement that is not pinned with `==` is reported as unpinned, never
guessed. A package that does not come from a package index (editable, path, git, URL) is named
with its version, where the lock says it, and why it is not audited (`LockInput.unaudited`): it
never passes for clean.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pip_requirements_parser as pip_req
from packaging.specifiers import SpecifierSet

from stagecrawl import jsoncodec
from stagecrawl.errors import InputError
from stagecrawl.kernel.lockfiles import (
    package_tables,
    read_file,
    require_format,
    toml_document,
    tree_namer,
)
from stagecrawl.kernel.registry import LockInput, Pin
from stagecrawl.pypi.declaration import DECLARATION
from stagecrawl.pypi.names import name_problem, normalize
from stagecrawl.sca.audit import Unaudited

REQUIREMENTS, POETRY, UV, PYLOCK = "requirements", "poetry.lock", "uv.lock", "pylock.toml"
NOT_FROM_INDEX = "not from a package index"


def kind_of(path: str, text: str) -> str:
    """Which format a lock file is, by its name (the declaration's patterns, any `.txt` or `.in`
    a requirements file), else by its content."""
    name = path.rsplit("/", 1)[-1]
    kind = DECLARATION.lock_kind(name)
    if kind is not None:
        return kind
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
    names = ", ".join(DECLARATION.lock_patterns)
    raise InputError(f"{path}: not a lock file stagecrawl reads ({names})")


def parse_lock(
    text: str,
    path: str,
    where: str | None = None,
    file: Path | None = None,
    root: Path | None = None,
) -> LockInput:
    """Any supported lock file. Raises InputError (one line, naming `where`) when malformed.
    `file` is where the text was read from: a requirements file's `-r`/`-c` includes are read
    relative to it (none of them outside `root`, when given)."""
    where = where or path
    kind = kind_of(path, text)
    if kind == REQUIREMENTS:
        return parse_requirements(text, where, file, root)
    document = toml_document(text, where, kind)
    if kind == POETRY:
        return parse_poetry(document, where)
    if kind == UV:
        return parse_uv(document, where)
    return parse_pylock(document, where)


def _name(name: Any, where: str) -> str:
    if not isinstance(name, str) or name_problem(name, bounded=False):
        raise InputError(f"{where}: a package has no valid name ({name!r})")
    return normalize(name)


def _pin(name: Any, version: Any, where: str, line: int | None = None) -> Pin:
    key = _name(name, where)
    if not isinstance(version, str) or not version.strip():
        raise InputError(f"{where}: package {name} has no version")  # as the lock spells it
    return Pin(key, version.strip(), where, line)


# -- requirements files, as pip reads them -------------------------------------------------
# pip-requirements-parser (pip's own req_file.py and req constructors) makes the logical lines
# (continuations, comments), splits a line into its requirement and its options, and tells
# what a requirement is (a name and specifier, a URL, a VCS checkout, a path, an editable).
# Kept here because the library does not do them (it reads its files itself, follows includes
# without a cycle check, and knows pip 22's options): `${VAR}` expansion, the options pip
# added since, includes (each once, never outside the tree nor over the network), constraints
# pinning requirements, and what is not audited and why.

# pip expands only `${NAME}` (upper-case letters, digits, `_`), from the environment
_ENV_VAR = re.compile(r"\$\{([A-Z0-9_]+)\}")
# a pin packaging cannot read (`foo==not.a.ver`): read as a pin of an unreadable version, as
# poetry.lock, uv.lock and pylock.toml pins are, and reported by the audit
_LOOSE_PIN = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*===?\s*(?P<version>[^\s;]+)$"
)
_LINE_ERRORS = (pip_req.OptionParsingError, ValueError)  # ValueError: shlex, unclosed quote


@functools.cache
def _parser() -> Any:
    """pip's requirements-file options as pip reads them now, built once for every line."""
    parser = pip_req.build_parser()
    for gone in (*pip_req.LEGACY_OPTIONS_DEST, "install_options"):  # pip reads them no more
        parser.remove_option(pip_req.OPT_BY_OPTIONS_DEST[gone])
    parser.add_option("-C", "--config-settings", action="append", dest="config_settings")
    parser.add_option("--no-deps-for", action="append", dest="no_deps_for")
    return parser


def _parse_line(line: str) -> tuple[str, Any]:
    """A logical line's requirement (the words before the first option) and options."""
    args, options = pip_req.break_args_options(line)
    parser = _parser()
    # One parser for every line (building one took 0.12 ms: 20,000 pins with `--hash` spent
    # 10 s on them), each line's options starting from fresh defaults: pip's list options
    # default to a list that appending options would otherwise grow from line to line.
    values = parser.get_default_values()
    if not options.strip():
        return args, values  # most lines, a name and a pin: nothing parsed, nothing changed
    for name, default in vars(values).items():
        if isinstance(default, list):
            setattr(values, name, list(default))
    return args, parser.parse_args(shlex.split(options), values)[0]


def _as_written(original: str, target: str) -> str:
    """A requirement or `-e` target as the file writes it, before `${VAR}` expansion (a token
    is not spelled out in a report); the expanded one when the original cannot be split."""
    try:
        args, options = _parse_line(original)
    except _LINE_ERRORS:
        return target
    return str(args or (options.editables or [target])[0])


def _kind(requirement: Any, editable: bool) -> str:
    """Where a requirement that is no index pin comes from, in words."""
    if editable:
        return "editable"
    if requirement.req is not None and requirement.req.url:
        return "a direct reference"  # name @ url (PEP 508)
    if requirement.is_vcs_url:
        return "a VCS checkout"
    return "a URL" if requirement.is_url else "a local path"


class _RequirementsReader:
    """One requirements file and everything it includes (see `parse_requirements`)."""

    def __init__(self, lock: LockInput, root: Path | None, file: Path | None) -> None:
        self.lock = lock
        self.root = root.resolve() if root is not None else None
        self.name = None if root is None or file is None else tree_namer(file, root, lock.where)
        self.read_files: set[tuple[Path, bool]] = set()
        # requirements that are not pins: (name, specifier, text, file, line), for a constraint
        self.wanted: list[tuple[str, SpecifierSet, str, str, int]] = []
        self.constraints: dict[str, tuple[str, str]] = {}  # name → (version, where)

    def not_audited(self, name: str, at: str, reason: str, fails: bool = False) -> None:
        self.lock.unaudited.append(Unaudited(name, None, at, reason, fails))

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
        for item in pip_req.preprocess(text):
            if isinstance(item, pip_req.CommentLine):
                continue
            number, original = item
            at = f"{where} line {number}"
            line = _ENV_VAR.sub(lambda m: os.environ.get(m[1], m[0]), original)
            try:
                args, options = _parse_line(line)
            except _LINE_ERRORS as exc:
                why = str(exc).rsplit("error: ", 1)[-1].strip()
                self.not_audited(original, at, f"an option pip does not read here ({why})", True)
                continue
            if args or options.editables:
                self._requirement(args, options, original, where, number, constraint)
            elif options.requirements:  # pip follows one include a line, `-r` before `-c`
                self._include(options.requirements[0], False, where, number, file, chain)
            elif options.constraints:
                self._include(options.constraints[0], True, where, number, file, chain)

    def _include(
        self,
        target: str,
        constraint: bool,
        where: str,
        number: int,
        file: Path | None,
        chain: tuple[Path, ...],
    ) -> None:
        option, at = ("-c" if constraint else "-r"), f"{where} line {number}"
        path = None if file is None else (file.parent / target).resolve()
        why = None
        if pip_req.SCHEME_RE.search(target):
            why = "a file by URL, not fetched"
        elif path is None:
            why = "no file beside to read"
        elif self.root is not None and not path.is_relative_to(self.root):
            why = "outside the tree"
        if why is not None or path is None:
            self.not_audited(target, at, f"{option} {target}: {why}", True)
            return
        if path in chain:
            cycle = " → ".join([*(p.name for p in chain), path.name])
            self.lock.notes.append(f"{at}: {option} {target} closes an include cycle ({cycle})")
            return
        if (path, constraint) in self.read_files:
            return  # read already (two files include a third): its pins once
        self.read_files.add((path, constraint))
        text = read_file(path, f"{option} {target}", at)
        if self.name is None:  # as the user would write it: beside the file that names it
            label = os.path.normpath(os.path.join(os.path.dirname(where), target))
        else:  # a tag's tree: as the tag names its files ("repo@tag sub/requirements.txt")
            label = self.name(path)
        self.read(text, label, path, constraint, (*chain, path))

    def _requirement(
        self, args: str, options: Any, original: str, where: str, number: int, constraint: bool
    ) -> None:
        at, editable = f"{where} line {number}", not args
        target = args or options.editables[0]
        shown = _as_written(original, target)
        build = pip_req.build_editable_req if editable else pip_req.build_install_req
        try:
            requirement = build(target)
        except (pip_req.InstallationError, ValueError) as exc:
            if editable:  # pip could not name it either: named as written
                self.not_audited(shown, at, f"editable ({shown}): {NOT_FROM_INDEX}")
                return
            loose = _LOOSE_PIN.match(args)
            if loose is None:
                detail = re.sub(r"^Invalid requirement:[\s:]*", "", str(exc).splitlines()[0])
                raise InputError(f"{at}: not a requirement ({detail[:120]})") from None
            self._pinned(loose["name"], loose["version"], where, number, constraint)
            return
        if editable or requirement.link is not None:
            # a URL or path constraint installs nothing by itself; an editable one is named
            if editable or not constraint:
                name = normalize(requirement.name) if requirement.name else shown
                kind = _kind(requirement, editable)
                self.not_audited(name, at, f"{kind} ({shown}): {NOT_FROM_INDEX}")
            return
        name, specifier = requirement.req.name, requirement.req.specifier
        specs = list(specifier)
        if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
            self._pinned(name, specs[0].version, where, number, constraint)
        elif not constraint:  # an unpinned constraint only narrows: nothing to audit
            self.wanted.append((normalize(name), specifier, shown, where, number))

    def _pinned(self, name: str, version: str, where: str, number: int, constraint: bool) -> None:
        if constraint:
            self.constraints.setdefault(normalize(name), (version, f"{where} line {number}"))
        else:
            self.lock.pins.append(_pin(name, version, where, number))

    def finish(self) -> None:
        """Requirements left unpinned take the version a constraint pins (pip installs that
        one); the others are unpinned. Constraints nothing requires are said in a note."""
        used: set[str] = set()
        for name, specifier, text, where, number in self.wanted:
            at = f"{where} line {number}"
            pinned = self.constraints.get(name)
            if pinned is not None and specifier.contains(pinned[0], prereleases=True):
                used.add(name)
                self.lock.pins.append(Pin(name, pinned[0], where, number))
                self.lock.notes.append(f"{at}: {text} is pinned by {pinned[1]}")
            else:
                self.not_audited(name, at, f"not pinned ({text})", True)
        spare = sorted(f"{n}=={v}" for n, (v, _) in self.constraints.items() if n not in used)
        if spare:
            self.lock.notes.append(
                f"{self.lock.where}: {len(spare)} constraint pins that no requirement names are"
                " not audited (pip installs a constraint only when a requirement needs it;"
                f" nothing is resolved here): {', '.join(spare)}"
            )


def parse_requirements(
    text: str, where: str, file: Path | None = None, root: Path | None = None
) -> LockInput:
    """pip requirements, as pip reads them: `name==version` pins (extras, markers, `--hash`,
    `--config-settings` allowed; `${VAR}` from the environment), option lines (`--index-url`…)
    accepted; `-r` files are more requirements, `-c` files constraints (a constraint pins what
    a requirement names and leaves unpinned; alone it is not installed, so not a dependency),
    each relative to the file naming it (`file`), a cycle read once. A requirement pinned
    otherwise is unpinned (it fails the audit); an editable, VCS, URL or path line is named as
    not audited, the rest of the file read. A line that is no requirement is an error."""
    lock = LockInput(where, REQUIREMENTS)
    reader = _RequirementsReader(lock, root, file)
    chain = () if file is None else (file.resolve(),)
    reader.read_files.update((path, False) for path in chain)
    reader.read(text, where, file, False, chain)
    reader.finish()
    if not (lock.pins or lock.unaudited or len(reader.read_files) > len(chain)):
        raise InputError(f"{where} is not a requirements file: it names no requirement")
    return lock


# -- poetry.lock, uv.lock, pylock.toml -----------------------------------------------------


def _foreign(
    entry: dict[str, Any], where: str, kind: str, location: Any = None, commit: Any = None
) -> Unaudited:
    """A locked package that does not come from a package index, named with its version
    (werkzeug 0.15.0 from git) and where it comes from."""
    from_ = f"{kind} {location}" if isinstance(location, str) and location else kind
    if isinstance(commit, str) and commit:
        from_ += f" @ {commit}"
    why = f"from {from_}: {NOT_FROM_INDEX}"
    return Unaudited(
        _name(entry.get("name"), where), jsoncodec.text(entry.get("version")), where, why
    )


def parse_poetry(document: dict[str, Any], where: str) -> LockInput:
    """poetry.lock 1.1 through 2.1: packages from an index (not git, directory, file, url)."""
    metadata = document.get("metadata")
    version = metadata.get("lock-version") if isinstance(metadata, dict) else None
    known = re.fullmatch(r"[12]\.\d+", str(version)) is not None
    require_format(version, known, where, "poetry.lock lock-version", "1.x, 2.x")
    lock = LockInput(where, POETRY)
    for entry in package_tables(document, "package", where, POETRY):
        source = entry.get("source")
        if isinstance(source, dict) and source.get("type") in ("git", "directory", "file", "url"):
            kind, location = str(source["type"]), source.get("url")
            lock.unaudited.append(
                _foreign(entry, where, kind, location, source.get("resolved_reference"))
            )
        else:
            lock.pins.append(_pin(entry.get("name"), entry.get("version"), where))
    return lock


def parse_uv(document: dict[str, Any], where: str) -> LockInput:
    """uv.lock version 1 (with or without `revision`): registry packages only."""
    version = document.get("version")
    require_format(version, version == 1, where, "uv.lock version", "1")
    lock = LockInput(where, UV)
    for entry in package_tables(document, "package", where, UV):
        source = entry.get("source")
        if isinstance(source, dict) and "registry" in source:
            lock.pins.append(_pin(entry.get("name"), entry.get("version"), where))
            continue
        kind = next(iter(source), "no source") if isinstance(source, dict) else "no source"
        if kind not in ("editable", "virtual"):  # those: the project's own code (a workspace)
            location = source.get(kind) if isinstance(source, dict) else None
            lock.unaudited.append(_foreign(entry, where, kind, location))
    return lock


def parse_pylock(document: dict[str, Any], where: str) -> LockInput:
    """PEP 751 lock-version 1.x: packages from an index (not vcs, directory or archive)."""
    version = document.get("lock-version")
    known = re.fullmatch(r"1(\.\d+)?", str(version)) is not None
    require_format(version, known, where, "pylock lock-version", "1.x")
    lock = LockInput(where, PYLOCK)
    for entry in package_tables(document, "packages", where, PYLOCK):
        foreign = next((k for k in ("vcs", "directory", "archive") if k in entry), None)
        if foreign is None:
            lock.pins.append(_pin(entry.get("name"), entry.get("version"), where))
            continue
        place = entry[foreign] if isinstance(entry[foreign], dict) else {}
        kind = str(place.get("type") or foreign) if foreign == "vcs" else foreign
        location, commit = place.get("url") or place.get("path"), place.get("commit-id")
        lock.unaudited.append(_foreign(entry, where, kind, location, commit))
    return lock
