"""Loading a crates.io database dump built at test time with the real layout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from stagecrawl.crates.dbdump import load_dump
from stagecrawl.errors import InputError
from stagecrawl.sca.reference import stable_id
from stagecrawl.storage.db import Database
from stagecrawl.testing.dbdump import build_dump
from tests.crates.kernel import rust


@pytest.mark.parametrize("binary_checksum", [True, False], ids=["tar_sha256", "checksum"])
def test_dump_loads_products_and_versions(
    db_url: str, tmp_path: Path, binary_checksum: bool
) -> None:
    dump = tmp_path / "db-dump.tar.gz"
    build_dump(dump, crates=12, versions_per=4, binary_checksum=binary_checksum)
    db = Database(db_url)
    report = load_dump(db, dump)
    assert (report.crates, report.versions) == (12, 48)
    assert report.dependencies == 11 * 4 * 2
    with db.engine.connect() as conn:
        versions = {(r.PRODUCT_KEY, r.VERSION): r for r in conn.execute(select(rust(db).version))}
        products = {r.PRODUCT_KEY: r for r in conn.execute(select(rust(db).product))}
    v = versions[("dump-crate-000010", "0.2.0")]
    assert v.NAME == "dump-crate-000010" and len(v.CHECKSUM) == 64
    assert json.loads(v.LICENSE_IDS) == [stable_id("MIT"), stable_id("Apache-2.0")]
    deps = json.loads(v.DEPENDENCIES)
    assert deps == [
        {
            "name": "dump_crate_000001",
            "rename": None,
            "req": "^1",
            "kind": "dev",
            "optional": True,
            "default_features": False,
            "features": [],
            "target": "cfg(unix)",
        },
        {
            "name": "dump_crate_000009",
            "rename": "renamed",
            "req": "^0.1",
            "kind": "normal",
            "optional": False,
            "default_features": True,
            "features": ["std"],
            "target": None,
        },
    ]
    assert versions[("dump-crate-000010", "0.1.0")].YANKED in (True, 1)
    assert str(versions[("dump-crate-000010", "0.2.0")].RELEASE_DATE) == "2024-01-03 12:00:00"
    p = products["dump-crate-000012"]
    assert p.LATEST_VERSION == "0.2.0"  # 0.1.0 yanked, 0.3.0-beta.1 a pre-release
    assert p.VERSION_COUNT == 4 and p.DOWNLOADS == 120
    assert json.loads(p.KEYWORDS) == ["parser"] and json.loads(p.CATEGORIES) == ["encoding"]
    again = load_dump(db, dump)  # an upsert: loading twice changes nothing but timestamps
    assert again.versions == 48


def test_a_file_that_is_not_a_dump_is_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not a tarball")
    db = Database(f"sqlite:///{tmp_path / 'x.db'}")
    with pytest.raises(InputError, match=r"not a readable crates\.io dump"):
        load_dump(db, junk)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "stagecrawl",
            "crates",
            "dbdump",
            "--source",
            str(junk),
            "--db",
            f"sqlite:///{tmp_path / 'y.db'}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 2 and "not a readable crates.io dump" in done.stderr
