"""Reading sparse-index files (https://doc.rust-lang.org/cargo/reference/registry-index.html).

Each line is one published version: `name, vers, deps[], cksum, features, yanked` and, when not
empty, `features2` (with `v: 2`), `links`, `rust_version`, `pubtime`. Dependency objects carry
`name, req, features, optional, default_features, target, kind` and `package` when the
dependency is renamed (then `name` is the rename and `package` the real crate).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


class IndexFormatError(ValueError):
    """An index file line is not the documented JSON object."""


@dataclass(frozen=True)
class IndexVersion:
    name: str
    vers: str
    deps: list[dict[str, Any]]
    cksum: str
    features: dict[str, list[str]]
    yanked: bool
    links: str | None
    rust_version: str | None
    pubtime: str | None

    def dependencies(self) -> list[dict[str, Any]]:
        """The stored form: `name` is the real package, `rename` the name used in code."""
        result = []
        for dep in self.deps:
            real = dep.get("package") or dep["name"]
            result.append(
                {
                    "name": real,
                    "rename": dep["name"] if dep.get("package") else None,
                    "req": dep.get("req"),
                    "kind": dep.get("kind") or "normal",  # a few old entries lack kind
                    "optional": bool(dep.get("optional", False)),
                    "default_features": bool(dep.get("default_features", True)),
                    "features": list(dep.get("features") or []),
                    "target": dep.get("target"),
                }
            )
        return result


def parse_index_file(body: bytes | str, expected_key: str | None = None) -> list[IndexVersion]:
    """Parse a whole index file; a malformed line raises IndexFormatError naming the line."""
    text = body.decode("utf-8") if isinstance(body, bytes) else body
    versions: list[IndexVersion] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise IndexFormatError(f"index line {number} is not JSON: {exc.msg}") from None
        try:
            features = dict(entry.get("features") or {})
            features.update(entry.get("features2") or {})
            versions.append(
                IndexVersion(
                    name=_text(entry["name"]),
                    vers=_text(entry["vers"]),
                    deps=list(entry.get("deps") or []),
                    cksum=_text(entry["cksum"]),
                    features=features,
                    yanked=bool(entry.get("yanked", False)),
                    links=entry.get("links"),
                    rust_version=entry.get("rust_version"),
                    pubtime=entry.get("pubtime"),
                )
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise IndexFormatError(f"index line {number} lacks a field: {exc}") from None
    if not versions:
        raise IndexFormatError("index file has no versions")
    return versions


def _text(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"expected a non-empty string, got {value!r}")
    return value
