"""Names, semver ordering, and index parsing (also on real sparse-index files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stagecrawl.crates.index import IndexFormatError, parse_index_file
from stagecrawl.crates.names import event_id, identity_key, index_path, spelling_variants
from stagecrawl.crates.semver import Version, latest_version, sort_key
from stagecrawl.errors import InputError

SHARED_INDEX = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "crates-index"


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("a", "1/a"),
        ("cc", "2/cc"),
        ("Syn", "3/s/syn"),
        ("serde_json", "se/rd/serde_json"),
        ("quick-xml", "qu/ic/quick-xml"),
    ],
)
def test_index_path_rule(name: str, path: str) -> None:
    assert index_path(name) == path


def test_identity_folds_case_and_separators_but_lookups_keep_spelling() -> None:
    assert identity_key("Serde_JSON") == identity_key("serde-json") == "serde-json"
    assert event_id("Serde_JSON", "1.0.0") == event_id("serde-json", "1.0.0")
    assert len(event_id("a", "1.0.0")) == 32
    assert spelling_variants("serde-json") == ["serde-json", "serde_json"]
    assert spelling_variants("a") == ["a"]


@pytest.mark.parametrize("bad", ["../x", "a/b", "", "x" * 65, "naïve", "1a", "-a", "a b"])
def test_invalid_names_are_refused(bad: str) -> None:
    with pytest.raises(InputError):
        index_path(bad)


def test_semver_precedence_as_cargo_orders_it() -> None:
    # The SemVer 2.0 spec's own example chain, plus build metadata ignored for precedence.
    chain = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
        "1.0.1",
        "1.1.0",
        "2.0.0",
    ]
    parsed = [Version.parse(v) for v in chain]
    assert parsed == sorted(reversed(parsed))
    assert Version.parse("1.0.0+build.5") == Version.parse("1.0.0")
    assert sorted(["0.10.0", "0.9.0", "0.2.0"], key=sort_key) == ["0.2.0", "0.9.0", "0.10.0"]
    with pytest.raises(ValueError):
        Version.parse("1.2")


def test_latest_version_prefers_non_yanked_stable() -> None:
    assert latest_version([("1.0.0", False), ("1.0.1", True), ("1.1.0-beta.1", False)]) == "1.0.0"
    assert latest_version([("1.0.0", True), ("1.1.0-rc.1", False)]) == "1.1.0-rc.1"
    assert latest_version([("1.0.0", True), ("0.9.0", True)]) == "1.0.0"


def test_a_malformed_line_is_named() -> None:
    good = '{"name":"a","vers":"0.1.0","deps":[],"cksum":"00","features":{},"yanked":false}'
    with pytest.raises(IndexFormatError, match="line 2 is not JSON"):
        parse_index_file(good + "\n{oops\n")
    with pytest.raises(IndexFormatError, match="line 1 lacks a field"):
        parse_index_file('{"name":"a"}\n')


@pytest.mark.skipif(not SHARED_INDEX.exists(), reason="../shared fixtures not beside the project")
def test_real_index_files_parse_completely() -> None:
    files = [p for p in SHARED_INDEX.rglob("*") if p.is_file() and p.parent != SHARED_INDEX]
    assert len(files) >= 15
    for path in files:
        body = path.read_bytes()
        versions = parse_index_file(body)
        assert len(versions) == len([line for line in body.splitlines() if line.strip()])
        assert index_path(versions[0].name) == str(path.relative_to(SHARED_INDEX))
        for version in versions:
            for dep in version.dependencies():
                assert dep["kind"] in {"normal", "dev", "build"}
    libz = parse_index_file((SHARED_INDEX / "li" / "bz" / "libz-sys").read_bytes())
    assert any(v.links == "z" for v in libz)
    serde = parse_index_file((SHARED_INDEX / "se" / "rd" / "serde").read_bytes())
    assert any(v.yanked for v in serde)
