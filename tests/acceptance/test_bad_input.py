"""Bad input: one line, a non-zero exit, and the database as it was."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.conftest import Mirror, dump, stagecrawl


@contextlib.contextmanager
def tmpfs(path: Path, options: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["crates", "crawl", "../../etc/passwd"], "invalid crate name"),
        (["crates", "crawl", "a/b"], "invalid crate name"),
        (["crates", "crawl", ""], "invalid crate name"),
        (["crates", "crawl", "x" * 65], "longer than 64"),
        (["crates", "crawl", "sérde"], "ASCII"),
        (["crates", "lock", "--lockfile", "{lockfile}"], "not TOML"),
        (["crates", "seed", "--file", "{seeds}"], ":2: invalid crate name"),
    ],
)
def test_bad_input_leaves_the_database_as_it_was(
    mirror: Mirror, tmp_path: Path, args: list[str], message: str
) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    assert stagecrawl("crates", "crawl", "serde", "--db", url, *mirror.urls()).returncode == 0
    before = dump(url)
    (tmp_path / "Cargo.lock").write_text("[[package]\nname = ")
    (tmp_path / "seeds.txt").write_text("serde\n../etc/passwd\n")
    filled = [
        a.format(lockfile=tmp_path / "Cargo.lock", seeds=tmp_path / "seeds.txt") for a in args
    ]
    done = stagecrawl(*filled, "--db", url, *mirror.urls())
    assert done.returncode == 2
    assert message in one_line(done.stderr)
    assert dump(url) == before


def test_unreachable_database(mirror: Mirror) -> None:
    done = stagecrawl(
        "crates",
        "crawl",
        "serde",
        "--db",
        "postgresql+psycopg://nobody@127.0.0.1:1/none",
        *mirror.urls(),
    )
    assert done.returncode == 2 and "cannot reach database" in one_line(done.stderr)


def test_read_only_output_folder(mirror: Mirror, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "ro", "size=1m,ro") as folder:
        crawl = stagecrawl(
            "crates", "crawl", "serde", "--db", f"sqlite:///{folder / 'x.db'}", *mirror.urls()
        )
        assert crawl.returncode == 2, crawl.stderr
        assert "read-only" in one_line(crawl.stderr).lower() or "readonly" in crawl.stderr
        demo = stagecrawl("demo", "--out", str(folder / "demo"))
        assert demo.returncode == 2 and "cannot write" in one_line(demo.stderr)


def test_full_disk_keeps_what_was_written(mirror: Mirror, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "small", "size=4m") as folder:
        url = f"sqlite:///{folder / 'x.db'}"
        first = stagecrawl("crates", "crawl", "libc", "--db", url, *mirror.urls())
        assert first.returncode == 0, first.stderr
        before = dump(url)
        with contextlib.suppress(OSError), open(folder / "filler", "wb") as filler:
            while True:
                filler.write(b"\0" * 4096)
                filler.flush()
        done = stagecrawl("crates", "crawl", "serde", "tokio", "regex", "--db", url, *mirror.urls())
        assert done.returncode == 2, done.stderr
        assert "full" in one_line(done.stderr)
        (folder / "filler").unlink()
        after = dump(url)
        for table, rows in before.items():
            kept = [r for r in after[table] if r in rows]
            assert kept == rows, table  # everything written before the disk filled is intact
