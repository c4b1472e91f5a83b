"""Bad input: one line, a non-zero exit, and the database as it was."""

from __future__ import annotations

import contextlib
import json
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.conftest import Mirror, dump, stagecrawl
from tests.services import shared_fixture

NOWHERE = ["--index-url", "http://127.0.0.1:9/", "--api-url", "http://127.0.0.1:9/"]


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
        # a lock file is one resolution: a tag asked beside it would be ignored
        (["crates", "lock", "--lockfile", "{lockfile}", "--tag", "v1"], "with --lockfile"),
        (["crates", "lock", "--lockfile", "{lockfile}", "--all-tags"], "with --lockfile"),
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


@pytest.mark.parametrize(
    "url",
    [
        "mysql+pymysql://u@127.0.0.1:1/x?read_timeout=soon",
        "mysql+pymysql://u@127.0.0.1:1/x?port=abc",
        "mysql+pymysql://u@127.0.0.1:1/x?connect_timeout=1.5.2",
    ],
)
@pytest.mark.parametrize("command", [["status"], ["crates", "crawl", "serde", *NOWHERE]])
def test_a_database_url_query_value_of_the_wrong_type_is_bad_input(
    url: str, command: list[str]
) -> None:
    """A query value the driver converts to a number (PyMySQL's timeouts, its port) and that is
    not one: the URL is refused in one line, exit 2, not an internal error (exit 1)."""
    done = stagecrawl(*command, "--db", url, env={"STAGECRAWL_CONTACT": "t@example.org"})
    assert done.returncode == 2, done.stderr
    assert "cannot use database URL mysql+pymysql://u@127.0.0.1:1/x?" in one_line(done.stderr)


DEEP_TOML = "a = " + "[" * 5000 + "]" * 5000 + "\n"  # deeper than the parser recurses


@pytest.mark.parametrize(
    ("args", "file", "text", "message"),
    [
        (["crates", "audit", "--lockfile", "{f}"], "Cargo.lock", DEEP_TOML, "not TOML"),
        (["crates", "lock", "--pinned-only", "--lockfile", "{f}"], "Cargo.lock", DEEP_TOML,
         "not TOML"),
        (["crates", "licenses", "check", "--allow", "MIT", "--lockfile", "{f}"], "Cargo.lock",
         DEEP_TOML, "not TOML"),
        (["crates", "audit", "serde@1.0.0", "--config", "{f}"], "stagecrawl.toml", DEEP_TOML,
         "not TOML"),
        (["pypi", "audit", "--lockfile", "{f}"], "uv.lock", DEEP_TOML, "not TOML"),
        (["pypi", "audit", "--lockfile", "{f}"], "deps.lock", DEEP_TOML, "not a lock file"),
        (["pypi", "lock", "--lockfile", "{f}"], "pylock.toml", DEEP_TOML, "not TOML"),
        (["licenses", "import", "{f}"], "licenses.json", "[" * 5000 + "]" * 5000,
         "is not JSON stagecrawl reads"),
        (["licenses", "import", "{f}"], "licenses.csv", "ID,NAME_SHORT\n1," + "x" * 200_000,
         "is not CSV stagecrawl reads: field larger than field limit"),
    ],
)  # fmt: skip
def test_input_files_nested_too_deep_or_too_wide_are_bad_input(
    tmp_path: Path, args: list[str], file: str, text: str, message: str
) -> None:
    """A lock file, a config or a license file nested deeper than its parser recurses (or a
    CSV field past the csv module's limit): one line naming the file and exit 2, not an
    'internal error' and exit 1 (the exit a CI gate reads as 'vulnerable')."""
    path = tmp_path / file
    path.write_text(text)
    filled = [a.replace("{f}", str(path)) for a in args]
    done = stagecrawl(*filled, "--db", f"sqlite:///{tmp_path / 'x.db'}")
    assert done.returncode == 2, done.stderr
    line = one_line(done.stderr)
    assert file in line and message in line and "internal error" not in line


def test_read_only_output_folder(mirror: Mirror, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "ro", "size=1m,ro") as folder:
        crawl = stagecrawl(
            "crates", "crawl", "serde", "--db", f"sqlite:///{folder / 'x.db'}", *mirror.urls()
        )
        assert crawl.returncode == 2, crawl.stderr
        assert "read-only" in one_line(crawl.stderr).lower() or "readonly" in crawl.stderr
        demo = stagecrawl("demo", "--out", str(folder / "demo"))
        assert demo.returncode == 2 and "cannot write" in one_line(demo.stderr)


