"""Python lock files: every fixture format, malformed ones refused in one line, git tags."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from stagecrawl.engine.git import GitRepo
from stagecrawl.errors import InputError
from stagecrawl.pypi.locks import (
    POETRY,
    PYLOCK,
    REQUIREMENTS,
    UV,
    locks_at_tag,
    parse_lock,
)
from tests.pypi.conftest import PYPI_SHARED

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "pypi"
LOCKS = PYPI_SHARED / "locks"
needs_shared = pytest.mark.skipif(
    not LOCKS.exists(), reason="../shared fixtures not beside the project"
)


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_requirements_with_hashes() -> None:
    lock = parse_lock(read(HERE / "requirements.txt"), "requirements.txt")
    assert lock.kind == REQUIREMENTS
    assert len(lock.pins()) == 32 and not lock.unpinned and not lock.skipped
    first = lock.pins()[0]
    assert (first.name, first.version) == ("annotated-types", "0.8.0")
    assert len(first.hashes) == 2 and first.hashes[0].startswith("sha256:")


def test_requirements_unpinned_lines_are_reported_not_guessed() -> None:
    text = (
        "# comment\nDjango==3.1.5 ; python_version >= '3.8'  # via x\nrequests>=2\nflask\n"
        "-r other.txt\n-e ./local\nfoo @ https://example.org/foo.zip\nPyYAML[extra]===5.4.1\n"
        "six==1.*\n"
    )
    lock = parse_lock(text, "requirements.txt")
    assert [(r.name, r.version) for r in lock.pins()] == [("django", "3.1.5"), ("pyyaml", "5.4.1")]
    # an include read from text alone has no file beside it to read: said, and it fails
    assert lock.unpinned == [
        "line 5: -r other.txt (not followed: no file beside)",
        "line 3: requests>=2",
        "line 4: flask",
        "line 9: six==1.*",
    ]
    assert lock.skipped == ["line 6: -e ./local", "line 7: foo @ https://example.org/foo.zip"]
    named = {(p.name, p.reason.split(" (")[0], p.fails) for p in lock.not_audited}
    assert ("./local", "editable", False) in named
    assert ("foo", "a direct reference", False) in named
    assert ("requests", "not pinned", True) in named


def test_uv_lock_without_revision_skips_the_editable_root() -> None:
    lock = parse_lock(read(HERE / "uv.lock"), "uv.lock")
    assert lock.kind == UV
    assert ("anyio", "4.6.2.post1") in [(r.name, r.version) for r in lock.pins()]
    assert lock.skipped == ["built-by-uv (editable)"]
    assert len(lock.pins()) == 8


def test_pylock_files() -> None:
    pip = parse_lock(read(HERE / "pylock.pip-full.toml"), "pylock.pip-full.toml")
    assert pip.kind == PYLOCK and len(pip.pins()) == 5
    assert all(r.hashes and r.hashes[0].startswith("sha256:") for r in pip.pins())
    example = parse_lock(read(HERE / "pylock.example.toml"), "pylock.example.toml")
    assert [(r.name, r.version) for r in example.pins()] == [
        ("attrs", "25.1.0"),
        ("cattrs", "24.1.2"),
        ("numpy", "2.2.3"),
    ]


@needs_shared
@pytest.mark.parametrize(
    ("path", "kind", "count"),
    [
        ("poetry-lock-1.1/poetry.lock", POETRY, 82),
        ("poetry-lock-2.0/poetry.lock", POETRY, 69),
        ("poetry-lock-2.1/poetry.lock", POETRY, 77),  # + poetry-core from git, skipped
        ("uv-lock-rev3/uv.lock", UV, 76),
        ("pylock-pdm/pylock.toml", PYLOCK, 10),
        ("requirements-warehouse/main.txt", REQUIREMENTS, 184),
    ],
)
def test_every_shared_lock_format(path: str, kind: str, count: int) -> None:
    lock = parse_lock(read(LOCKS / path), path.rsplit("/", 1)[-1], path)
    assert lock.kind == kind
    assert len(lock.pins()) == count
    assert all(r.hashes for r in lock.pins()), [r.name for r in lock.pins() if not r.hashes]
    skipped = {"poetry-lock-2.1/poetry.lock": ["poetry-core (git)"], "uv-lock-rev3/uv.lock": 1}
    expected = skipped.get(path, [])
    assert lock.skipped == expected or len(lock.skipped) == expected


@needs_shared
def test_poetry_1_1_hashes_come_from_metadata_files() -> None:
    lock = parse_lock(read(LOCKS / "poetry-lock-1.1/poetry.lock"), "poetry.lock")
    cachecontrol = next(r for r in lock.pins() if r.name == "cachecontrol")
    assert cachecontrol.version == "0.12.11" and cachecontrol.hashes


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("poetry.lock", "[[package]\nname=", "is not a poetry.lock: not TOML"),
        ("poetry.lock", '[metadata]\nlock-version = "9.0"\n', "lock-version 9.0 is not one"),
        ("uv.lock", "version = 2\n[[package]]\nname='a'\n", "uv.lock version 2 is not one"),
        (
            "pylock.toml",
            'lock-version = "1.0"\n[[packages]]\nname = "x"\n',
            "package x has no version",
        ),
        ("pylock.toml", 'lock-version = "2.0"\n', "lock-version 2.0"),
        ("requirements.txt", "this is not a requirement at all !!\n", "line 1: not a requirement"),
        ("requirements.txt", "\n# only comments\n", "names no requirement"),
        (
            "uv.lock",
            'version = 1\n[[package]]\nname = "bad name!"\nsource = {registry = "x"}\n'
            'version = "1"\n',
            "no valid name",
        ),
        # were TypeErrors, an 'internal error' and exit 1: a name that is a list, files or
        # wheels that are not lists
        ("poetry.lock", '[metadata]\nlock-version = "2.0"\n[[package]]\nname = ["x"]\n'
         'version = "1"\n', "no valid name"),
        ("poetry.lock", '[metadata]\nlock-version = "2.0"\n[[package]]\nname = "x"\n'
         'version = "1"\nfiles = 1\n', "'x': `files` is not a list"),
        ("uv.lock", 'version = 1\n[[package]]\nname = "x"\nversion = "1"\n'
         'source = {registry = "x"}\nwheels = 1\n', "'x': `wheels` is not a list"),
        ("pylock.toml", 'lock-version = "1.0"\n[[packages]]\nname = "x"\nversion = "1"\n'
         "wheels = true\n", "'x': `wheels` is not a list"),
    ],
)  # fmt: skip
def test_malformed_lock_files_are_one_line_errors(name: str, text: str, message: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_lock(text, name)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


async def test_locks_at_each_git_tag(tmp_path: Path) -> None:
    work = tmp_path / "project"
    work.mkdir()
    _git(work, "init", "-q", "-b", "main")
    _git(work, "config", "user.email", "t@example.org")
    _git(work, "config", "user.name", "t")
    (work / "requirements.txt").write_text("requests==2.18.0\nsix==1.11.0\n")
    _git(work, "add", ".")
    _git(work, "commit", "-qm", "one")
    _git(work, "tag", "v1")
    (work / "requirements.txt").unlink()
    (work / "uv.lock").write_text(read(HERE / "uv.lock"))
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "two")
    _git(work, "tag", "v2")
    (work / "uv.lock").unlink()
    (work / "README").write_text("no lock\n")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "three")
    _git(work, "tag", "v3")
    repo = GitRepo(str(work), tmp_path / "cache")
    await repo.sync()
    assert await repo.tags() == ["v1", "v2", "v3"]
    v1 = await locks_at_tag(repo, "v1")
    assert [(lk.kind, [(r.name, r.version) for r in lk.pins()]) for lk in v1] == [
        (REQUIREMENTS, [("requests", "2.18.0"), ("six", "1.11.0")])
    ]
    assert v1[0].where == "project@v1 requirements.txt"
    v2 = await locks_at_tag(repo, "v2")
    assert [lk.kind for lk in v2] == [UV] and len(v2[0].pins()) == 8
    assert await locks_at_tag(repo, "v3") == []
