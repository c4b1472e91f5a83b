"""Names and versions are checked where they enter (lock files, the seed table, index lines)
against crates.io's own rules: what it could not have published is reported, one line each,
and never queued."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiohttp import web
from sqlalchemy import select

from stagecrawl.crates.index import IndexFormatError, parse_index_file
from stagecrawl.crates.names import validate_version
from stagecrawl.errors import InputError
from stagecrawl.storage.db import Database
from stagecrawl.testing.registry import index_line
from tests.cli import stagecrawl
from tests.crates.conftest import Registry
from tests.crates.kernel import rust

CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"


@pytest.mark.parametrize(
    "version",
    ["0.1.0", "1.0.0-alpha.1", "1.0.0-0a.b-c", "1.0.0+build.007", "18446744073709551615.0.0"],
)
def test_versions_crates_io_publishes_are_accepted(version: str) -> None:
    assert validate_version(version, "a") == version


@pytest.mark.parametrize(
    "version",
    [
        "not.a.ver",
        "1.0",
        "01.0.0",
        "1.0.0-01",  # a numeric pre-release identifier with a leading zero
        "1.0.0-",
        "1.0.0-a..b",
        "1.0.0+",
        "v1.0.0",
        "1.0.0\n",
        " 1.0.0",
        "1.0.0-é",
        "18446744073709551616.0.0",  # past u64
        "1.0.0-" + "a" * 100,
    ],
)
def test_versions_crates_io_refuses_are_refused(version: str) -> None:
    with pytest.raises(InputError, match=r"invalid version .* of crate 'a'"):
        validate_version(version, "a")


def test_index_lines_of_another_crate_or_against_the_rules_are_skipped() -> None:
    body = "\n".join(
        [
            index_line("serde_json", "1.0.0"),
            index_line("other", "1.0.1"),
            index_line("serde_json", "not.a.ver"),
            index_line("../../etc", "1.0.2"),
            index_line("Serde-JSON", "1.0.3"),  # the same crate in another spelling
        ]
    )
    parsed = parse_index_file(body, "serde-json")
    assert [v.vers for v in parsed.versions] == ["1.0.0", "1.0.3"]
    assert [(p.line, p.version) for p in parsed.problems] == [
        (2, "1.0.1"),
        (3, "not.a.ver"),
        (4, "1.0.2"),
    ]
    reasons = [p.reason for p in parsed.problems]
    assert reasons[0] == "names crate 'other', not 'serde-json'"
    assert reasons[1].startswith("invalid version 'not.a.ver'")
    assert reasons[2].startswith("invalid crate name '../../etc'")
    with pytest.raises(IndexFormatError, match="names crate 'b', not 'a'"):
        parse_index_file(index_line("b", "1.0.0"), "a")


def test_an_index_line_nested_too_deep_is_one_unreadable_line() -> None:
    """A line nested deeper than the JSON decoder recurses was a RecursionError that failed
    the whole crate ('unexpected RecursionError'); it is one unreadable line, the others count."""
    deep = "[" * 100_000 + "]" * 100_000
    parsed = parse_index_file("\n".join([index_line("serde", "1.0.0"), deep]), "serde")
    assert [v.vers for v in parsed.versions] == ["1.0.0"]
    assert [(p.line, p.reason) for p in parsed.problems] == [(2, "not JSON: nested too deeply")]


def urls(registry: Registry) -> list[str]:
    return ["--index-url", registry.index.url + "/", "--api-url", registry.api.url + "/"]


def events(db_file: Path) -> set[tuple[str, str]]:
    db = Database(f"sqlite:///{db_file}")
    with db.engine.connect() as conn:
        rows = conn.execute(select(rust(db).list.c.NAME, rust(db).list.c.VERSION)).all()
    db.dispose()
    return {(r[0], r[1]) for r in rows}


def lock_text(*packages: tuple[str, str]) -> str:
    return "version = 3\n" + "".join(
        f'\n[[package]]\nname = "{name}"\nversion = "{version}"\nsource = "{CRATES_IO}"\n'
        for name, version in packages
    )


@pytest.mark.parametrize("pinned_only", [True, False])
def test_lock_packages_against_the_rules_are_reported_and_never_registered(
    registry: Registry, tmp_path: Path, pinned_only: bool
) -> None:
    lockfile = tmp_path / "Cargo.lock"
    lockfile.write_text(lock_text(("a", "0.1.0"), ("../../etc", "1.0.0"), ("cc", "not.a.ver")))
    db_file = tmp_path / "lock.db"
    flags = ["--pinned-only"] if pinned_only else []
    done = stagecrawl(
        "crates", "lock", "--lockfile", str(lockfile), *flags, "--db", f"sqlite:///{db_file}",
        *urls(registry), "--format", "json",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr  # something was skipped: said in the exit code
    assert "Traceback" not in done.stderr
    skipped = [line for line in done.stderr.splitlines() if "never registered" in line]
    assert len(skipped) == 2, done.stderr
    assert "invalid crate name '../../etc'" in skipped[0]
    assert "invalid version 'not.a.ver' of crate 'cc'" in skipped[1]
    document = json.loads(done.stdout)
    assert sorted(document["inputs"][0]["rejected"]) == ["../../etc 1.0.0", "cc not.a.ver"]
    got = events(db_file)
    assert {name for name, _ in got} == {"a"}  # cc's valid versions are not asked for either
    assert ("a", "0.1.0") in got
    collected = stagecrawl("crates", "collect", "--db", f"sqlite:///{db_file}", *urls(registry))
    assert collected.returncode == 0, collected.stderr  # nothing poisoned the queue


def test_an_index_file_naming_another_crate_is_reported_not_collected_under_that_name(
    registry: Registry, tmp_path: Path
) -> None:
    # a's file holds only cc's lines; quick-xml's holds one line of its own and one of cc.
    registry.index.add("/1/a", index_line("cc", "1.0.0") + "\n")
    registry.index.add(
        "/qu/ic/quick-xml",
        index_line("quick-xml", "0.30.0") + "\n" + index_line("cc", "9.9.9") + "\n",
    )
    db_file = tmp_path / "index.db"
    done = stagecrawl(
        "crates", "crawl", "a", "quick-xml", "--db", f"sqlite:///{db_file}", *urls(registry),
        "--format", "json",
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    document = json.loads(done.stdout)
    assert "names crate 'cc', not 'a'" in document["seed"]["failed"]["a"]
    assert document["seed"]["index_problems"]["quick-xml"] == [
        "line 2: names crate 'cc', not 'quick-xml'"
    ]
    assert events(db_file) == {("quick-xml", "0.30.0")}  # nothing registered as cc


def test_html_where_json_was_expected_says_what_came(registry: Registry, tmp_path: Path) -> None:
    async def captive_portal(_request: web.Request) -> web.StreamResponse:
        page = "<!DOCTYPE html>\n<html><head><title>Sign in to the network</title></head></html>"
        return web.Response(text=page, content_type="text/html")

    registry.api.handle("/api/v1/crates/a", captive_portal)
    done = stagecrawl(
        "crates", "crawl", "a", "cc", "--db", f"sqlite:///{tmp_path / 'html.db'}",
        *urls(registry),
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "Expecting value" not in done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith("failed: a:")]
    assert f"expected JSON from {registry.api.url}/api/v1/crates/a, got text/html" in line
    assert "starting '<!DOCTYPE html> <html><head><title>Sign in" in line, line
