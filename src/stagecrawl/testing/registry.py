"""Writing a registry mirror the way crates.io serves one: sparse-index files at cargo's paths
and API answers at `/api/v1/crates/{name}`. Used by tests and benches to build their own."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from stagecrawl.crates.names import index_path


def index_line(name: str, vers: str, deps: list[dict[str, Any]] | None = None, **extra: Any) -> str:
    """One index line in crates.io's field order; `extra` adds or overrides fields."""
    entry: dict[str, Any] = {
        "name": name,
        "vers": vers,
        "deps": deps or [],
        "cksum": hashlib.sha256(f"{name}-{vers}".encode()).hexdigest(),
        "features": {},
        "yanked": False,
    }
    entry.update(extra)
    return json.dumps(entry, separators=(",", ":"))


def write_cargo_lock(path: Path, names: list[str], version: str = "1.0.0") -> Path:
    """A resolved Cargo.lock (version 3) naming each crate once, from crates.io."""
    path.write_text(
        "version = 3\n"
        + "".join(
            f'\n[[package]]\nname = "{name}"\nversion = "{version}"\n'
            'source = "registry+https://github.com/rust-lang/crates.io-index"\n'
            for name in names
        )
    )
    return path


def write_crate(
    root: Path, name: str, lines: list[str], api_document: dict[str, Any] | None = None
) -> None:
    """root/index/<cargo path> and, when given, root/api/api/v1/crates/<name>."""
    path = root / "index" / index_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    if api_document is not None:
        doc = root / "api" / "api" / "v1" / "crates" / name
        doc.parent.mkdir(parents=True, exist_ok=True)
        doc.write_text(json.dumps(api_document))
