"""Go's module paths and versions as golang.org/x/mod defines them (semver, module/pseudo.go,
module.CheckPath, the proxy's `!` case-encoding). Hand-written: no Python package implements
x/mod's rules; tests/go/test_rules.py checks them against independent sources."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from stagecrawl.errors import InputError
from stagecrawl.go.declaration import NAME_MAX

_SEMVER = re.compile(
    r"^v?(0|[1-9]\d*)(?:\.(0|[1-9]\d*)(?:\.(0|[1-9]\d*)(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?)?)?$"
)
_PSEUDO = re.compile(
    r"^v[0-9]+\.(0\.0-|\d+\.\d+-([^+]*\.)?0\.)\d{14}-[A-Za-z0-9]+(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$"
)
_BAD_PRERELEASE_NUMBER = re.compile(r"(^|\.)0\d+(\.|$)")


@dataclass(frozen=True, order=True)
class GoVersion:
    """A Go semantic version ordered as x/mod's semver.Compare (OSV's bounds lack the `v`)."""

    key: tuple[Any, ...]
    text: str = field(compare=False)

    @classmethod
    def parse(cls, text: str) -> GoVersion:
        match = _SEMVER.match(text)
        pre = match[4] if match else None
        if match is None or (pre and _BAD_PRERELEASE_NUMBER.search(pre)):
            raise ValueError(f"not a Go semantic version: {text!r}")
        pre = pre if match[3] is not None else None  # v1, v1.2: shorthands without suffix
        ids = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in (pre or "").split("."))
        numbers = tuple(int(n or 0) for n in match.group(1, 2, 3))
        return cls((*numbers, pre is None, ids if pre else ()), text)


@lru_cache(maxsize=8192)  # a module's versions are ordered again and again (retractions, latest)
def sort_key(version: str) -> tuple[Any, ...]:
    """semver.Compare's order; an invalid version sorts below every valid one."""
    try:
        return (1, GoVersion.parse(version).key)
    except ValueError:
        return (0, version)


def is_valid(version: str) -> bool:
    """A canonical module version: `v` and the three numbers (what a proxy lists)."""
    match = _SEMVER.match(version)
    full = bool(match and version.startswith("v") and match[3] is not None)
    return full and sort_key(version)[0] == 1


def is_pseudo(version: str) -> bool:
    return version.count("-") >= 2 and is_valid(version) and bool(_PSEUDO.match(version))


def is_prerelease(version: str) -> bool:
    """semver.Prerelease(v) != "": pseudo-versions are pre-releases too."""
    return "-" in version.split("+", 1)[0]


def go_tag_semver(tag: str) -> str | None:
    """A Go release as OSV's stdlib entries spell it: go1.21.3 → 1.21.3, go1.21rc2 →
    1.21.0-rc.2, 1.13 → 1.13.0 (golang/vuln's GoTagToSemver; a go line has no `go`)."""
    match = re.fullmatch(r"(?:go)?1(?:\.(\d+))?(?:\.(\d+))?(?:(rc|beta)(\d+))?", tag.strip())
    if match is None:
        return None
    minor, patch, kind, number = match.groups()
    text = f"1.{minor or 0}.{patch or 0}"
    return f"{text}-{kind}.{number}" if kind else text


def escape(text: str) -> str:
    """The proxy protocol's case-encoding: each upper-case letter as `!` + its lower case."""
    return re.sub(r"[A-Z]", lambda m: "!" + m[0].lower(), text)


def path_problem(path: str) -> str | None:
    """Why `path` is not a module path (x/mod module.CheckPath, Windows names aside)."""
    if not path or len(path) > NAME_MAX:
        return "empty" if not path else f"longer than {NAME_MAX} characters"
    if not path.isascii() or not re.fullmatch(r"[A-Za-z0-9._~/-]+", path):
        return "only ASCII letters, digits and - . _ ~ / are allowed"
    if path.startswith(("-", "/")) or path.endswith("/") or "//" in path:
        return "a leading dash or slash, a trailing slash or a double slash"
    first, *_rest = elements = path.split("/")
    if "." not in first or not re.fullmatch(r"[a-z0-9.-]+", first):
        return "the first element must be a lower-case host name with a dot"
    dotted = [e for e in elements if e.startswith(".") or e.endswith(".")]
    return f"the path element {dotted[0]!r} starts or ends with a dot" if dotted else None


def check_path(path: str) -> None:
    if (problem := path_problem(path)) is not None:
        raise InputError(f"{path[:80]!r} is not a Go module path: {problem}")
