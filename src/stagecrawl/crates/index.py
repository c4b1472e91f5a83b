"""Reading sparse-index files (https://doc.rust-lang.org/cargo/reference/registry-index.html).

Each line is one published version: `name, vers, deps[], cksum, features, yanked` and, when not
empty, `features2` (with `v: 2`), `links`, `rust_version`, `pubtime`. Dependency objects carry
`name, req, features, optional, default_features, target, kind` and `package` when the
dependency is renamed (then `name` is the rename and `package` the real crate).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, cast

from stagecrawl.crates.names import identity_key, validate_name, validate_version
from stagecrawl.errors import InputError, UnreadableAnswer
from stagecrawl.jsoncodec import loads
from stagecrawl.storage.db import dumps


class IndexFormatError(UnreadableAnswer):
    """An index file has not one readable line (bad lines among good ones are reported in
    `ParsedIndex.problems` instead)."""


class IndexVersion:
    """One readable line of an index file. Read only (nothing sets a field after parsing).
    A class with slots and a plain `__init__`, not a frozen dataclass: a crawl makes one per
    version, and the dataclass's `__init__` (one `object.__setattr__` a field) cost more
    than the rest of building it; slots also make each one smaller in the run cache."""

    __slots__ = (
        "_stored", "cksum", "deps", "features", "links", "name", "pubtime", "rust_version",
        "vers", "yanked",
    )  # fmt: skip

    def __init__(
        self,
        name: str,
        vers: str,
        deps: list[dict[str, Any]],
        cksum: str,
        features: dict[str, list[str]],
        yanked: bool,
        links: str | None,
        rust_version: str | None,
        pubtime: str | None,
    ) -> None:
        self.name = name
        self.vers = vers
        self.deps = deps
        self.cksum = cksum
        self.features = features
        self.yanked = yanked
        self.links = links
        self.rust_version = rust_version
        self.pubtime = pubtime
        self._stored: str | None = None

    def _fields(self) -> tuple[Any, ...]:
        return (self.name, self.vers, self.deps, self.cksum, self.features, self.yanked,
                self.links, self.rust_version, self.pubtime)  # fmt: skip

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IndexVersion):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # (its lists and dicts are not hashable)

    def __repr__(self) -> str:
        return f"IndexVersion(name={self.name!r}, vers={self.vers!r}, yanked={self.yanked!r})"

    def dependencies_json(self) -> str:
        """The stored form, as the DEPENDENCIES column holds it (`dependencies`). Built once
        per version: parsing builds it (a line whose form cannot be built is a bad line) and
        the VERSION row reuses it."""
        stored = self._stored
        if stored is None:
            parts = [_dependency_json(dep) for dep in self.deps]
            stored = self._stored = f"[{','.join(parts)}]"
        return stored

    def dependencies(self) -> list[dict[str, Any]]:
        """The stored form: `name` is the real package, `rename` the name used in code."""
        loaded: list[dict[str, Any]] = json.loads(self.dependencies_json())
        return loaded


def _stored_dependency(
    name: str,
    package: Any,
    req: Any,
    kind: Any,
    optional: Any,
    default_features: Any,
    features: tuple[Any, ...],
    target: Any,
) -> str:
    """One dependency's stored form, as `dumps` writes it."""
    stored = {
        "name": package or name,
        "rename": name if package else None,
        "req": req,
        "kind": kind or "normal",  # a few old entries lack kind
        "optional": bool(optional),
        "default_features": bool(default_features),
        "features": list(features),
        "target": target,
    }
    return str(dumps(stored))


# Most dependencies recur, from version to version of a crate and across crates (serde ^1):
# building and encoding each one was a sixth of a crawl's CPU. Bounded, so memory stays flat;
# typed, so that values equal across types (1 and True) keep their own JSON.
_cached_dependency = lru_cache(maxsize=8192, typed=True)(_stored_dependency)


def _dependency_json(dep: dict[str, Any]) -> str:
    features = tuple(dep.get("features") or ())
    args = (dep["name"], dep.get("package"), dep.get("req"), dep.get("kind"),
            dep.get("optional", False), dep.get("default_features", True), features,
            dep.get("target"))  # fmt: skip
    if all(type(feature) is str for feature in features):
        try:
            return _cached_dependency(*args)
        except TypeError:  # a part that cannot be a key (a list where a string belongs)
            pass
    return _stored_dependency(*args)


@dataclass(frozen=True)
class IndexProblem:
    """One line of an index file that could not be read, skipped while the rest is used."""

    line: int  # 1-based, as an editor shows it
    reason: str
    version: str | None  # the version the line is about, when it can still be made out

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass(frozen=True)
class ParsedIndex:
    versions: list[IndexVersion]  # the readable lines, in file order
    problems: list[IndexProblem]  # the unreadable ones


