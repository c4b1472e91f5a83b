"""Crate name identity: validation, the dedup key, index paths and spelling variants.

crates.io compares names case-insensitively with `-` equal to `_`, but the sparse index and the
API serve a crate under its real spelling (lowercased in the index path). So there are two
things: the identity key (dedup only) and the real spelling (lookups and storage).
"""

from __future__ import annotations

import hashlib
import re

from stagecrawl.crates.declaration import NAMES
from stagecrawl.errors import InputError

MAX_NAME_LENGTH = NAMES.bounds.name  # crates.io's limit, the columns' (declared once)
_VALID = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
MAX_VERSION_LENGTH = 100  # the width of stagecrawl's VERSION columns
# SemVer 2.0.0 as crates.io checks a published version (the `semver` crate's
# Version::parse): no leading zero in a number nor in a numeric pre-release identifier, no
# empty identifier. The pattern is semver.org's own; crates/semver.py orders versions and is
# lenient on purpose, this one decides what may enter the queue.
_NUMBER = r"0|[1-9][0-9]*"
_PRE_PART = r"0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*"
_SEMVER = re.compile(
    rf"^(?:{_NUMBER})\.(?:{_NUMBER})\.(?:{_NUMBER})"
    rf"(?:-(?:{_PRE_PART})(?:\.(?:{_PRE_PART}))*)?"
    r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)
U64_MAX = 2**64 - 1  # each of MAJOR.MINOR.PATCH is a u64 in cargo


def validate_name(name: str) -> str:
    """Return `name` if crates.io could have published it, else raise InputError.

    Runs before any URL or path is built from the name, so `../x` or `a/b` never reach the wire.
    """
    shown = name if len(name) <= 80 else name[:80] + "…"
    if not name:
        raise InputError("invalid crate name '': empty")
    if len(name) > MAX_NAME_LENGTH:
        raise InputError(f"invalid crate name {shown!r}: longer than {MAX_NAME_LENGTH} characters")
    # fullmatch: `$` would let a final newline through
    if not name.isascii() or not _VALID.fullmatch(name):
        raise InputError(
            f"invalid crate name {shown!r}: use ASCII letters, digits, '-' and '_',"
            " starting with a letter"
        )
    return name


def validate_version(version: str, crate: str) -> str:
    """Return `version` if crates.io could have published it for `crate` (SemVer 2.0.0),
    else raise InputError naming both."""
    shown = version if len(version) <= 80 else version[:80] + "…"
    if len(version) > MAX_VERSION_LENGTH:
        reason = f"longer than {MAX_VERSION_LENGTH} characters"
    elif not version.isascii() or not _SEMVER.fullmatch(version):
        reason = "not a semantic version (MAJOR.MINOR.PATCH[-PRE][+BUILD], no leading zeros)"
    elif len(version) >= 20 and any(  # (2^64 - 1 has 20 digits: a shorter one fits)
        int(n) > U64_MAX for n in version.split("+")[0].split("-")[0].split(".")
    ):
        reason = "a number is larger than 2^64 - 1"
    else:
        return version
    raise InputError(f"invalid version {shown!r} of crate {crate!r}: {reason}")


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
