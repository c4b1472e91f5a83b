"""The lock modes' git cache survives any end of a run: a clone stopped by SIGINT, SIGTERM,
kill -9 or git's timeout leaves nothing a later run trips on, and a damaged cache entry is
cloned again. Real git, on repositories the test makes."""

from __future__ import annotations

import os
import random
import shutil
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stagecrawl.engine.git import COMPLETE_MARKER, GitRepo
from stagecrawl.errors import InputError
from tests.cli import spawn, stagecrawl

TAGS = (10, 90, 170)


def fast_import(git_dir: Path, commits: int, blob_size: int, seed: int = 7) -> None:
    """A bare repository of `commits` commits, each adding `blob_size` random bytes (nothing
    to compress or to delta), with a requirements.txt at the commits in TAGS, tagged `vN`."""
    subprocess.run(["git", "init", "-q", "--bare", str(git_dir)], check=True)
    rnd = random.Random(seed)
    stream = []
    for c in range(commits):
        message = b"commit %d" % c
        stream.append(
            b"commit refs/heads/main\nmark :%d\ncommitter t <t@example.org> %d +0000\n"
            b"data %d\n%s\n" % (c + 1, 1_700_000_000 + c, len(message), message)
        )
        blob = rnd.randbytes(blob_size)
        stream.append(b"M 100644 inline data/f%d.bin\ndata %d\n%s\n" % (c % 40, len(blob), blob))
        if c in TAGS:
            pins = b"requests==2.%d.0\nsix==1.%d.0\n" % (c, c)
            stream.append(b"M 100644 inline requirements.txt\ndata %d\n%s\n" % (len(pins), pins))
        stream.append(b"\n")
    stream += [b"reset refs/tags/v%d\nfrom :%d\n\n" % (c, c + 1) for c in TAGS]
    subprocess.run(
        ["git", "--git-dir", str(git_dir), "fast-import", "--quiet"],
        input=b"".join(stream),
        check=True,
    )


def explode(git_dir: Path) -> None:
    """Every object loose: a clone must compress them all again (it cannot copy a pack)."""
    pack_dir = git_dir / "objects" / "pack"
    for pack in list(pack_dir.glob("*.pack")):
        moved = git_dir / pack.name
        pack.rename(moved)
        for other in pack_dir.glob(f"{pack.stem}.*"):
            other.unlink()
        with open(moved, "rb") as data:
            subprocess.run(
                ["git", "--git-dir", str(git_dir), "unpack-objects", "-q"], stdin=data, check=True
            )
        moved.unlink()


@pytest.fixture(scope="module")
def slow_repo(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A repository whose clone over file:// takes a while (about a second here): 16 MB of
    loose random objects, no delta search. A URL, so git packs it as for a remote."""
    git_dir = tmp_path_factory.mktemp("origin") / "slow.git"
    fast_import(git_dir, commits=200, blob_size=80_000)
    explode(git_dir)
    subprocess.run(["git", "--git-dir", str(git_dir), "config", "pack.window", "0"], check=True)
    return f"file://{git_dir}"


@pytest.fixture
def small_repo(tmp_path: Path) -> Path:
    git_dir = tmp_path / "origin" / "small.git"
    fast_import(git_dir, commits=180, blob_size=200)
    return git_dir


def git(git_dir: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "--git-dir", str(git_dir), *args], check=True, capture_output=True, text=True
    )
    return done.stdout


def cache_listing(cache: Path) -> list[str]:
    """What the cache's repos folder holds (entries, leftovers, lock files)."""
    folder = cache / "repos"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def leftovers(cache: Path) -> list[str]:
    return [name for name in cache_listing(cache) if name.startswith(".") or ".lock" in name]


async def exported(repo: GitRepo, tag: str, tmp_path: Path) -> str:
    tree = tmp_path / f"tree-{tag}-{time.monotonic_ns()}"
    tree.mkdir()
    await repo.export(tag, tree)
    return (tree / "requirements.txt").read_text()


def list_rows(db: Path) -> list[tuple[object, ...]]:
    """The PyPI LIST as `lock` leaves it, without the columns that only say when."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(
            "SELECT NAME, VERSION, SOURCE, RESOLVE_KIND, REF_TAGS, PROCESSED"
            " FROM TB_COMP_LIB_PYPI_LIST ORDER BY NAME, VERSION"
        ).fetchall()
    finally:
        conn.close()


def gits_working_in(folder: Path) -> list[int]:
    """PIDs of git processes whose command line names `folder` (a killed run's git goes on:
    it runs in its own session)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"git") and any(str(folder).encode() in a for a in argv):
            found.append(int(entry.name))
    return found


