"""What every registry's lock files share. The TOML ones (Cargo.lock, poetry.lock, uv.lock,
pylock.toml) are a document whose packages are an array of tables: each registry reads its own
keys; the ways such a file is not one (not TOML, no packages, a format version stagecrawl does
not read), and their one-line errors, are written here. And a lock that names other files
(pip's `-r`/`-c`, a go.work's `use`) names them as `tree_namer` does at a tag."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stagecrawl.errors import InputError


def read_file(path: Path, shown: str | None = None, at: str | None = None) -> str:
    """A lock file, or a file a lock names (pip's `-r`, a go.work's `use`), as UTF-8; InputError
    ("`at`: cannot read `shown`: why", one line) when it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{f'{at}: ' if at else ''}cannot read {shown or path}: {exc}") from None


def toml_document(text: str, where: str, kind: str) -> dict[str, Any]:
    """The file's TOML document; InputError naming `where` when it is not TOML."""
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as exc:  # Recursion: nested too deeply
        raise InputError(f"{where} is not a {kind}: not TOML ({exc})") from None


def package_tables(
    document: dict[str, Any], key: str, where: str, kind: str, *, empty: bool = True
) -> list[dict[str, Any]]:
    """The document's `[[key]]` tables (`empty`: whether none at all is a lock still)."""
    entries = document.get(key)
    if not isinstance(entries, list) or not (entries or empty):
        raise InputError(f"{where} is not a {kind}: it has no [[{key}]] entries")
    if not all(isinstance(entry, dict) for entry in entries):
        raise InputError(f"{where}: a [[{key}]] entry is not a table")
    return entries


def require_format(value: Any, known: bool, where: str, field: str, readable: str) -> None:
    """The lock's format version (`value` of `field`, as the file calls it) is one stagecrawl
    reads (`known`, `readable` in words), else InputError naming `where`."""
    if not known:
        shown = "" if value is None else str(value).strip()
        raise InputError(
            f"{where}: {field} {shown or '(none)'} is not one stagecrawl reads ({readable})"
        )


Namer = Callable[[Path], str]  # how a file read is named in pins, reports and errors


def tree_namer(path: Path, root: Path, where: str) -> Namer:
    """Files of a tree named as `where` names `path` in it (a tag's "app@v1.2.0 go.work", the
    file it names "app@v1.2.0 svc/go.mod"), not by the folder they were read from (a tag's is
    a temporary one, gone when the report is read); a file outside the tree, by its path."""
    top = root.resolve()
    named = path.resolve().relative_to(top).as_posix()
    prefix = where[: -len(named)] if where.endswith(named) else f"{where} "

    def name(file: Path) -> str:
        resolved = file.resolve()
        inside = resolved.is_relative_to(top)
        return prefix + resolved.relative_to(top).as_posix() if inside else str(file)

    return name
