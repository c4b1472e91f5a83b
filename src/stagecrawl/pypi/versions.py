"""PEP 440 versions through `packaging`. A version string that does not parse (`unknown`,
`.9`) is kept as PyPI lists it, reported, sorted below every valid one and never matched by an
advisory range."""

from __future__ import annotations

from functools import lru_cache

from packaging.version import InvalidVersion, Version


@lru_cache(maxsize=65536)
def parse(text: str) -> Version | None:
    """The PEP 440 version, or None when `text` is not one."""
    try:
        return Version(text)
    except InvalidVersion:
        return None


def is_valid(text: str) -> bool:
    return parse(text) is not None


def version_key(version: str) -> Version | str:
    """What two spellings of one version share (PEP 440 equality: 3.13 == 3.13.0); an invalid
    version is only equal to itself."""
    return parse(version) or version


def sort_key(text: str) -> tuple[int, Version | str]:
    """Invalid versions first (below every valid one), among themselves by their text."""
    parsed = parse(text)
    return (0, text) if parsed is None else (1, parsed)


def is_final(text: str) -> bool:
    """A final release (no pre-, dev- part; post-releases count as final, as pip sees them)."""
    parsed = parse(text)
    return parsed is not None and not parsed.is_prerelease


def normalised(version: str) -> str:
    """The PEP 440 normal form (`v23.9.0` → `23.9.0`, `2.0.0RC1` → `2.0.0rc1`, `3.0-1` →
    `3.0.post1`); a version that is not PEP 440 as written."""
    parsed = parse(version)
    return version if parsed is None else str(parsed)
