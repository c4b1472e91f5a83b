"""Lock mode: which crates a Rust project uses, from its resolved Cargo.lock at each git tag.

A repository is cloned once (bare) into a cache folder; each tag's tree is exported with
`git archive` into a temporary folder. A committed Cargo.lock is parsed as it is; otherwise
`cargo generate-lockfile` resolves one (the union across targets and features: everything the
project could pull). cargo always runs with a private CARGO_HOME, never the user's ~/.cargo;
when the index is a mirror, that CARGO_HOME's config replaces the crates-io source with it.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stagecrawl.crates.declaration import DEFAULT_INDEX_URL
from stagecrawl.engine.git import GitRepo
from stagecrawl.engine.git import last_error_line as _last_error_line
from stagecrawl.engine.git import run_git as _run
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.errors import InputError
from stagecrawl.kernel.lockfiles import package_tables, require_format, toml_document
from stagecrawl.kernel.registry import LockInput, Pin
from stagecrawl.sca.audit import DependencyGraph, Unaudited

log = logging.getLogger("stagecrawl.lock")
CRATES_IO_SOURCES = frozenset(
    {
        "registry+https://github.com/rust-lang/crates.io-index",
        "sparse+https://index.crates.io/",
    }
)
COMMITTED, GENERATED, LOCKFILE = "committed-lock", "generated-lock", "lockfile"
LOCK_VERSIONS = (1, 2, 3, 4)  # v1 has no `version` key; v2 is implied by its layout
CARGO_TIMEOUT = 600.0


@dataclass(frozen=True)
class LockedPackage:
    name: str
    version: str
    source: str | None


def parse_lockfile(text: str, where: str) -> list[LockedPackage]:
    """Every `[[package]]` of a Cargo.lock, any format version (v1's `[metadata]` checksums
    through v4). Raises InputError naming `where` when it is not TOML or has no packages."""
    return _locked_packages(toml_document(text, where, "Cargo.lock"), where)


def _locked_packages(document: dict[str, Any], where: str) -> list[LockedPackage]:
    version = document.get("version", 1)
    shown = version if isinstance(version, int) else repr(version)  # "3" is not 3
    readable = "it reads " + ", ".join(map(str, LOCK_VERSIONS))
    require_format(shown, version in LOCK_VERSIONS, where, "Cargo.lock format version", readable)
    result: list[LockedPackage] = []
    for entry in package_tables(document, "package", where, "Cargo.lock", empty=False):
        if not isinstance(entry.get("name"), str):
            raise InputError(f"{where}: a [[package]] entry has no name")
        if not isinstance(entry.get("version"), str):
            raise InputError(f"{where}: package {entry['name']} has no version")
        source = entry.get("source")
        result.append(
            LockedPackage(
                entry["name"], entry["version"], source if isinstance(source, str) else None
            )
        )
    return result


def external_crates(packages: list[LockedPackage]) -> list[LockedPackage]:
    """Only crates.io packages: the workspace's own crates, path and git dependencies go."""
    seen: dict[tuple[str, str], LockedPackage] = {}
    for package in packages:
        if package.source in CRATES_IO_SOURCES:
            seen.setdefault((package.name, package.version), package)
    return sorted(seen.values(), key=lambda p: (p.name, p.version))


def cargo_home(cache_dir: Path, index_url: str) -> Path:
    """A private CARGO_HOME; for a mirror, its config replaces crates-io with the mirror."""
    home = cache_dir.resolve() / "cargo-home"  # absolute: cargo runs inside the tree
    home.mkdir(parents=True, exist_ok=True)
    config = home / "config.toml"
    if index_url.rstrip("/") == DEFAULT_INDEX_URL.rstrip("/"):
        config.unlink(missing_ok=True)
    else:
        config.write_text(
            "[source.crates-io]\n"
            'replace-with = "stagecrawl-mirror"\n\n'
            "[source.stagecrawl-mirror]\n"
            f'registry = "sparse+{index_url.rstrip("/")}/"\n'
        )
    return home


async def resolve_tree(
    tree: Path, home: Path, where: str, stop: GracefulStop | None = None
) -> tuple[str, str]:
    """(Cargo.lock text, RESOLVE_KIND) for an exported tree."""
    committed = tree / "Cargo.lock"
    if committed.is_file():
        return committed.read_text(encoding="utf-8", errors="replace"), COMMITTED
    if not (tree / "Cargo.toml").is_file():
        raise InputError(f"{where}: no Cargo.toml at the top of the tree")
    env = {**os.environ, "CARGO_HOME": str(home), "CARGO_TERM_COLOR": "never"}
    done = await _run(
        ["cargo", "generate-lockfile", "--quiet"],
        f"{where}: cargo generate-lockfile",
        cwd=tree,
        env=env,
        timeout=CARGO_TIMEOUT,
        stop=stop,
    )
    if done.returncode != 0 or not committed.is_file():
        raise InputError(f"{where}: cargo could not resolve: {_last_error_line(done.stderr)}")
    return committed.read_text(encoding="utf-8"), GENERATED


