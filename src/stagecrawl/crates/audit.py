"""`crates audit`: what to audit, as crates.io knows it — `NAME@VERSION`, `NAME` (its
collected versions), the crates.io packages of a Cargo.lock (v1–v4; one crate may be locked at
several versions), or the locks of a git repository's tags — audited by the SCA core
(stagecrawl.sca.audit) with cargo's SemVer order against TB_COMP_LIB_VULN_CARGO_RAW.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable
from pathlib import Path

from sqlalchemy import select

from stagecrawl.crates.ecosystem import CRATES
from stagecrawl.crates.lock import (
    CRATES_IO_SOURCES,
    GitRepo,
    LockedPackage,
    cargo_home,
    external_crates,
    lock_at_tag,
    parse_lockfile,
    select_tags,
)
from stagecrawl.crates.names import validate_name
from stagecrawl.crates.semver import Version
from stagecrawl.crates.tables import versions
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.errors import InputError
from stagecrawl.sca.audit import CHUNK, AuditReport, DependencyGraph, Package, parse_deny
from stagecrawl.sca.audit import audit as sca_audit
from stagecrawl.storage.db import Database

__all__ = ["AuditReport", "Package", "audit", "parse_deny"]


def packages_of_lock(packages: list[LockedPackage], label: str) -> tuple[list[Package], int]:
    """The crates.io packages of a parsed Cargo.lock, and how many others it lists."""
    external = external_crates(packages)
    others = len({(p.name, p.version, p.source) for p in packages}) - len(external)
    return [Package(p.name, p.version, [label]) for p in external], others


def read_lockfile(path: Path) -> tuple[list[Package], int]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    packages, others = packages_of_lock(parse_lockfile(text, str(path)), str(path))
    lines = package_lines(text)
    for package in packages:
        line = lines.get((package.name, package.version))
        if line is not None:
            package.lines[str(path)] = line
    return packages, others


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


async def packages_of_repo(
    repo: str,
    tags: list[str],
    pattern: str | None,
    all_tags: bool,
    cache_dir: Path,
    index_url: str,
    stop: GracefulStop | None = None,
) -> tuple[list[Package], int, list[str]]:
    """The packages of each chosen tag's Cargo.lock (committed, or resolved by cargo as lock
    mode does). A tag that cannot be read is a problem, not a silent gap."""
    if not (tags or pattern or all_tags):
        raise InputError("say which tags: --tag T (repeatable), --tags-matching GLOB or --all-tags")
    git = GitRepo(repo, cache_dir, stop)
    await git.sync()
    chosen = select_tags(await git.tags(), tags, pattern, all_tags)
    if not chosen:
        raise InputError(f"no tag of {repo} matches")
    home = cargo_home(cache_dir, index_url)
    result: list[Package] = []
    skipped = 0
    problems: list[str] = []
    for tag in chosen:
        try:
            locked, _kind = await lock_at_tag(git, tag, home)
        except InputError as exc:
            problems.append(str(exc))
            continue
        packages, others = packages_of_lock(locked, f"{git.label}@{tag}")
        result += packages
        skipped += others
    return result, skipped, problems


def parse_targets(targets: list[str]) -> tuple[list[Package], list[str]]:
    """`NAME@VERSION` as packages, and the bare `NAME`s (every collected version of each),
    all checked before any database is opened."""
    result: list[Package] = []
    wanted_all: list[str] = []
    for target in targets:
        name, at, version = target.partition("@")
        validate_name(name)
        if at and not version.strip():
            raise InputError(f"{target!r}: no version after @")
        if at:
            try:
                Version.parse(version)
            except ValueError:
                raise InputError(f"{target!r}: {version!r} is not a semantic version") from None
            result.append(Package(name, version.strip(), ["argument"]))
        else:
            wanted_all.append(name)
    return result, wanted_all


def collected_packages(db: Database, names: list[str]) -> list[Package]:
    result: list[Package] = []
    for name in names:
        with db.reading() as conn:
            rows = versions(db).versions_of(conn, name)
        if not rows:
            raise InputError(
                f"no version of {name} is collected in {db.safe_url}; name one ({name}@1.2.3)"
                " or collect it first"
            )
        result += [Package(real, version, ["collected"]) for real, version in rows]
    return result


def packages_of_targets(db: Database, targets: list[str]) -> list[Package]:
    """`NAME@VERSION` as given; `NAME` as every collected version of it."""
    packages, names = parse_targets(targets)
    return packages + collected_packages(db, names)


def audit(
    db: Database, packages: Iterable[Package], deny: frozenset[str] = frozenset()
) -> AuditReport:
    """Evaluate every stored crates.io advisory for each package's version, and note the
    license of each audited version that is collected (for the CycloneDX BOM)."""
    report = sca_audit(
        db,
        CRATES,
        db.vuln_raw,
        packages,
        deny,
        import_hint="run `stagecrawl crates vulns` first",
    )
    report.licenses = collected_licenses(db, report.packages)
    return report


def collected_licenses(
    db: Database, packages: list[Package]
) -> dict[tuple[str, str], tuple[str | None, str | None]]:
    wanted = {p.key for p in packages}
    names = sorted({p.name.lower() for p in packages})
    result: dict[tuple[str, str], tuple[str | None, str | None]] = {}
    with db.reading() as conn:
        for key, _name, version, expression, text in versions(db).licenses(conn, names):
            if (key, version) in wanted:
                result[(key, version)] = (expression, text)
    return result


def yanked_packages(db: Database, packages: list[Package]) -> list[Package]:
    """The audited versions that are collected and yanked (a version not collected is not
    known to be yanked: it is not listed)."""
    table = db.version
    wanted = {p.key: p for p in packages}
    names = sorted({p.name.lower() for p in packages})
    found: list[Package] = []
    with db.engine.connect() as conn:
        for start in range(0, len(names), CHUNK):
            rows = conn.execute(
                select(table.c.PRODUCT_KEY, table.c.VERSION).where(
                    table.c.PRODUCT_KEY.in_(names[start : start + CHUNK]),
                    table.c.YANKED.is_(True),
                )
            )
            for row in rows:
                package = wanted.get((str(row.PRODUCT_KEY).lower(), str(row.VERSION)))
                if package is not None:
                    found.append(package)
    return found


def lock_graph(path: Path) -> DependencyGraph:
    """The dependency graph of a Cargo.lock (any format version): each `[[package]]`'s
    `dependencies` (`name`, `name version` or `name version (source)`), resolved to the
    (name, version) they name; `local` every package not from crates.io (workspace members,
    path, git); the root is the one workspace member (no source) that no other package
    depends on (None when the lock has several)."""
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    packages = document.get("package") or []
    if not isinstance(packages, list):
        raise InputError(f"{path} is not a Cargo.lock: `package` is not [[package]] tables")
    entries = [e for e in packages if isinstance(e, dict)]
    nodes = [(str(e.get("name")), str(e.get("version"))) for e in entries]
    by_name: dict[str, list[tuple[str, str]]] = {}
    for node in nodes:
        by_name.setdefault(node[0], []).append(node)
    edges: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for entry, node in zip(entries, nodes, strict=True):
        dependencies = entry.get("dependencies") or []
        if not isinstance(dependencies, list):
            raise InputError(f"{path}: {node[0]} {node[1]}: `dependencies` is not a list")
        for text in dependencies:
            name, _, rest = str(text).partition(" ")
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
    folder = path.resolve().parent.name
    return DependencyGraph(root, local, edges, folder)
