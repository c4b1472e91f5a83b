"""`--output FILE` gets the permissions a shell's `> FILE` would give it: a new file follows the
umask (it was 0600 whatever the umask), a file already there keeps its mode; still written
atomically (nothing beside it afterwards)."""

from __future__ import annotations

import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli import cli_env
from tests.crates.test_audit import needs_zip
from tests.crates.test_sca_output import project

__all__ = ["project"]  # the module fixture: an OSV database and a Cargo.lock with findings


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, shell=True, capture_output=True, text=True, env=cli_env(), cwd=cwd, timeout=300
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077, 0o027])
def test_a_report_written_by_any_process_follows_its_umask(umask: int, tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    write = (
        "from pathlib import Path; from stagecrawl.cli.sca_render import atomic_write;"
        f" atomic_write(Path({str(target)!r}), '{{}}')"
    )
    done = shell(
        f"umask {umask:03o}; {shlex.quote(sys.executable)} -c {shlex.quote(write)}", tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert mode(target) == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_a_report_replacing_a_file_keeps_that_file_s_mode(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    target.write_text("old")
    target.chmod(0o640)
    write = (
        "from pathlib import Path; from stagecrawl.cli.sca_render import atomic_write;"
        f" atomic_write(Path({str(target)!r}), 'new')"
    )
    done = shell(f"umask 022; {shlex.quote(sys.executable)} -c {shlex.quote(write)}", tmp_path)
    assert done.returncode == 0, done.stderr
    assert target.read_text() == "new" and mode(target) == 0o640


@needs_zip
@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_audit_output_follows_the_umask(
    project: tuple[str, Path, Path], umask: int, tmp_path: Path
) -> None:
    db, lock, _ = project
    command = (
        f"umask {umask:03o}; {shlex.quote(sys.executable)} -m stagecrawl crates audit"
        f" --lockfile {shlex.quote(str(lock))} --db {db} --format sarif --output report.sarif"
    )
    done = shell(command, tmp_path)
    assert done.returncode == 1, done.stderr  # findings: the gate's exit, the file written
    assert mode(tmp_path / "report.sarif") == 0o666 & ~umask
    assert [p.name for p in tmp_path.iterdir()] == ["report.sarif"]
