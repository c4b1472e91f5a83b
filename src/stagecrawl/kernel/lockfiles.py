"""What every registry's TOML lock files share (Cargo.lock, poetry.lock, uv.lock,
pylock.toml): a TOML document whose packages are an array of tables. Each registry reads its
own keys; the ways such a file is not one (not TOML, no packages, a format version stagecrawl
does not read), and their one-line errors, are written here."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from typing import Any

from stagecrawl.errors import InputError


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


def require_format(
    value: Any, reads: Callable[[str], object], where: str, field: str, readable: str
) -> None:
    """The lock's format version (`field`, as the file calls it) is one stagecrawl reads
    (`reads` of its text, `readable` in words), else InputError naming `where`."""
    text = "" if value is None else str(value)
    if not reads(text):
        shown = text.strip() or "(none)"
        raise InputError(f"{where}: {field} {shown} is not one stagecrawl reads ({readable})")
