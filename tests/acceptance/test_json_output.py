"""`--format json`: every command prints exactly one JSON document on stdout and nothing
else there, whatever it logs on stderr; the documents carry what docs/json.md says they do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stagecrawl.demo.advisories import advisory, osv_zip
from stagecrawl.demo.wikidata import install
from stagecrawl.testing.origin import TestOrigin
from tests.acceptance.conftest import Mirror, stagecrawl

LOCK = """version = 4

[[package]]
name = "app"
version = "0.1.0"

[[package]]
name = "tar"
version = "0.4.36"
source = "registry+https://github.com/rust-lang/crates.io-index"

[[package]]
name = "smallvec"
version = "1.6.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
"""

# Made up for this test (the demo's own advisories are about its made-up crates).
ADVISORIES = [
    advisory(
        "TEST-2026-0001", "crates.io", "tar", "made up", [[("introduced", "0"), ("fixed", "0.5.0")]]
    ),
    advisory(
        "TEST-2026-0002",
        "crates.io",
        "smallvec",
        "made up",
        [[("introduced", "1.0.0"), ("fixed", "1.7.0")]],
    ),
]


def document(*args: str, codes: tuple[int, ...] = (0,)) -> Any:
    done = stagecrawl(*args, "--format", "json", env={"COLUMNS": "80"})
    assert done.returncode in codes, done.stderr
    return json.loads(done.stdout)  # one document, nothing else on stdout


def test_every_command_prints_one_json_document(
    mirror: Mirror, origin: TestOrigin, tmp_path: Path
) -> None:
    db = ["--db", f"sqlite:///{tmp_path / 'j.db'}"]
    urls = mirror.urls()
    seed = document("crates", "seed", "tar", "smallvec", "ghost-crate", *db, *urls, codes=(1,))
    assert seed["seed"]["not_found"] == ["ghost-crate"] and seed["requests"]["index"] >= 2
    crawl = document("crates", "crawl", "tar", "smallvec", *db, *urls)
    assert crawl["collect"]["collected"] > 0 and crawl["rate_limited"] == {}
    collect = document("crates", "collect", *db, *urls)
    assert collect["collect"]["collected"] == 0
    lock_file = tmp_path / "Cargo.lock"
    lock_file.write_text(LOCK)
    locked = document("crates", "lock", "--lockfile", str(lock_file), "--pinned-only", *db, *urls)
    assert locked["inputs"][0]["external_crates"] == 2
    refreshed = document("crates", "refresh", *db, *urls)
    assert refreshed["refresh"]["checked"] == 2
    origin.add("all.zip", osv_zip(ADVISORIES))
    vulns = document("crates", "vulns", "--source", origin.url + "/all.zip", *db)
    assert vulns["advisories"] > 0
    audit = document("crates", "audit", "--lockfile", str(lock_file), *db, codes=(1,))
    assert {hit["crate"] for hit in audit["hits"]} >= {"tar", "smallvec"}
    backfill = document("crates", "licenses", "backfill", *db)
    assert "rows" in backfill
    check = document("crates", "licenses", "check", "--allow", "MIT", *db, codes=(0, 1))
    assert "violations" in check
    status = document("status", *db)
    assert status["crates"]["versions"] > 0 and status["crates"]["workers"] == []
    install(origin)
    air = document(
        "aircraft",
        "crawl",
        "--out",
        str(tmp_path / "air"),
        "--sparql-url",
        origin.url + "/sparql",
        "--entities-url",
        origin.url + "/w/api.php",
    )
    assert air["stored"]["specs"] > 0 and air["passes"]["specs"]["ladder"] == 0