def wait_for_gits_to_end(folder: Path, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while gits_working_in(folder):
        assert time.monotonic() < deadline, "a killed run's git is still running"
        time.sleep(0.1)


def lock_args(url: str, run: Path) -> list[str]:
    db = run / "stagecrawl.db"
    return ["pypi", "lock", url, "--all-tags", "--db", f"sqlite:///{db}", "--cache-dir", str(run)]


@pytest.mark.slow
def test_a_lock_stopped_anywhere_in_its_clone_never_breaks_the_next_run(
    slow_repo: str, tmp_path: Path
) -> None:
    """SIGINT, SIGTERM and kill -9 at random moments of `pypi lock` while it clones (and
    around): the plain rerun on the same cache and database succeeds and equals a clean run."""
    clean = tmp_path / "clean"
    started = time.monotonic()
    done = stagecrawl(*lock_args(slow_repo, clean))
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    expected = list_rows(clean / "stagecrawl.db")
    assert len(expected) == 2 * len(TAGS)
    assert leftovers(clean) == []

    moments = random.Random(20261231)
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
    mid_clone = 0
    for attempt in range(24):
        run = tmp_path / f"run{attempt}"
        process = spawn(*lock_args(slow_repo, run))
        if attempt % 2:  # a moment inside the clone: once its folder is there
            deadline = time.monotonic() + 60
            while not any(".tmp-clone-" in n for n in cache_listing(run)):
                if process.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.005)
            time.sleep(moments.uniform(0, took / 2))
        else:  # any moment of the run, its start included
            time.sleep(moments.uniform(0, took))
        mid_clone += any(".tmp-clone-" in n for n in cache_listing(run))
        sent = signals[attempt % 3]
        process.send_signal(sent)
        process.communicate(timeout=120)
        if sent != signal.SIGKILL and process.returncode in (130, 143):
            # a stopped run kills its git and removes its clone before it exits
            assert not any(".tmp-" in n for n in cache_listing(run)), (attempt, sent)
        again = stagecrawl(*lock_args(slow_repo, run))
        assert again.returncode == 0, (attempt, sent, again.stderr)
        assert list_rows(run / "stagecrawl.db") == expected, (attempt, sent)
    assert mid_clone >= 6, f"only {mid_clone} stops landed while a clone was being made"

    # What killed runs' gits left (they outlive stagecrawl) is gone after the next run.
    wait_for_gits_to_end(tmp_path)
    for attempt in range(24):
        run = tmp_path / f"run{attempt}"
        again = stagecrawl(*lock_args(slow_repo, run))
        assert again.returncode == 0, (attempt, again.stderr)
        assert cache_listing(run) == cache_listing(clean), attempt


@pytest.mark.slow
async def test_a_git_timeout_mid_clone_leaves_nothing_and_the_next_run_clones(
    slow_repo: str, tmp_path: Path
) -> None:
    reference = GitRepo(slow_repo, tmp_path / "reference")
    started = time.monotonic()
    await reference.sync()
    took = time.monotonic() - started
    expected = {tag: await exported(reference, tag, tmp_path) for tag in await reference.tags()}

    moments = random.Random(5)
    timed_out = 0
    for attempt in range(20):
        cache = tmp_path / f"cache{attempt}"
        hasty = GitRepo(slow_repo, cache, timeout=moments.uniform(0.02, 0.9) * took)
        try:
            await hasty.sync()
        except InputError as exc:
            assert "took longer than" in str(exc)
            timed_out += 1
            # nothing half-made stays in the cache: no entry, no leftover, no lock file
            assert cache_listing(cache) == [], attempt
        else:
            assert cache_listing(cache) == [hasty.path.name], attempt
        repo = GitRepo(slow_repo, cache)
        await repo.sync()
        assert {tag: await exported(repo, tag, tmp_path) for tag in await repo.tags()} == expected
    assert timed_out >= 10, f"only {timed_out} syncs timed out"


@pytest.fixture
def synced(small_repo: Path, tmp_path: Path) -> Iterator[GitRepo]:
    yield GitRepo(str(small_repo), tmp_path / "cache")


