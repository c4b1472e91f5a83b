"""`stagecrawl demo` as a new user runs it from the README."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.acceptance.conftest import stagecrawl


def test_demo_runs_the_whole_pipeline_offline(tmp_path: Path) -> None:
    out = tmp_path / "stagecrawl-demo"
    done = stagecrawl("demo", "--out", str(out))
    assert done.returncode == 0, done.stderr
    steps = ("1. seed", "2. lock", "3. collect", "4. licenses", "5. vulns", "5b. pypi", "5c. go")
    for step in (*steps, "6. aircraft"):
        assert step in done.stderr
    assert "sqlite3" in done.stderr and "429s seen: 0" in done.stderr
    db = sqlite3.connect(out / "stagecrawl.db")
    versions = db.execute("SELECT COUNT(*) FROM TB_COMP_LIB_VERSION_RUST").fetchone()[0]
    hits = db.execute("SELECT COUNT(*) FROM TB_COMP_LIB_VULN_CARGO_HIT").fetchone()[0]
    locked = db.execute(
        "SELECT COUNT(*) FROM TB_COMP_LIB_RUST_LIST WHERE REF_TAGS LIKE '%demo-app@v1.1.0%'"
    ).fetchone()[0]
    assert versions > 40 and hits > 0 and locked > 0
    pypi = db.execute("SELECT COUNT(*) FROM TB_COMP_LIB_VERSION_PYPI").fetchone()[0]
    assert pypi > 40 and "vulnerabilities" in done.stderr
    go = db.execute("SELECT COUNT(*) FROM TB_COMP_LIB_VERSION_GOLANG WHERE RETRACTED = 1")
    assert go.fetchone()[0] == 1 and "1 not audited (a local replace)" in done.stderr
    specs = json.loads((out / "aircraft" / "specs.json").read_text())
    assert specs["Q1001"]["length"][0]["value"] == 35.814
    again = stagecrawl("demo", "--out", str(out))  # a second run starts clean and works too
    assert again.returncode == 0, again.stderr
