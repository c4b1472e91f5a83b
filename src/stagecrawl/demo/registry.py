"""The demo's bundled mirror: a sparse index and API answers for a few dozen made-up crates.

Every crate here is made up (names `demo-…`), and so is everything about it: version
histories, dependencies, checksums and metadata are generated here, deterministically, in the
documented formats. `build_mirror` writes any such table (the acceptance suites give it their own).
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
Crates = dict[str, tuple[list[str], list[str], set[str]]]
CRATES: Crates = {
    "demo-cfg": (["0.1.0", "0.1.4", "1.0.0"], [], set()),
    "demo-sys": (["0.3.10", "0.3.12", "0.3.14"], [], {"0.3.12"}),
    "demo-build": (["1.2.0", "1.2.3", "1.3.0"], ["demo-sys"], set()),
    "demo-log": (["0.5.0", "0.5.2", "0.6.1"], ["demo-cfg"], set()),
    "demo-memscan": (["1.0.0", "1.1.0", "1.2.2"], [], set()),
    "demo-itoa": (["0.8.0", "0.8.3"], [], set()),
    "demo-float": (["0.9.1", "0.9.4"], [], set()),
    "demo-tokens": (["1.1.0", "1.1.8"], [], set()),
    "demo-quote": (["0.7.0", "0.7.5"], ["demo-tokens"], set()),
    "demo-parse": (["1.4.0", "2.0.1", "2.1.6"], ["demo-tokens", "demo-quote"], set()),
    "demo_derive": (["1.0.3", "1.1.0"], ["demo-parse", "demo-quote", "demo-tokens"], set()),
    "demo_serial": (["1.0.3", "1.0.4", "1.1.0"], ["demo_derive"], {"1.0.4"}),
    "demo_json": (["0.9.0", "1.0.2"], ["demo_serial", "demo-itoa", "demo-float"], set()),
    "demo-search": (["0.4.0", "0.5.1"], ["demo-memscan"], set()),
    "demo-pattern-syntax": (["0.3.0", "0.3.8"], [], set()),
    "demo-pattern": (
        ["1.5.0", "1.6.2"],
        ["demo-search", "demo-memscan", "demo-pattern-syntax"],
        set(),
    ),
    "demo-flags": (["1.0.0", "2.0.0", "2.1.0"], [], set()),
    "demo-once": (["1.3.0", "1.4.1"], [], set()),
    "demo-bytes": (["0.6.0", "0.7.2"], [], set()),
    "demo-entropy": (["0.3.0", "0.3.5"], ["demo-cfg", "demo-sys"], set()),
    "demo-rand-core": (["0.5.1"], ["demo-entropy"], set()),
    "demo-rand": (["0.7.2"], ["demo-rand-core", "demo-sys"], set()),
    "demo-inline-vec": (["0.4.1", "0.4.6", "1.0.0", "1.2.0", "1.3.1"], [], {"0.4.1"}),
    "demo-archive": (["0.2.0", "0.2.7", "0.3.0", "0.3.2"], ["demo-sys"], set()),
    "demo-clock": (["0.1.9", "0.2.4", "0.3.0", "0.3.6"], ["demo-sys", "demo-itoa"], set()),
    "demo-calendar": (["0.8.0", "0.9.3"], ["demo-clock"], set()),
    "demo-web": (["0.9.0", "0.10.4", "0.10.9", "1.1.0"], ["demo-bytes", "demo-log"], set()),
    "demo-tls": (["0.5.0", "0.5.3", "0.5.7"], ["demo-flags", "demo-cfg", "demo-sys"], set()),
    "demo-pixels": (["2.0.0", "2.1.3"], [], set()),
    "demo-image": (["0.4.0", "0.5.1"], ["demo-pixels"], set()),
    "demo-runtime": (["1.6.0", "1.8.2"], ["demo-bytes", "demo-memscan", "demo-sys"], set()),
}


def _index_line(crates: Crates, name: str, vers: str, deps: list[str], yanked: bool) -> str:
    entry: dict[str, Any] = {
        "name": name,
        "vers": vers,
        "deps": [
            {
                "name": dep,
                "req": f"^{crates[dep][0][-1].split('.')[0]}",
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


def build_mirror(root: Path, crates: Crates = CRATES) -> None:
    """Write index/ (with config.json) and api/api/v1/crates/<name> under root, for the demo's
    crates or the table given."""
    index_root, api_root = root / "index", root / "api" / "api" / "v1" / "crates"
    index_root.mkdir(parents=True, exist_ok=True)
    api_root.mkdir(parents=True, exist_ok=True)
    (index_root / "config.json").write_text(json.dumps({"dl": "http://127.0.0.1/dl", "api": None}))
    for position, (name, (versions, deps, yanked)) in enumerate(sorted(crates.items())):
        lines = [
            _index_line(
                crates, name, vers, deps if i == len(versions) - 1 else deps[:1], vers in yanked
            )
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
                        "description": f"{name}: a made-up crate (stagecrawl.demo.registry)",
                        "repository": f"https://example.org/{name}",
                        "homepage": None,
                        "documentation": f"https://example.org/{name}/docs",
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
