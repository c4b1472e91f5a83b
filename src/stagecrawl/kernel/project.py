"""One audit across ecosystems: `stagecrawl audit DIR` finds every lock file the registries
read under DIR (as osv-scanner's `scan -r` does), audits each registry's with its stored
advisories through one gate config, and answers once; `stagecrawl licenses check DIR` the
same for the license policy. The registries are handed in (the kernel knows none by name).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.errors import InputError
from stagecrawl.kernel.registry import Registry
from stagecrawl.kernel.sca import AuditRequest, Inputs, run_audit, run_licenses_check
from stagecrawl.sca.audit import AuditReport
from stagecrawl.sca.policy import LicenseCheck
from stagecrawl.settings import Settings

# Folders never searched: version control, dependencies vendored or built, virtualenvs and
# stagecrawl's own cache (its bare clones and cargo's home hold other projects' lock files).
SKIPPED_FOLDERS = frozenset(
    {".git", ".hg", ".svn", "node_modules", "target", ".venv", "venv", "__pycache__",
     ".tox", ".nox", ".stagecrawl-cache", ".mypy_cache", ".ruff_cache"}
)  # fmt: skip


def find_locks(root: Path, registries: Sequence[Registry[Any]]) -> dict[str, list[Path]]:
    """Every lock file under `root` (or `root` itself, a file), by registry code, sorted."""
    if not root.exists():
        raise InputError(f"{root} does not exist")
    found: dict[str, list[Path]] = {}

    def claim(path: Path) -> None:
        for registry in registries:
            if registry.decl.lock_kind(path.name) is not None:
                found.setdefault(registry.code, []).append(path)
                return

    if root.is_file():
        claim(root)
    else:
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_FOLDERS)
            for name in sorted(files):
                claim(Path(folder) / name)
    return {code: sorted(paths) for code, paths in found.items()}


def _no_locks(root: Path, registries: Sequence[Registry[Any]]) -> InputError:
    names = ", ".join(p for r in registries for p in r.decl.lock_patterns)
    return InputError(f"no lock file under {root} (looked for {names})")


@dataclass
class ProjectAudit:
    """One audit per ecosystem found, and the ecosystems that could not be audited (no
    advisories imported for them: a problem, never a silent pass)."""

    parts: list[tuple[Registry[Any], AuditReport]] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # registry title -> why

    @property
    def exit_code(self) -> int:
        codes = [report.exit_code for _registry, report in self.parts]
        return max([*codes, 1 if self.failed else 0])


async def audit_project(
    registries: Sequence[Registry[Any]],
    s: Settings,
    root: Path,
    request: AuditRequest,
    stop: GracefulStop | None,
    config_file: Path | None = None,
) -> ProjectAudit:
    """Audit every lock file under `root` with its registry, through one gate (the Rust
    parts also read deny.toml and .cargo/audit.toml, as `crates audit` does)."""
    locks = find_locks(root, registries)
    if not locks:
        raise _no_locks(root, registries)
    result = ProjectAudit()
    for registry in registries:
        paths = locks.get(registry.code)
        if not paths:
            continue
        asked = AuditRequest(
            Inputs(lockfiles=tuple(paths)),
            request.deny,
            request.ignore,
            request.severity_threshold,
            request.max_advisory_age,
            request.strict,
        )
        try:
            report = await run_audit(registry, s, asked, stop, config_file)
        except InputError as exc:
            if "no advisories are stored" not in str(exc):
                raise
            result.failed[registry.ecosystem.name] = str(exc)  # keyed as `ecosystems` are
            continue
        result.parts.append((registry, report))
    return result


@dataclass
class ProjectLicenses:
    parts: list[tuple[Registry[Any], LicenseCheck]] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return max((check.exit_code for _registry, check in self.parts), default=0)


async def check_project_licenses(
    registries: Sequence[Registry[Any]],
    s: Settings,
    root: Path,
    allow: list[str],
    deny: list[str],
    exceptions: list[str],
    stop: GracefulStop | None,
    config_file: Path | None = None,
) -> ProjectLicenses:
    """Every lock file's versions under `root` against one license policy."""
    locks = find_locks(root, registries)
    if not locks:
        raise _no_locks(root, registries)
    result = ProjectLicenses()
    for registry in registries:
        paths = locks.get(registry.code)
        if paths:
            inputs = Inputs(lockfiles=tuple(paths))
            check = await run_licenses_check(
                registry, s, allow, deny, exceptions, inputs, stop, config_file
            )
            result.parts.append((registry, check))
    return result
