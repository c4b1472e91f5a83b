"""Where the SCA commands' reports go: stdout in every format (a redirect or a pipe gets the
whole report), `--output FILE` written atomically, `-q` silent on success, nothing cut to a
terminal width, and the gate's exit codes (0 clean, 1 denied findings, 2 usage)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli import cli_env, stagecrawl
from tests.crates.test_audit import LOCK_V1, LOCK_V3, ZIP, needs_zip, real_records

pytestmark = needs_zip
FORMATS = ("table", "json", "sarif", "cyclonedx", "markdown")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    root = tmp_path_factory.mktemp("out")
    db = f"sqlite:///{root / 'a.db'}"
    done = stagecrawl("crates", "vulns", "--source", str(ZIP), "--db", db)
    assert done.returncode == 0, done.stderr
    lock, clean = root / "Cargo.lock", root / "clean" / "Cargo.lock"
    clean.parent.mkdir()
    lock.write_text(LOCK_V3)
    clean.write_text(LOCK_V1)
    yield db, lock, clean


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, shell=True, capture_output=True, text=True, env=cli_env(), cwd=cwd, timeout=300
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_redirect_and_a_pipe_get_the_whole_report(
    project: tuple[str, Path, Path], fmt: str, tmp_path: Path
) -> None:
    db, lock, _ = project
    base = f"{shlex.quote(sys.executable)} -m stagecrawl crates audit --lockfile {lock}"
    base += f" --db {db} --format {fmt}"
    redirected = shell(f"{base} > out.txt; echo $? > code.txt", tmp_path)
    text = (tmp_path / "out.txt").read_text()
    assert (tmp_path / "code.txt").read_text().strip() == "1"
    assert "RUSTSEC-2026-0009" in text  # the report, in the file
    assert "RUSTSEC-2026-0009" not in redirected.stderr  # and not on stderr
    if fmt in ("json", "sarif", "cyclonedx"):
        json.loads(text)  # one document, nothing else on stdout
    piped = shell(f"{base} | grep -c RUSTSEC-2026-0009", tmp_path)
    assert int(piped.stdout.strip()) >= 1


def test_output_file_quiet_and_exit_codes(project: tuple[str, Path, Path], tmp_path: Path) -> None:
    db, lock, clean = project
    target = tmp_path / "report.sarif"
    written = stagecrawl(
        "crates", "audit", "--lockfile", str(lock), "--db", db, "--format", "sarif",
        "--output", str(target),
    )  # fmt: skip
    assert written.returncode == 1 and written.stdout == ""
    assert json.loads(target.read_text())["version"] == "2.1.0"
    assert [p.name for p in tmp_path.iterdir()] == ["report.sarif"]  # no temporary left
    nowhere = stagecrawl(
        "crates", "audit", "--lockfile", str(lock), "--db", db,
        "--output", str(tmp_path / "missing" / "r.json"),
    )  # fmt: skip
    assert nowhere.returncode == 2 and "missing" in nowhere.stderr and nowhere.stdout == ""
    # a folder where the file is expected: said so, naming it (the error named a temporary
    # file `.NAME.xxxx` beside it)
    folder = stagecrawl(
        "crates", "audit", "--lockfile", str(lock), "--db", db, "--output", str(tmp_path)
    )
    assert folder.returncode == 2 and folder.stdout == ""
    assert f"--output {tmp_path} is a folder" in folder.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["report.sarif"]

    quiet_clean = stagecrawl("-q", "crates", "audit", "--lockfile", str(clean), "--db", db)
    assert quiet_clean.returncode == 0 and quiet_clean.stdout == ""
    quiet_failing = stagecrawl("-q", "crates", "audit", "--lockfile", str(lock), "--db", db)
    assert quiet_failing.returncode == 1 and "RUSTSEC-2026-0009" in quiet_failing.stdout

    bad = stagecrawl("crates", "audit", "time@0.3.10", "--format", "xml", "--db", db)
    assert bad.returncode == 2 and "--format" in bad.stderr and bad.stdout == ""


def test_nothing_is_cut_outside_a_terminal(project: tuple[str, Path, Path]) -> None:
    db, lock, _ = project
    done = stagecrawl("crates", "audit", "--lockfile", str(lock), "--db", db, env={"COLUMNS": "40"})
    rows = [line.split("\t") for line in done.stdout.splitlines() if "\t" in line]
    assert rows[0] == ["crate", "version", "id", "aliases", "kind", "patched", "summary"]
    time_row = next(r for r in rows if r[:3] == ["time", "0.3.10", "RUSTSEC-2026-0009"])
    (record,) = [r for r in real_records() if r["id"] == "RUSTSEC-2026-0009"]
    assert time_row[6] == record["summary"]  # whole, at 40 columns
    assert "…" not in done.stdout


def test_markdown_is_a_pull_request_comment(project: tuple[str, Path, Path]) -> None:
    db, lock, _ = project
    done = stagecrawl(
        "crates", "audit", "--lockfile", str(lock), "--db", db, "--format", "markdown"
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "## Advisories"
    header = next(i for i, line in enumerate(lines) if line.startswith("| crate |"))
    assert lines[header + 1].startswith("|---|")
    assert any(
        "[RUSTSEC-2026-0009](https://rustsec.org/advisories/RUSTSEC-2026-0009.html)" in line
        for line in lines
    )
    assert lines[-1].startswith("**") and "vulnerabilities" in lines[-1]


def test_vulns_and_licenses_check_report_on_stdout(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'v.db'}"
    table = stagecrawl("crates", "vulns", "--source", str(ZIP), "--db", db)
    assert table.returncode == 0 and "advisories read" in table.stdout
    assert "advisories read" not in table.stderr
    markdown = stagecrawl(
        "crates", "vulns", "--source", str(ZIP), "--db", db, "--format", "markdown"
    )
    assert markdown.stdout.startswith("## vulns") and "| unchanged (not newer) |" in markdown.stdout
    check = stagecrawl("crates", "licenses", "check", "--allow", "MIT", "--db", db)
    assert check.returncode == 0 and check.stdout == "0 versions checked, 0 not accepted\n"
    quiet = stagecrawl("-q", "crates", "licenses", "check", "--allow", "MIT", "--db", db)
    assert quiet.returncode == 0 and quiet.stdout == ""
