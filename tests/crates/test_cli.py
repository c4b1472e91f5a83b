"""The crates commands as a user runs them: real processes, loopback registry, SQLite."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli import stagecrawl
from tests.crates.conftest import Registry
from tests.crates.registry import INDEX


def urls(registry: Registry) -> list[str]:
    return ["--index-url", registry.index.url + "/", "--api-url", registry.api.url + "/"]


def test_crawl_then_status(registry: Registry, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'out.db'}"
    done = stagecrawl("crates", "crawl", "cc", "serde-json", "--db", db, *urls(registry))
    assert done.returncode == 0, done.stderr
    assert "collected" in done.stdout and "429s seen" in done.stdout  # the report: stdout
    status = stagecrawl("status", "--db", db)
    assert status.returncode == 0
    expected = len(INDEX["cc"]) + len(INDEX["serde_json"])
    version_line = next(line for line in status.stdout.splitlines() if "VERSION rows" in line)
    assert version_line.split()[-2] == str(expected)
    assert "collected" in status.stdout


def test_reports_go_to_stdout_whole_in_a_pipe_and_quiet_on_success(
    registry: Registry, tmp_path: Path
) -> None:
    """`crates crawl … > out.txt`, `status | less`: the report is on stdout, each line whole
    however long (off a terminal Rich would cut it at 80 columns), none of it on stderr; -q
    prints no report when the command succeeds, and still does when it fails."""
    folder = tmp_path / ("a-long-folder-name-" * 5)
    folder.mkdir()
    db = f"sqlite:///{folder / 'out.db'}"
    no_width = {"COLUMNS": ""}  # as in a pipe: no terminal width to go by
    ghosts = [f"ghost-{i}-" + "x" * 50 for i in range(3)]  # not in the index: one long cell
    done = stagecrawl("crates", "crawl", "cc", *ghosts, "--db", db, *urls(registry), env=no_width)
    assert done.returncode == 1, done.stderr  # the ghosts are not in the index
    assert "collected" in done.stdout and "429s seen" in done.stdout
    [row] = [line for line in done.stdout.splitlines() if "not in the index" in line]
    assert ", ".join(ghosts) in row and len(row) > 200
    assert "429s seen" not in done.stderr and "not in the index" not in done.stderr

    status = stagecrawl("status", "--db", db, env=no_width)
    assert status.returncode == 0, status.stderr
    assert (
        f"crates.io LIST in {db}" in status.stdout.splitlines()
    )  # the title whole, on its own line
    assert "VERSION rows" in status.stdout and "no live workers" in status.stdout
    assert "VERSION rows" not in status.stderr and "LIST in" not in status.stderr

    for command in (["status"], ["crates", "crawl", "cc", *urls(registry)]):
        quiet = stagecrawl("-q", *command, "--db", db, env=no_width)
        assert quiet.returncode == 0, quiet.stderr
        assert quiet.stdout == "", command
    failed = stagecrawl("-q", "crates", "seed", ghosts[0], "--db", db, *urls(registry))
    assert failed.returncode == 1
    assert ghosts[0] in failed.stdout  # a failed command still reports


def test_seed_file_and_env_and_not_found_exit_1(registry: Registry, tmp_path: Path) -> None:
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("# crates we ship\na\n\nghost  # not published\n")
    db = f"sqlite:///{tmp_path / 'out.db'}"
    done = stagecrawl(
        "crates",
        "seed",
        "--file",
        str(seeds),
        "--db",
        db,
        *urls(registry),
        env={"STAGECRAWL_SEED_CRATES": "syn"},
    )
    assert done.returncode == 1  # ghost is not in the index; the others are registered
    assert "not in the index" in done.stdout and "ghost" in done.stdout
    collect = stagecrawl("crates", "collect", "--db", db, *urls(registry))
    assert collect.returncode == 0, collect.stderr


@pytest.mark.parametrize(
    "bad",
    ["../../etc/passwd", "a/b", "", "x" * 65, "crâte", "1abc"],
)
def test_bad_names_one_line_exit_2_nothing_touched(
    registry: Registry, tmp_path: Path, bad: str
) -> None:
    db_file = tmp_path / "out.db"
    done = stagecrawl("crates", "crawl", "a", bad, "--db", f"sqlite:///{db_file}", *urls(registry))
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: invalid crate name")
    assert not db_file.exists()
    assert registry.index.log == [] and registry.api.log == []


def test_junk_in_a_seeds_file_names_the_line(registry: Registry, tmp_path: Path) -> None:
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("a\nserde json\n")
    done = stagecrawl(
        "crates",
        "seed",
        "--file",
        str(seeds),
        "--db",
        f"sqlite:///{tmp_path / 'x.db'}",
        *urls(registry),
    )
    assert done.returncode == 2
    assert f"{seeds}:2: invalid crate name 'serde json'" in done.stderr
    assert registry.index.log == []


def test_unreachable_database_is_one_line_exit_2(registry: Registry) -> None:
    done = stagecrawl(
        "crates", "crawl", "a", "--db", "mysql+pymysql://root@127.0.0.1:1/nope", *urls(registry)
    )
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "cannot reach database" in lines[0]


def test_real_crates_io_needs_a_contact(tmp_path: Path) -> None:
    done = stagecrawl("crates", "crawl", "serde", "--db", f"sqlite:///{tmp_path / 'x.db'}")
    assert done.returncode == 2
    assert "contact is required" in done.stderr and "STAGECRAWL_CONTACT" in done.stderr
    assert "crates.io's crawler policy" in done.stderr


def test_the_real_dump_needs_a_contact_too(tmp_path: Path) -> None:
    """The dump's download says the same policy as the crawl (one message, not a copy)."""
    source = "https://static.crates.io/db-dump.tar.gz"
    done = stagecrawl("crates", "dbdump", "--source", source, "--db", f"sqlite:///{tmp_path}/x.db")
    assert done.returncode == 2, done.stderr
    assert "contact is required: crates.io's crawler policy" in done.stderr
    assert not (tmp_path / "x.db").exists()  # refused before anything was opened
