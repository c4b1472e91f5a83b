"""`stagecrawl demo` as a new user runs it from the README: its story on stdout, commands to
try that work as printed, and a user's folder never touched."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.acceptance.conftest import stagecrawl
from tests.cli import cli_env

STEPS = (
    "1. seed",
    "2. lock",
    "3. collect",
    "4. licenses",
    "5. vulns",
    "5b. pypi",
    "5c. go",
    "6. aircraft",
)


def as_printed(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A command the demo printed, run by a shell from `cwd` with stagecrawl on the PATH."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.run(
        command,
        shell=True,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=cli_env({"PATH": path}),
    )


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `folder` with its bytes and modification time."""
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_demo_runs_the_whole_pipeline_offline(tmp_path: Path) -> None:
    out = tmp_path / "my demo"  # a space: the commands it prints must quote it
    done = stagecrawl("demo", "--out", str(out))
    assert done.returncode == 0, done.stderr
    # the story is the report: stdout; stderr has the progress and the logs only
    story = [line for line in done.stdout.splitlines() if line.startswith(STEPS)]
    assert {step for step in STEPS if any(line.startswith(step) for line in story)} == set(STEPS)
    assert not [line for line in story if line in done.stderr]
    assert done.stdout.count("429s seen: 0") == 3  # crates, PyPI and Go
    db = sqlite3.connect(out / "stagecrawl.db")
    versions = db.execute("SELECT COUNT(*) FROM TB_COMP_LIB_VERSION_RUST").fetchone()[0]
    hits = db.execute("SELECT COUNT(*) FROM TB_COMP_LIB_VULN_CARGO_HIT").fetchone()[0]
    cves = db.execute("SELECT COUNT(*) FROM TB_COMP_LIB_VULN_CARGO_V1").fetchone()[0]
    locked = db.execute(
        "SELECT COUNT(*) FROM TB_COMP_LIB_RUST_LIST WHERE REF_TAGS LIKE '%demo-app@v1.1.0%'"
    ).fetchone()[0]
    assert versions > 40 and hits > 0 and cves > 0 and locked > 0
    pypi = db.execute("SELECT COUNT(*) FROM TB_COMP_LIB_VERSION_PYPI").fetchone()[0]
    pypi_hits = db.execute("SELECT COUNT(*) FROM TB_COMP_LIB_VULN_PYPI_HIT").fetchone()[0]
    assert pypi > 40 and pypi_hits > 0 and "4 vulnerabilities" in done.stdout
    go = db.execute("SELECT COUNT(*) FROM TB_COMP_LIB_VERSION_GOLANG WHERE RETRACTED = 1")
    assert go.fetchone()[0] == 1 and "1 not audited (a local replace)" in done.stdout
    # everything it crawled is made up, and says so
    names = {n for (n,) in db.execute("SELECT PRODUCT_KEY FROM TB_COMP_LIB_PRODUCT_RUST")}
    names |= {n for (n,) in db.execute("SELECT PRODUCT_KEY FROM TB_COMP_LIB_PRODUCT_PYPI")}
    assert names and all(n.startswith("demo") for n in names)
    go_names = {n for (n,) in db.execute("SELECT PRODUCT_KEY FROM TB_COMP_LIB_PRODUCT_GOLANG")}
    assert go_names and all(n.startswith("example.com/") for n in go_names)  # a made-up host
    advisories = db.execute("SELECT OSV_ID FROM TB_COMP_LIB_VULN_CARGO_RAW").fetchall()
    advisories += db.execute("SELECT OSV_ID FROM TB_COMP_LIB_VULN_PYPI_RAW").fetchall()
    advisories += db.execute("SELECT OSV_ID FROM TB_COMP_LIB_VULN_GOLANG_RAW").fetchall()
    assert advisories and all(i.startswith("DEMO-2026-") for (i,) in advisories)
    db.close()
    specs = json.loads((out / "aircraft" / "specs.json").read_text())
    assert specs["Q1001"]["length"][0]["value"] == 35.814

    # The hints cover every registry it ran, and each works as printed, from anywhere.
    commands = [line.strip() for line in done.stdout.splitlines() if line.startswith("  ")]
    commands = [c for c in commands if c.startswith(("stagecrawl ", "sqlite3 "))]
    assert any(c.startswith("stagecrawl crates audit") for c in commands)
    assert any(c.startswith("stagecrawl pypi audit") for c in commands)
    assert any(c.startswith("stagecrawl go audit") for c in commands)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for command in commands:
        if command.startswith("sqlite3 ") and not _has_sqlite3():
            continue
        ran = as_printed(command, elsewhere)
        assert "Traceback" not in ran.stderr and "error" not in ran.stderr.lower(), command
        if " audit " in command:  # the made-up advisories hit: the gate fails
            assert ran.returncode == 1 and "DEMO-2026-" in ran.stdout, (command, ran.stderr)
        else:
            assert ran.returncode == 0 and ran.stdout, (command, ran.stderr)
        if command.startswith("stagecrawl status"):
            assert "collected" in ran.stdout and "PyPI" in ran.stdout and "Go" in ran.stdout
    # or, as the status hint says, from the demo's folder without --db
    status = as_printed("stagecrawl status", out)
    assert status.returncode == 0 and "PyPI" in status.stdout, status.stderr

    # A second run into its own folder starts clean and works too; a file of the user's there
    # (not one the demo makes) is left alone.
    (out / "my-notes.txt").write_text("mine\n")
    again = stagecrawl("demo", "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert (out / "my-notes.txt").read_text() == "mine\n"


def _has_sqlite3() -> bool:
    from shutil import which

    return which("sqlite3") is not None


def test_demo_refuses_a_folder_it_did_not_make(tmp_path: Path) -> None:
    """`demo --out .` in a project deleted its stagecrawl.db and demo-app/: a folder with
    anything the demo did not make is refused in one line, exit 2, nothing in it touched."""
    mine = tmp_path / "project"
    (mine / "demo-app").mkdir(parents=True)
    (mine / "demo-app" / "main.rs").write_text("fn main() {}\n")
    (mine / "stagecrawl.db").write_bytes(b"my own database")
    (mine / ".hidden").write_text("x")
    before = snapshot(mine)
    for out, cwd in ((str(mine), None), (".", mine)):
        done = stagecrawl("demo", "--out", out, cwd=cwd)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "did not make" in done.stderr
        assert "stagecrawl.db" in done.stderr and done.stdout == ""
        assert snapshot(mine) == before
        assert sorted(p.name for p in mine.iterdir()) == [".hidden", "demo-app", "stagecrawl.db"]
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    done = stagecrawl("demo", "--out", str(a_file))
    assert done.returncode == 2 and "is not a folder" in done.stderr
    assert a_file.read_text() == "x"