# A bad line's version, made out of its raw text: enough to tell the user which event it was
# (its own event then waits on the retry ladder instead of being called "not found").
_VERS = re.compile(r'"vers"\s*:\s*"([0-9A-Za-z.+-]{1,64})"')


def parse_index_file(body: bytes | str, expected_key: str | None = None) -> ParsedIndex:
    """Parse a whole index file line by line. A line that is not UTF-8, not JSON, lacks a
    field, has a name or version crates.io would refuse, or (given `expected_key`, the
    identity key of the crate asked for) names another crate is skipped and reported (its
    number and why) while the other lines are used; a file without a single readable version
    raises IndexFormatError naming the problems."""
    data = body.encode("utf-8", errors="surrogatepass") if isinstance(body, str) else body
    versions: list[IndexVersion] = []
    problems: list[IndexProblem] = []
    # Decoded whole when it can be (one call, not one per line); else line by line, and only
    # \n ends a line (a raw U+2028 inside a JSON string does not): one bad byte costs its
    # own line, not the file. (\n is one byte in UTF-8, never inside a character: the lines
    # are the same either way.)
    lines: Sequence[str | bytes]
    try:
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        lines = data.split(b"\n")
    names: set[str] = set()  # the names already found valid (and the crate asked for)
    for number, raw in enumerate(lines, start=1):
        if isinstance(raw, bytes):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                readable = raw.decode("utf-8", errors="replace")
                reason = f"not UTF-8 (byte 0x{raw[exc.start]:02x} at byte {exc.start + 1})"
                problems.append(IndexProblem(number, reason, _version_in(readable)))
                continue
        else:
            line = cast(str, raw)
        if not line.strip():
            continue
        try:
            parsed = _parse_line(line, names)
            # A line for another crate (`expected_key` is the identity key of the crate the
            # file was asked for) is not this crate's version: skipped and reported.
            if parsed.name not in names:
                if expected_key is not None and identity_key(parsed.name) != expected_key:
                    raise _BadLine(
                        f"names crate {parsed.name!r}, not {expected_key!r}", parsed.vers
                    )
                names.add(parsed.name)
            versions.append(parsed)
        except _BadLine as exc:
            problems.append(IndexProblem(number, exc.reason, exc.version))
    if not versions:
        detail = "; ".join(str(p) for p in problems[:3])
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        raise IndexFormatError(
            "index file has no readable versions" + (f": {detail}{more}" if detail else "")
        )
    return ParsedIndex(versions, problems)


class _BadLine(Exception):
    def __init__(self, reason: str, version: str | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.version = version


def _parse_line(line: str, valid_names: Collection[str] = ()) -> IndexVersion:
    """One line as a version; `valid_names` are names already validated (a file's lines
    share theirs: each is checked once)."""
    try:
        entry = loads(line)
    except json.JSONDecodeError as exc:  # json's, in its words (jsoncodec)
        raise _BadLine(f"not JSON: {exc.msg} at column {exc.colno}", _version_in(line)) from None
    except RecursionError:  # nested deeper than the decoder recurses: one bad line
        raise _BadLine("not JSON: nested too deeply", _version_in(line)) from None
    if not isinstance(entry, dict):
        raise _BadLine(f"not a JSON object but {type(entry).__name__}", None)
    vers = entry.get("vers")
    missing = [key for key in ("name", "vers", "cksum") if key not in entry]
    if missing:
        fields = ", ".join(repr(key) for key in missing)
        noun = "the field" if len(missing) == 1 else "the fields"
        raise _BadLine(f"lacks {noun} {fields}", _text_or_none(vers))
    try:
        features = dict(entry.get("features") or {})
        features.update(entry.get("features2") or {})
        deps = entry.get("deps") or []
        if not isinstance(deps, list) or not all(isinstance(d, dict) for d in deps):
            raise TypeError("deps is not a list of objects")
        if not all(isinstance(d.get("name"), str) for d in deps):
            raise TypeError("a dependency has no name")
        version = IndexVersion(
            name=_text(entry["name"]),
            vers=_text(vers),
            deps=list(deps),
            cksum=_text(entry["cksum"]),
            features=features,
            yanked=bool(entry.get("yanked", False)),
            links=entry.get("links"),
            rust_version=entry.get("rust_version"),
            pubtime=entry.get("pubtime"),
        )
        version.dependencies_json()  # the stored form must build: a bad dependency is a bad line
    except (TypeError, ValueError, AttributeError) as exc:
        raise _BadLine(f"malformed: {exc}", _text_or_none(vers)) from None
    try:  # crates.io's own rules: what it could not have published never enters the queue
        if version.name not in valid_names:
            validate_name(version.name)
        validate_version(version.vers, version.name)
    except InputError as exc:
        raise _BadLine(str(exc), version.vers) from None
    return version


def _version_in(text: str) -> str | None:
    found = _VERS.search(text)
    return found.group(1) if found else None


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _text(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"expected a non-empty string, got {value!r}")
    return value