async def test_a_clone_an_older_run_was_killed_in_is_cloned_again(
    synced: GitRepo, small_repo: Path, tmp_path: Path
) -> None:
    """What `git clone --bare` leaves when killed: HEAD, config and an empty object store
    (an older stagecrawl cloned in place, then decided by HEAD that the clone was there)."""
    subprocess.run(["git", "init", "-q", "--bare", str(synced.path)], check=True)
    (synced.path / "objects" / "pack" / "tmp_pack_Ab12Cd").write_bytes(b"PACK\0\0\0\2")
    await synced.sync()
    assert await synced.tags() == ["v10", "v170", "v90"]
    assert "requests==2.90.0" in await exported(synced, "v90", tmp_path)
    assert leftovers(tmp_path / "cache") == []


@pytest.mark.parametrize("damage", ["objects lost", "HEAD garbled", "refs to nowhere"])
async def test_a_damaged_cache_entry_is_cloned_again(
    synced: GitRepo, tmp_path: Path, damage: str
) -> None:
    await synced.sync()
    entry = synced.path
    if damage == "objects lost":
        for pack in (entry / "objects" / "pack").iterdir():
            pack.unlink()
    elif damage == "HEAD garbled":
        (entry / "HEAD").write_text("not a ref\n")
    else:
        (entry / "packed-refs").write_text(f"{'ab' * 20} refs/tags/v10\n")
    await synced.sync()
    assert await synced.tags() == ["v10", "v170", "v90"]
    assert "requests==2.10.0" in await exported(synced, "v10", tmp_path)
    assert git(entry, "fsck", "--connectivity-only") == ""


async def test_an_object_only_an_export_reads_is_found_missing_and_cloned_again(
    synced: GitRepo, tmp_path: Path
) -> None:
    """A blob under a tag is gone: the refs still look whole, the export fails, the entry is
    cloned again and the export done once more."""
    await synced.sync()
    entry = synced.path
    blob = git(entry, "rev-parse", "v90:requirements.txt").strip()
    explode(entry)
    (entry / "objects" / blob[:2] / blob[2:]).unlink()
    assert "requests==2.90.0" in await exported(synced, "v90", tmp_path)
    assert "requests==2.170.0" in await exported(synced, "v170", tmp_path)


async def test_a_tag_that_does_not_exist_is_still_not_found(
    synced: GitRepo, tmp_path: Path
) -> None:
    await synced.sync()
    with pytest.raises(InputError, match="tag v9 not found"):
        await exported(synced, "v9", tmp_path)


async def test_git_lock_files_a_killed_fetch_left_do_not_stop_the_next_fetch(
    synced: GitRepo, small_repo: Path, tmp_path: Path
) -> None:
    await synced.sync()
    for stale in ("refs/heads/main.lock", "refs/tags/v10.lock", "packed-refs.lock"):
        (synced.path / stale).write_text("")
    # the origin moves on: a new tag the fetch must bring
    git(small_repo, "tag", "v999", "v10")
    await synced.sync()
    assert "v999" in await synced.tags()
    assert not list(synced.path.rglob("*.lock"))


async def test_leftovers_of_a_killed_run_beside_the_entry_are_removed(
    synced: GitRepo, tmp_path: Path
) -> None:
    await synced.sync()
    folder = synced.path.parent
    half = folder / f".{synced.path.name}.tmp-clone-4242-0badf00d"
    shutil.copytree(synced.path, half)
    (half / COMPLETE_MARKER).unlink()
    (folder / f".{synced.path.name}.tmp-old-4242-0badf00d").mkdir()
    # the lock file of a run killed with -9 (a pid that is no process)
    (folder / f"{synced.path.name}.lock").write_text(f"{os.uname().nodename} 999999999\n")
    await synced.sync()
    assert cache_listing(tmp_path / "cache") == [synced.path.name]


async def test_a_failed_clone_leaves_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-repo"
    repo = GitRepo(f"file://{missing}", tmp_path / "cache")
    with pytest.raises(InputError, match="cannot clone"):
        await repo.sync()
    assert cache_listing(tmp_path / "cache") == []


async def test_a_remote_gone_is_an_error_and_the_cached_clone_is_kept(
    synced: GitRepo, small_repo: Path, tmp_path: Path
) -> None:
    await synced.sync()
    shutil.rmtree(small_repo)
    with pytest.raises(InputError, match="cannot clone"):
        await synced.sync()
    assert cache_listing(tmp_path / "cache") == [synced.path.name]
    assert "requests==2.10.0" in await exported(synced, "v10", tmp_path)