def read_cargo_lock(text: str, where: str, kind: str = LOCKFILE, folder: str = "") -> LockInput:
    """A Cargo.lock as lock mode and audit read it: its crates.io packages as pins (with the
    line of each `[[package]]`, for SARIF), the others (the workspace's own crates, path and
    git dependencies, other registries) named as not from crates.io, and its dependency
    graph. InputError when it is not a Cargo.lock."""
    document = toml_document(text, where, "Cargo.lock")  # read once: the pins and the graph
    packages = _locked_packages(document, where)
    lines = package_lines(text)
    external = external_crates(packages)
    pins = [Pin(p.name, p.version, where, lines.get((p.name, p.version))) for p in external]
    others = sorted(
        {(p.name, p.version, p.source) for p in packages if p.source not in CRATES_IO_SOURCES},
        key=lambda t: (t[0], t[1], t[2] or ""),
    )
    unaudited = [
        Unaudited(name, version, where, _not_crates_io(source)) for name, version, source in others
    ]
    return LockInput(where, kind, pins, unaudited, graph=_graph(document, where, folder))


def _not_crates_io(source: str | None) -> str:
    if source is None:
        return "a workspace member or path dependency: not from crates.io"
    if source.startswith("git+"):
        return "a git dependency: not from crates.io"
    return f"from another registry ({source.split('#')[0]}): not crates.io"


async def locks_at_tag(repo: GitRepo, tag: str, home: Path) -> list[LockInput]:
    """The Cargo.lock at a tag (committed, or resolved by cargo)."""
    where = f"{repo.label}@{tag}"
    with tempfile.TemporaryDirectory(prefix="stagecrawl-tag-") as tmp:
        tree = Path(tmp)
        await repo.export(tag, tree)
        text, kind = await resolve_tree(tree, home, where, repo.stop)
    return [read_cargo_lock(text, f"{where} Cargo.lock", kind)]


def package_lines(text: str) -> dict[tuple[str, str], int]:
    """The 1-based line of each `[[package]]` header of a Cargo.lock, by (name, version), for
    SARIF locations (the first one when a pair appears twice)."""
    result: dict[tuple[str, str], int] = {}
    header = 0
    name: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped == "[[package]]":
            header, name = number, None
        elif stripped.startswith("name = ") and header:
            name = stripped[len("name = ") :].strip().strip('"')
        elif stripped.startswith("version = ") and header and name is not None:
            version = stripped[len("version = ") :].strip().strip('"')
            result.setdefault((name, version), header)
            header = 0
    return result


def lock_graph(text: str, where: str, folder: str = "") -> DependencyGraph:
    """The dependency graph of a Cargo.lock (any format version): each `[[package]]`'s
    `dependencies` (`name`, `name version` or `name version (source)`), resolved to the
    (name, version) they name; `local` every package not from crates.io (workspace members,
    path, git); the root is the one workspace member (no source) that no other package
    depends on (None when the lock has several)."""
    return _graph(toml_document(text, where, "Cargo.lock"), where, folder)


def _graph(document: dict[str, Any], where: str, folder: str) -> DependencyGraph:
    packages = document.get("package") or []
    if not isinstance(packages, list):
        raise InputError(f"{where} is not a Cargo.lock: `package` is not [[package]] tables")
    entries: list[dict[str, Any]] = [e for e in packages if isinstance(e, dict)]
    nodes = [(str(e.get("name")), str(e.get("version"))) for e in entries]
    by_name: dict[str, list[tuple[str, str]]] = {}
    for node in nodes:
        by_name.setdefault(node[0], []).append(node)
    edges: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for entry, node in zip(entries, nodes, strict=True):
        dependencies = entry.get("dependencies") or []
        if not isinstance(dependencies, list):
            raise InputError(f"{where}: {node[0]} {node[1]}: `dependencies` is not a list")
        for dependency in dependencies:
            name, _, rest = str(dependency).partition(" ")
            version = rest.split(" ")[0] if rest else None
            candidates = by_name.get(name, [])
            target = next((c for c in candidates if version is None or c[1] == version), None)
            if target is not None:
                edges.setdefault(node, []).append(target)
    sources = [e.get("source") if isinstance(e.get("source"), str) else None for e in entries]
    local = [n for n, src in zip(nodes, sources, strict=True) if src not in CRATES_IO_SOURCES]
    members = [n for n, src in zip(nodes, sources, strict=True) if src is None]
    depended = {d for deps in edges.values() for d in deps}
    roots = [n for n in members if n not in depended]
    root = roots[0] if len(roots) == 1 else None
    return DependencyGraph(root, local, edges, folder)
