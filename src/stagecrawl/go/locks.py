"""A Go project's build list from its files, without a go toolchain (no MVS: docs/go.md): go.mod
(go >= 1.17: its requires are the build list), go.sum beside a go.mod of go < 1.17, go.work and
vendor/modules.txt; replace and exclude of the main module only, a local-path replacement never
a pin; the standard library at the toolchain line's version, else the go line's."""

from __future__ import annotations

import re
from pathlib import Path

from stagecrawl.errors import InputError
from stagecrawl.go import modfile
from stagecrawl.go.versions import go_tag_semver, sort_key
from stagecrawl.kernel.lockfiles import Namer, read_file
from stagecrawl.kernel.registry import LockInput, Pin
from stagecrawl.sca.audit import Unaudited

STDLIB = "stdlib"
LOCAL = "replaced by a local directory: not a registry module, not audited"


def _go_minor(go: str | None) -> int:  # no go line: 1.16, as the go command assumes
    return int(match[1]) if (match := re.match(r"1\.(\d+)", go or "1.16")) else 16


def _parse(text: str, where: str, work: bool = False) -> modfile.ModFile:
    try:
        return modfile.parse(text, strict=True, work=work)
    except ValueError as exc:
        raise InputError(f"{where}:{exc}") from None


def _stdlib(lock: LockInput, mod: modfile.ModFile) -> None:
    toolchain = mod.toolchain if mod.toolchain != "default" else None
    if (version := go_tag_semver(toolchain or mod.go or "")) is None:
        why = "no go or toolchain line: its version is not known"
        lock.unaudited.append(Unaudited(STDLIB, None, lock.where, why))
    else:
        lock.audit_only.append(Pin(STDLIB, version, lock.where))


def _apply(
    lock: LockInput, mod: modfile.ModFile, replaces: list[modfile.Replace], where: str
) -> None:
    """The main module's requires as pins, its excludes and replaces applied (`replaces`: the
    workspace's before the module's own: the first that matches wins, a versioned one before
    a wildcard)."""
    excluded = set(mod.excludes)
    for req in mod.requires:
        pin = Pin(req.path, req.version, where, req.line)
        matches = [r for r in replaces if r.path == req.path and r.version in (req.version, None)]
        chosen = min(matches, key=lambda r: r.version is None, default=None)
        if (req.path, req.version) in excluded:
            why = "excluded by the main module"
            lock.unaudited.append(Unaudited(req.path, req.version, pin.source, why))
        elif chosen is None:
            lock.pins.append(pin)
        elif chosen.new_version is None:
            why = f"{LOCAL} ({chosen.new_path})"
            lock.unaudited.append(Unaudited(req.path, req.version, pin.source, why))
        else:
            lock.pins.append(Pin(chosen.new_path, chosen.new_version, where, req.line))


def read_go_sum(text: str, where: str) -> LockInput:
    """Every module go.sum hashes, at the highest version it hashes the content of."""
    highest: dict[str, tuple[str, int]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not (fields := line.split()):
            continue
        if len(fields) != 3 or not fields[2].startswith("h1:"):
            raise InputError(f"{where}:{number}: not a go.sum line (path version h1:hash)")
        path, version = fields[0], fields[1]
        if version.endswith("/go.mod"):
            continue
        if path not in highest or sort_key(version) > sort_key(highest[path][0]):
            highest[path] = (version, number)
    pins = [Pin(p, v, where, n) for p, (v, n) in sorted(highest.items())]
    return LockInput(where, "go.sum", pins=pins)


def read_go_mod(path: Path, text: str, name: Namer = str) -> LockInput:
    mod = _parse(text, name(path))
    lock = LockInput(name(path), "go.mod")
    _apply(lock, mod, mod.replaces, name(path))
    _stdlib(lock, mod)
    beside = path.with_name("go.sum")
    if _go_minor(mod.go) < 17 and beside.is_file():
        required = {pin.name for pin in lock.pins}
        summed = read_go_sum(read_file(beside, name(beside)), name(beside))
        lock.pins += [pin for pin in summed.pins if pin.name not in required]
    return lock


def read_go_work(path: Path, text: str, root: Path | None = None, name: Namer = str) -> LockInput:
    """A workspace: its members' requirements, never a member outside `root` (a tree's go.work
    naming `../elsewhere` names something the tree does not hold: said, not read)."""
    work = _parse(text, name(path), work=True)
    lock = LockInput(name(path), "go.work")
    members: list[str] = []
    for use, _line in work.uses:
        gomod = path.parent / use / "go.mod"
        if root is not None and not gomod.resolve().is_relative_to(root.resolve()):
            why = f"use {use}: outside the tree, not read"
            lock.unaudited.append(Unaudited(use, None, name(path), why, fails=True))
            continue
        mod = _parse(read_file(gomod, name(gomod)), name(gomod))
        members += [mod.module] if mod.module else []
        _apply(lock, mod, work.replaces + mod.replaces, name(gomod))
    lock.pins = [pin for pin in lock.pins if pin.name not in members]
    member = "a module of the workspace (local)"
    lock.unaudited += [Unaudited(m, None, name(path), member) for m in members]
    _stdlib(lock, work)
    return lock


def read_vendor(path: Path, text: str, name: Namer = str) -> LockInput:
    lock = LockInput(name(path), "vendor/modules.txt")
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.startswith("# "):
            continue
        words = line[2:].split()
        if "=>" in words:
            arrow = words.index("=>")
            if arrow + 2 == len(words):  # a local directory
                version = words[1] if arrow == 2 else None  # "# path [version] => dir"
                source = f"{name(path)} line {number}"
                lock.unaudited.append(Unaudited(words[0], version, source, LOCAL))
                continue
            words = words[arrow + 1 :]
        if len(words) != 2:
            raise InputError(f"{name(path)}:{number}: not a module line (# path version)")
        lock.pins.append(Pin(words[0], words[1], name(path), number))
    return lock


def read_lock(path: Path, text: str, root: Path | None = None, name: Namer = str) -> LockInput:
    """Any of Go's files; every file it reads (a workspace's members, a go.sum's go.mod) named
    by `name` wherever it is named."""
    if path.name == "go.sum":
        mod = path.with_name("go.mod")
        if mod.is_file() and _go_minor(_parse(read_file(mod, name(mod)), name(mod)).go) >= 17:
            why = "go >= 1.17: go.sum is no build list (it keeps versions no build uses)"
            raise InputError(f"{name(path)}: its go.mod says {why}: give go.mod")
        return read_go_sum(text, name(path))
    if path.name == "go.work":
        return read_go_work(path, text, root, name)
    if path.name == "modules.txt":
        return read_vendor(path, text, name)
    return read_go_mod(path, text, name)
