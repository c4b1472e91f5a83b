"""The demo's bundled mirror: a sparse index and API answers for a few dozen crates.

Crate names are real (so the bundled RustSec advisories hit them); the version histories,
dependencies, checksums and metadata are generated here, deterministically, in the documented
formats. Nothing is copied from crates.io.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from stagecrawl.crates.names import index_path

LICENSES = [
    "MIT OR Apache-2.0",
    "MIT/Apache-2.0",
    "MIT",
    "Apache-2.0 WITH LLVM-exception",
    "Unlicense OR MIT",
    "BSD-3-Clause",
    "Apache-2.0",
]

# name -> (versions oldest first, dependencies of the newest versions, yanked versions)
CRATES: dict[str, tuple[list[str], list[str], set[str]]] = {
    "cfg-if": (["0.1.0", "0.1.10", "1.0.0"], [], set()),
    "libc": (["0.2.100", "0.2.150", "0.2.155"], [], {"0.2.150"}),
    "cc": (["1.0.79", "1.0.83", "1.1.0"], ["libc"], set()),
    "log": (["0.4.17", "0.4.20", "0.4.22"], ["cfg-if"], set()),
    "memchr": (["2.5.0", "2.6.0", "2.7.4"], [], set()),
    "itoa": (["1.0.9", "1.0.11"], [], set()),
    "ryu": (["1.0.15", "1.0.18"], [], set()),
    "proc-macro2": (["1.0.66", "1.0.86"], [], set()),
    "quote": (["1.0.33", "1.0.36"], ["proc-macro2"], set()),
    "syn": (["1.0.109", "2.0.38", "2.0.72"], ["proc-macro2", "quote"], set()),
    "serde_derive": (["1.0.188", "1.0.204"], ["syn", "quote", "proc-macro2"], set()),
    "serde": (["1.0.188", "1.0.190", "1.0.204"], ["serde_derive"], {"1.0.190"}),
    "serde_json": (["1.0.107", "1.0.120"], ["serde", "itoa", "ryu"], set()),
    "aho-corasick": (["1.0.5", "1.1.3"], ["memchr"], set()),
    "regex-syntax": (["0.7.5", "0.8.4"], [], set()),
    "regex": (["1.9.5", "1.10.5"], ["aho-corasick", "memchr", "regex-syntax"], set()),
    "bitflags": (["1.3.2", "2.4.0", "2.6.0"], [], set()),
    "once_cell": (["1.18.0", "1.19.0"], [], set()),
    "bytes": (["1.4.0", "1.6.1"], [], set()),
    "getrandom": (["0.2.10", "0.2.15"], ["cfg-if", "libc"], set()),
    "rand_core": (["0.6.4"], ["getrandom"], set()),
    "rand": (["0.8.5"], ["rand_core", "libc"], set()),
    "smallvec": (["0.6.9", "0.6.14", "1.6.0", "1.6.1", "1.13.2"], [], {"0.6.9"}),
    "tar": (["0.4.15", "0.4.36", "0.4.44", "0.4.45"], ["libc"], set()),
    "time": (["0.1.45", "0.2.22", "0.3.5", "0.3.36"], ["libc", "itoa"], set()),
    "chrono": (["0.4.19", "0.4.38"], ["time"], set()),
    "hyper": (["0.12.35", "0.14.9", "0.14.30", "1.4.1"], ["bytes", "log"], set()),
    "openssl": (["0.10.38", "0.10.55", "0.10.66"], ["bitflags", "cfg-if", "libc"], set()),
    "image": (["0.23.14", "0.25.2"], ["bytemuck"], set()),
    "bytemuck": (["1.14.0", "1.16.1"], [], set()),
    "tokio": (["1.32.0", "1.39.2"], ["bytes", "memchr", "libc"], set()),
}


def _index_line(name: str, vers: str, deps: list[str], yanked: bool) -> str:
    entry: dict[str, Any] = {
        "name": name,
        "vers": vers,
        "deps": [
            {
                "name": dep,
                "req": f"^{CRATES[dep][0][-1].split('.')[0]}",
                "features": [],
                "optional": False,
                "default_features": True,
                "target": None,
                "kind": "normal",
            }
            for dep in deps
        ],
        "cksum": hashlib.sha256(f"demo:{name}:{vers}".encode()).hexdigest(),
        "features": {"default": ["std"], "std": []},
        "yanked": yanked,
    }
    return json.dumps(entry, separators=(",", ":"))


def build_mirror(root: Path) -> None:
    """Write index/ (with config.json) and api/api/v1/crates/<name> under root."""
    index_root, api_root = root / "index", root / "api" / "api" / "v1" / "crates"
    index_root.mkdir(parents=True, exist_ok=True)
    api_root.mkdir(parents=True, exist_ok=True)
    (index_root / "config.json").write_text(json.dumps({"dl": "http://127.0.0.1/dl", "api": None}))
    for position, (name, (versions, deps, yanked)) in enumerate(sorted(CRATES.items())):
        lines = [
            _index_line(name, vers, deps if i == len(versions) - 1 else deps[:1], vers in yanked)
            for i, vers in enumerate(versions)
        ]
        path = index_root / index_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
        license_text = LICENSES[position % len(LICENSES)]
        (api_root / name).write_text(
            json.dumps(
                {
                    "crate": {
                        "id": name,
                        "name": name,
                        "description": f"The {name} crate (demo data)",
                        "repository": f"https://example.org/{name}",
                        "homepage": None,
                        "documentation": f"https://docs.rs/{name}",
                        "downloads": 1000 * (position + 1),
                    },
                    "versions": [
                        {
                            "num": vers,
                            "license": license_text,
                            "yanked": vers in yanked,
                            "created_at": f"20{18 + i}-0{1 + position % 9}-15T10:00:00.000000Z",
                            "downloads": 100 * (i + 1),
                            "crate_size": 10_000,
                        }
                        for i, vers in enumerate(versions)
                    ],
                    "keywords": [{"id": "demo", "keyword": "demo"}],
                    "categories": [{"id": "development-tools", "slug": "development-tools"}],
                }
            )
        )
