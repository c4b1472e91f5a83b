"""A small registry built by the tests: sparse-index files and API answers in the documented
formats (cargo's registry-index reference; crates.io's /api/v1/crates/{name} current shape,
as in the dependabot-core capture in ../shared/fixtures/crates-api). Made for stagecrawl's tests;
no third-party data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stagecrawl.crates.names import index_path
from stagecrawl.testing.registry import index_line


def dep(name: str, req: str, **extra: Any) -> dict[str, Any]:
    entry = {
        "name": name,
        "req": req,
        "features": [],
        "optional": False,
        "default_features": True,
        "target": None,
        "kind": "normal",
    }
    entry.update(extra)
    return entry


line = index_line


# name -> index lines; every crate here is in the index
INDEX: dict[str, list[str]] = {
    "a": [line("a", "0.1.0"), line("a", "0.2.0")],
    "cc": [
        line("cc", "1.0.0"),
        line("cc", "1.0.1", yanked=True),
        line("cc", "1.1.0-beta.1"),
    ],
    "syn": [
        line("syn", "1.0.0"),
        line(
            "syn",
            "2.0.0",
            [dep("cc", "^1.0", kind="build", target="cfg(windows)")],
            rust_version="1.61",
        ),
    ],
    "serde_json": [
        line("serde_json", "1.0.0", features={"std": []}),
        line(
            "serde_json",
            "1.0.1",
            [dep("indexmap", "^2", optional=True)],
            features={"std": []},
            features2={"preserve_order": ["dep:indexmap"]},
            v=2,
        ),
    ],
    "quick-xml": [
        line("quick-xml", "0.30.0"),
        line(
            "quick-xml",
            "0.31.0",
            [dep("encoding", "^0.8", package="encoding_rs", optional=True)],
            links="xml",
        ),
    ],
    "noapi": [line("noapi", "0.1.0")],
}

# Crates with real RustSec advisories (../shared/fixtures/osv); index only, so the API answers 404.
VULN_INDEX: dict[str, list[str]] = {
    "smallvec": [
        line("smallvec", v)
        for v in ["0.6.0-alpha", "0.6.2", "0.6.9", "0.6.13", "1.0.0", "1.6.0", "1.6.1"]
    ],
    "tar": [line("tar", v) for v in ["0.4.15", "0.4.16", "0.4.44", "0.4.45"]],
}

DESCRIPTIONS = {
    "a": "The letter a",
    "cc": "C compiler driver",
    "syn": "Rust parser",
    "serde_json": "JSON for serde",
    "quick-xml": "Fast XML",
}
LICENSES = {
    "a": "MIT",
    "cc": "MIT OR Apache-2.0",
    "syn": "MIT/Apache-2.0",
    "serde_json": "MIT OR Apache-2.0",
    "quick-xml": "MIT",
}


def api_document(name: str) -> dict[str, Any]:
    versions = [json.loads(raw) for raw in INDEX[name]]
    return {
        "crate": {
            "id": name,
            "name": name,
            "description": DESCRIPTIONS[name],
            "repository": f"https://example.org/{name}",
            "homepage": None,
            "documentation": f"https://docs.rs/{name}",
            "downloads": 1000 * len(versions),
            "max_version": versions[-1]["vers"],
            "created_at": "2020-01-01T00:00:00.000000+00:00",
        },
        "versions": [
            {
                "id": 100 + i,
                "crate": name,
                "num": v["vers"],
                "license": LICENSES[name],
                "created_at": f"2021-0{i + 1}-02T03:04:05.678901Z",
                "downloads": 10 * (i + 1),
                "yanked": v["yanked"],
                "checksum": v["cksum"],
                "rust_version": v.get("rust_version"),
                "crate_size": 1234,
            }
            for i, v in enumerate(versions)
        ],
        "keywords": [{"id": "parser", "keyword": "parser", "crates_cnt": 5}],
        "categories": [{"id": "encoding", "category": "Encoding", "slug": "encoding"}],
    }


def build_registry(root: Path, api_base: str = "http://127.0.0.1") -> tuple[Path, Path]:
    """Write index/ and api/ trees under root; returns (index_root, api_root)."""
    index_root = root / "index"
    api_root = root / "api"
    index_root.mkdir(parents=True, exist_ok=True)
    (index_root / "config.json").write_text(
        json.dumps({"dl": f"{api_base}/api/v1/crates", "api": api_base})
    )
    for name, lines in {**INDEX, **VULN_INDEX}.items():
        path = index_root / index_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
        if name in DESCRIPTIONS:
            doc = api_root / "api" / "v1" / "crates" / name
            doc.parent.mkdir(parents=True, exist_ok=True)
            doc.write_text(json.dumps(api_document(name)))
    return index_root, api_root


def version_count() -> int:
    return sum(len(v) for v in INDEX.values())