def test_a_database_on_read_only_media_is_read(mirror: Mirror, tmp_path: Path) -> None:
    """A database file copied alone onto read-only media (a snapshot, a read-only volume) is
    read by the read-only commands: SQLite cannot make the WAL index there, and said only
    'unable to open database file'. With commits still in its WAL it is refused in one line
    that says why."""
    made = tmp_path / "made.db"
    crawl = stagecrawl("crates", "crawl", "serde", "--db", f"sqlite:///{made}", *mirror.urls())
    assert crawl.returncode == 0, crawl.stderr
    # The command merged its WAL into the file as it exited: the file alone is the database.
    wal = tmp_path / "made.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    with tmpfs(tmp_path / "ro", "size=4m") as folder:
        (folder / "x.db").write_bytes(made.read_bytes())
        (folder / "pending.db").write_bytes(made.read_bytes())
        (folder / "pending.db-wal").write_bytes(b"\0" * 4096)  # commits not merged yet
        remounted = subprocess.run(["mount", "-o", "remount,ro", str(folder)], capture_output=True)
        assert remounted.returncode == 0, remounted.stderr
        status = stagecrawl("status", "--format", "json", "--db", f"sqlite:///{folder / 'x.db'}")
        assert status.returncode == 0, status.stderr
        versions = len(dump(f"sqlite:///{made}")["TB_COMP_LIB_VERSION_RUST"])
        assert versions > 0 and json.loads(status.stdout)["crates"]["versions"] == versions
        refused = stagecrawl("status", "--db", f"sqlite:///{folder / 'pending.db'}")
        assert refused.returncode == 2
        assert "read-only file system and pending.db-wal holds commits" in one_line(refused.stderr)


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


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "--concurrency must be at least 1, got 0"),
        (["--api-rate", "0"], "--api-rate must be greater than 0"),
        (["--api-rate", "-1"], "--api-rate must be greater than 0"),
        (["--api-rate", "nan"], "--api-rate must be a finite number, got nan"),
        (["--index-url", "ftp://x"], "--index-url must be an http(s) URL, got 'ftp://x'"),
        (["--index-url", "index.crates.io/"], "--index-url must be an http(s) URL"),
        (["--api-budget", "5/0s"], "--api-budget: a budget needs a limit ≥ 1 and a window > 0"),
        (["--redis-url", "127.0.0.1:6379"], "--redis-url must be a redis://, rediss:// or unix://"),
        # Sizes have documented upper bounds (docs/operations.md).
        (["--concurrency", "10000000"], "--concurrency must be at most 1024, got 10000000"),
        (["--api-burst", "5000"], "--api-burst must be at most 1000"),
        (["--lease-seconds", "1e12"], "--lease-seconds must be at most 86400"),
        (["--grace-period", "99999"], "--grace-period must be at most 3600"),
        (["--api-rate", "1e300"], "--api-rate must be at most 1e+06"),
        # Malformed URLs are configuration mistakes, not internal errors.
        (["--index-url", "http://127.0.0.1:notaport/"], "--index-url must be an http(s) URL"),
        (["--api-url", "http://[x/"], "--api-url must be an http(s) URL"),
        (["--redis-url", "redis://[x"], "--redis-url must be a redis://, rediss:// or unix://"),
        (["--redis-url", "redis://127.0.0.1:notaport/0"], "--redis-url must be a redis://"),
        (["--redis-url", "redis://127.0.0.1:6379/zero"], "--redis-url must be a redis://"),
        (["--db", "mysql+pymysql://u@127.0.0.1:1/x?password=p4ss&x=1"],
         "--db has query parameters the MySQL driver (PyMySQL) does not take: x"),
        (["--db", "postgresql+psycopg://u@127.0.0.1:notaport/x"],
         "--db has a port that is not a number"),
        (["--db", "mysql+pymysql://u@[x/db"], "--db is malformed"),
        (["--db", "crates.db"], "--db must look like sqlite:///PATH"),
        # In memory, each connection has its own empty database: "no such table" came next.
        (["--db", "sqlite://"], "--db names no file (an in-memory database keeps nothing)"),
        (["--db", "sqlite:///:memory:"], "--db names no file"),
    ],
)  # fmt: skip
def test_bad_options_are_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    db = tmp_path / "never.db"
    done = stagecrawl("crates", "crawl", "serde", "--db", f"sqlite:///{db}", *NOWHERE, *args)
    assert done.returncode == 2, done.stderr
    assert message in one_line(done.stderr) and done.stdout == ""
    assert not db.exists()  # refused before anything was opened


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"STAGECRAWL_API_RATE": "abc"}, "STAGECRAWL_API_RATE must be a number, got 'abc'"),
        ({"STAGECRAWL_API_BUDGET": "junk"}, "STAGECRAWL_API_BUDGET: a budget is LIMIT/WINDOW"),
        ({"STAGECRAWL_CONCURRENCY": "many"}, "STAGECRAWL_CONCURRENCY must be a whole number"),
        ({"STAGECRAWL_CONCURRENCY": "5000"}, "STAGECRAWL_CONCURRENCY must be at most 1024"),
        ({"STAGECRAWL_MAX_BODY_MB": "1e9"}, "STAGECRAWL_MAX_BODY_MB must be at most 4096"),
        ({"STAGECRAWL_RETRIES": "1000"}, "STAGECRAWL_RETRIES must be at most 100"),
        ({"STAGECRAWL_REDIS_URL": "redis://[x"}, "STAGECRAWL_REDIS_URL must be a redis://"),
        ({"STAGECRAWL_LEASE_SECONDS": "1e12"}, "STAGECRAWL_LEASE_SECONDS must be at most 86400"),
    ],
)
def test_bad_environment_values_are_one_line_and_exit_2(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    db = tmp_path / "never.db"
    done = stagecrawl("crates", "collect", "--db", f"sqlite:///{db}", *NOWHERE, env=env)
    assert done.returncode == 2 and message in one_line(done.stderr)
    assert not db.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["aircraft", "crawl", "--out", "{tmp}", "--batch", "51"], "--batch"),
        (["aircraft", "crawl", "--out", "{tmp}", "--concurrency", "5000"],
         "--concurrency must be at most 1024"),
        (["aircraft", "crawl", "--out", "{tmp}", "--sparql-url", "http://h:notaport/"],
         "--sparql-url must be an http(s) URL"),
        (["crates", "dbdump", "--source", "http://h:notaport/d.tar.gz", "--db", "sqlite:///{tmp}/x.db"],
         "--source must be an http(s) URL"),
        # was an internal error (OverflowError), exit 1
        (["crates", "dbdump", "--source", "{tmp}/d.tar.gz", "--max-gb", "inf"],
         "Invalid value for '--max-gb'"),
        # was an internal error (OverflowError), exit 1: the exit a CI gate reads as failed
        (["crates", "audit", "serde@1.0.0", "--max-advisory-age", "99999999999999999999",
          "--db", "sqlite:///{tmp}/x.db"], "--max-advisory-age takes days"),
        # a mistyped folder: was an empty specs.csv written there (the folder made), exit 0
        (["aircraft", "export", "--out", "{tmp}/nothing-here"], "no specs.json in"),
    ],
)  # fmt: skip
def test_other_commands_refuse_bad_configuration_in_one_line(
    tmp_path: Path, args: list[str], message: str
) -> None:
    done = stagecrawl(*(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert done.returncode == 2, done.stderr
    assert message in one_line(done.stderr) and "Traceback" not in done.stderr
    assert not (tmp_path / "nothing-here").exists()


def test_version() -> None:
    from stagecrawl import __version__

    done = stagecrawl("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"stagecrawl {__version__}" and done.stderr == ""


@pytest.mark.parametrize(
    "command",
    [
        ["status"],
        ["status", "--format", "json"],
        ["crates", "audit", "serde@1.0.0"],
        ["crates", "licenses", "check", "--allow", "MIT"],
    ],
)
def test_read_only_commands_create_nothing(tmp_path: Path, command: list[str]) -> None:
    missing = tmp_path / "nonexistent"
    done = stagecrawl(*command, "--db", f"sqlite:///{missing / 'dir' / 'x.db'}")
    assert done.returncode == 2, done.stderr
    assert f"no database at {missing / 'dir' / 'x.db'}" in one_line(done.stderr)
    assert done.stdout == "" and not missing.exists()


def test_an_index_line_that_is_not_utf8_costs_only_its_version(
    mirror: Mirror, tmp_path: Path
) -> None:
    lines = (mirror.root / "index" / "sm" / "al" / "smallvec").read_bytes().split(b"\n")
    assert json.loads(lines[2])["vers"] == "1.6.0"
    lines[2] = lines[2].replace(b'"cksum"', b'"cks\xe9um"')  # Latin-1 bytes, not UTF-8
    at = lines[2].index(b"\xe9") + 1
    mirror.index.rule("/sm/al/smallvec", body=b"\n".join(lines))
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    done = stagecrawl(
        "crates", "crawl", "smallvec", "--db", url, *mirror.urls(), "--format", "json"
    )
    assert done.returncode == 1, done.stderr  # something was left out: said in the exit code
    assert "Traceback" not in done.stderr
    collected = {e["VERSION"] for e in dump(url)["TB_COMP_LIB_VERSION_RUST"]}
    assert collected == {"0.6.9", "0.6.14", "1.6.1", "1.13.2"}
    problem = f"line 3: not UTF-8 (byte 0xe9 at byte {at})"
    assert json.loads(done.stdout)["seed"]["index_problems"] == {"smallvec": [problem]}
    skipped = [line for line in done.stderr.splitlines() if line.startswith("skipped:")]
    assert skipped == [f"skipped: smallvec: unreadable index lines: {problem}"]


def lock_file(tmp_path: Path, version: int) -> Path:
    path = tmp_path / "Cargo.lock"
    path.write_text(
        f'version = {version}\n\n[[package]]\nname = "serde"\nversion = "1.0.204"\n'
        'source = "registry+https://github.com/rust-lang/crates.io-index"\n'
    )
    return path


@pytest.mark.parametrize("command", [["crates", "lock"], ["crates", "audit"]])
def test_a_lock_file_format_from_the_future_is_refused(tmp_path: Path, command: list[str]) -> None:
    db = tmp_path / "never.db"
    path = lock_file(tmp_path, 99)
    done = stagecrawl(*command, "--lockfile", str(path), "--db", f"sqlite:///{db}")
    assert done.returncode == 2, done.stderr
    line = one_line(done.stderr)
    assert "Cargo.lock format version 99 is not one stagecrawl reads" in line and str(path) in line
    assert not db.exists()


def test_pinned_only_needs_nothing_but_the_lock_file(tmp_path: Path) -> None:
    lock = shared_fixture("rhwp", "latest-main-0.7.19plus", "Cargo.lock")
    document = tomllib.loads(lock.read_text())
    assert len(document["package"]) == 196
    expected = {
        (p["name"], p["version"])
        for p in document["package"]
        if p.get("source") == "registry+https://github.com/rust-lang/crates.io-index"
    }
    assert len(expected) == 194
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    done = stagecrawl(
        "crates", "lock", "--lockfile", str(lock), "--pinned-only", "--db", url, *NOWHERE
    )  # no --contact: not one request is made
    assert done.returncode == 0, done.stderr
    rows = dump(url)["TB_COMP_LIB_RUST_LIST"]
    assert {(r["NAME"], r["VERSION"]) for r in rows} == expected and len(rows) == 194
    assert {r["SOURCE"] for r in rows} == {"lock"} and {r["PROCESSED"] for r in rows} == {0}


def test_seeds_the_index_refused_wait_on_the_seed_ladder(mirror: Mirror, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    first = stagecrawl("crates", "crawl", "serde", "tokio", "--db", url, *NOWHERE)
    assert first.returncode == 1 and "Traceback" not in first.stderr
    status = stagecrawl("status", "--db", url, "--format", "json")
    assert status.returncode == 0, status.stderr
    ladder = json.loads(status.stdout)["crates"]["seed_ladder"]
    assert [(s["crate"], s["state"]) for s in ladder] == [("serde", 30), ("tokio", 30)]
    assert all("cannot reach 127.0.0.1:9" in s["reason"] for s in ladder)
    table = stagecrawl("status", "--db", url)
    assert "seed ladder: serde" in table.stdout and "seed ladder: tokio" in table.stdout
    again = stagecrawl("crates", "collect", "--db", url, *mirror.urls())  # no names: the ladder
    assert again.returncode == 0, again.stderr
    versions = {(v["NAME"], v["VERSION"]) for v in dump(url)["TB_COMP_LIB_VERSION_RUST"]}
    assert {name for name, _ in versions} == {"serde", "tokio"} and len(versions) == 5
    after = json.loads(stagecrawl("status", "--db", url, "--format", "json").stdout)
    assert after["crates"]["seed_ladder"] == []


def test_redis_unreachable_at_the_start(mirror: Mirror, tmp_path: Path) -> None:
    db = tmp_path / "never.db"
    done = stagecrawl(
        "crates", "crawl", "serde", "--db", f"sqlite:///{db}", *mirror.urls(),
        "--redis-url", "redis://user:SECRET-r3dis@127.0.0.1:1/0",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    line = one_line(done.stderr)
    assert "cannot reach Redis at redis://user:***@127.0.0.1:1/0" in line
    assert "SECRET-r3dis" not in done.stderr + done.stdout
    assert not db.exists() and not mirror.index.log  # nothing opened, nothing asked


def test_the_readme_main_job_offline_says_why(tmp_path: Path) -> None:
    """`stagecrawl crates crawl quick-xml --contact you@example.org` without a network: a
    whole line naming the crate and the reason, exit 1 (an unreachable loopback port stands
    in for the missing network; this test never leaves the machine)."""
    done = stagecrawl(
        "crates", "crawl", "quick-xml", "--contact", "you@example.org", *NOWHERE, cwd=tmp_path
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    failed = [line for line in done.stderr.splitlines() if line.startswith("failed:")]
    assert len(failed) == 1, done.stderr
    assert failed[0].startswith("failed: quick-xml: index: cannot reach 127.0.0.1:9: ")
    assert "Connect call failed" in failed[0]
    assert "http://127.0.0.1:9/qu/ic/quick-xml" in failed[0]  # the whole reason, one line
