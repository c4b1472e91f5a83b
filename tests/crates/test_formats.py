"""Names, semver ordering, and index parsing (also on real sparse-index files)."""

from __future__ import annotations

import json

import pytest

from stagecrawl.crates.index import IndexFormatError, IndexProblem, parse_index_file
from stagecrawl.crates.names import event_id, identity_key, index_path, spelling_variants
from stagecrawl.crates.semver import Version, latest_version, sort_key
from stagecrawl.errors import InputError
from stagecrawl.storage.db import dumps
from tests.services import needs_shared, shared_path

SHARED_INDEX = shared_path("crates-index")


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


def line(vers: str, **extra: object) -> str:
    entry = {"name": "a", "vers": vers, "deps": [], "cksum": "00", "features": {}, "yanked": False}
    return json.dumps({**entry, **extra})


def test_a_bad_line_is_skipped_and_reported_while_the_good_ones_are_read() -> None:
    bad_utf8 = line("0.4.0", description="x").encode().replace(b'"x"', b'"\xff\xfe"')
    body = b"\n".join(
        [
            line("0.1.0").encode(),
            b'{"name":"a","vers":"0.2.0","deps":[',  # cut short: not JSON
            line("0.3.0").encode(),
            bad_utf8,
            b'{"name":"a","vers":"0.5.0"}',  # lacks fields
            b"",
            b"[1, 2]",  # JSON, but not an object
            line("0.7.0", deps=[{"req": "^1"}]).encode(),  # a dependency without a name
            line("0.8.0").encode(),
            line("0.9.0", deps=[{"name": "b", "features": 5}]).encode(),  # features not a list
        ]
    )
    parsed = parse_index_file(body)
    assert [v.vers for v in parsed.versions] == ["0.1.0", "0.3.0", "0.8.0"]
    assert [(p.line, p.version) for p in parsed.problems] == [
        (2, "0.2.0"),
        (4, "0.4.0"),
        (5, "0.5.0"),
        (7, None),
        (8, "0.7.0"),
        (10, "0.9.0"),
    ]
    reasons = [str(p) for p in parsed.problems]
    assert reasons[0].startswith("line 2: not JSON")
    assert reasons[1].startswith("line 4: not UTF-8 (byte 0xff")
    assert reasons[2] == "line 5: lacks the field 'cksum'"
    assert reasons[3].startswith("line 7: not a JSON object")
    assert "dependency has no name" in reasons[4]
    assert reasons[5] == "line 10: malformed: 'int' object is not iterable"


def test_only_newline_ends_a_line() -> None:
    # U+2028 may appear raw inside a JSON string (serde_json does not escape it).
    parsed = parse_index_file(line("1.0.0", description="a\u2028b").replace("\\u2028", "\u2028"))
    assert [v.vers for v in parsed.versions] == ["1.0.0"] and parsed.problems == []


def test_a_file_without_one_readable_version_is_an_error() -> None:
    with pytest.raises(IndexFormatError, match="no readable versions: line 1: not JSON"):
        parse_index_file('{"truncated": [1, 2')
    with pytest.raises(IndexFormatError, match="line 1: lacks the field"):
        parse_index_file('{"name":"a"}\n')
    with pytest.raises(IndexFormatError, match="no readable versions"):
        parse_index_file(b"\n\n")
    assert str(IndexProblem(3, "not JSON: x", None)) == "line 3: not JSON: x"


@needs_shared("crates-index")
def test_real_index_files_parse_completely() -> None:
    files = [p for p in SHARED_INDEX.rglob("*") if p.is_file() and p.parent != SHARED_INDEX]
    assert len(files) >= 15
    for path in files:
        body = path.read_bytes()
        parsed = parse_index_file(body)
        assert parsed.problems == [], path  # every line of the real files is read
        versions = parsed.versions
        assert len(versions) == len([line for line in body.splitlines() if line.strip()])
        assert index_path(versions[0].name) == str(path.relative_to(SHARED_INDEX))
        for version in versions:
            for dep in version.dependencies():
                assert dep["kind"] in {"normal", "dev", "build"}
    libz = parse_index_file((SHARED_INDEX / "li" / "bz" / "libz-sys").read_bytes()).versions
    assert any(v.links == "z" for v in libz)
    serde = parse_index_file((SHARED_INDEX / "se" / "rd" / "serde").read_bytes()).versions
    assert any(v.yanked for v in serde)


@needs_shared("crates-index")
def test_one_damaged_line_of_a_real_file_costs_only_that_version() -> None:
    body = (SHARED_INDEX / "se" / "rd" / "serde").read_bytes()
    lines = body.split(b"\n")
    whole = [json.loads(raw)["vers"] for raw in lines if raw.strip()]  # read independently
    damaged = list(lines)
    damaged[9] = damaged[9].replace(b'"cksum"', b'"cks\xc3\x28um"')  # an invalid UTF-8 pair
    damaged[20] = damaged[20][: len(damaged[20]) // 2]  # cut in the middle
    parsed = parse_index_file(b"\n".join(damaged))
    assert [v.vers for v in parsed.versions] == [v for i, v in enumerate(whole) if i not in (9, 20)]
    assert [(p.line, p.version) for p in parsed.problems] == [(10, whole[9]), (21, whole[20])]
    assert parsed.problems[0].reason.startswith("not UTF-8")
    assert parsed.problems[1].reason.startswith("not JSON")


def _stored_dependencies(deps: list[dict[str, object]]) -> str | None:
    """DEPENDENCIES as the column was written before it was cached a dependency at a time:
    each dependency's dict, the list through the one JSON writer (`dumps`)."""
    return dumps(
        [
            {
                "name": dep.get("package") or dep["name"],
                "rename": dep["name"] if dep.get("package") else None,
                "req": dep.get("req"),
                "kind": dep.get("kind") or "normal",
                "optional": bool(dep.get("optional", False)),
                "default_features": bool(dep.get("default_features", True)),
                "features": list(dep.get("features") or []),
                "target": dep.get("target"),
            }
            for dep in deps
        ]
    )


def _line(deps: list[dict[str, object]], vers: str = "1.0.0") -> str:
    return json.dumps({"name": "demo", "vers": vers, "deps": deps, "cksum": "0" * 64})


@needs_shared("crates-index")
def test_the_dependencies_column_is_what_dumps_writes() -> None:
    """Every version of every real index file, then values that are equal across types (1
    and True: one must not take the other's cached JSON) or cannot be a cache key."""
    files = [p for p in SHARED_INDEX.rglob("*") if p.is_file() and p.parent != SHARED_INDEX]
    checked = 0
    for path in files:
        body = path.read_bytes()
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        for version, entry in zip(parse_index_file(body).versions, lines, strict=True):
            assert version.dependencies_json() == _stored_dependencies(entry["deps"]), path
            checked += 1
    assert checked > 1000
    odd = [
        [{"name": "a", "req": 1, "optional": 1, "features": [1]}],
        [{"name": "a", "req": True, "optional": True, "features": [True]}],
        [{"name": "a", "req": "^1", "target": ["x"], "features": "ab"}],
        [{"name": "r", "package": "real", "req": "^1", "kind": None, "default_features": 0}],
        [{"name": "ü", "req": '"quoted"\u2028', "features": ["s/x"]}] * 2,
        [],
    ]
    for number, deps in enumerate(odd):
        (version,) = parse_index_file(_line(deps, f"1.0.{number}")).versions
        assert version.dependencies_json() == _stored_dependencies(deps), deps
        assert version.dependencies() == json.loads(str(_stored_dependencies(deps)))
