"""Crate name identity: validation, the dedup key, index paths and spelling variants.

crates.io compares names case-insensitively with `-` equal to `_`, but the sparse index and the
API serve a crate under its real spelling (lowercased in the index path). So there are two
things: the identity key (dedup only) and the real spelling (lookups and storage).
"""

from __future__ import annotations

import hashlib
import re

from stagecrawl.errors import InputError

MAX_NAME_LENGTH = 64
_VALID = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")


def validate_name(name: str) -> str:
    """Return `name` if crates.io could have published it, else raise InputError.

    Runs before any URL or path is built from the name, so `../x` or `a/b` never reach the wire.
    """
    shown = name if len(name) <= 80 else name[:80] + "…"
    if not name:
        raise InputError("invalid crate name '': empty")
    if len(name) > MAX_NAME_LENGTH:
        raise InputError(f"invalid crate name {shown!r}: longer than {MAX_NAME_LENGTH} characters")
    if not name.isascii() or not _VALID.match(name):
        raise InputError(
            f"invalid crate name {shown!r}: use ASCII letters, digits, '-' and '_',"
            " starting with a letter"
        )
    return name


def identity_key(name: str) -> str:
    """The dedup key: lowercase, `_` folded to `-` (`Serde_JSON` and `serde-json` are one)."""
    return name.lower().replace("_", "-")


def product_key(real_name: str) -> str:
    return real_name.lower()


def event_id(name: str, version: str) -> bytes:
    """The LIST primary key: sha256 of `identity-key@version`, 32 raw bytes."""
    return hashlib.sha256(f"{identity_key(name)}@{version}".encode()).digest()


def index_path(name: str) -> str:
    """The sparse-index path of a crate (cargo's rule, on the lowercased name)."""
    n = validate_name(name).lower()
    if len(n) == 1:
        return f"1/{n}"
    if len(n) == 2:
        return f"2/{n}"
    if len(n) == 3:
        return f"3/{n[0]}/{n}"
    return f"{n[0:2]}/{n[2:4]}/{n}"


def spelling_variants(name: str) -> list[str]:
    """The spellings to try in the index, the given one first; at most three requests."""
    variants = [name, name.replace("-", "_"), name.replace("_", "-")]
    seen: list[str] = []
    for variant in variants:
        if variant.lower() not in [s.lower() for s in seen]:
            seen.append(variant)
    return seen
