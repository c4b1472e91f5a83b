"""Go's rules as stagecrawl reads them, each checked against an independent source: version
order against the `semver` package (SemVer 2.0 precedence, which x/mod's order is for canonical
versions), go.mod reading against golang/mod's own golden files and pkgsite's test modules
(../shared/fixtures/go, read at run time), case-encoding and private globs against the
examples of go.dev/ref/mod."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
import semver

from stagecrawl.go import modfile
from stagecrawl.go.client import match_private
from stagecrawl.go.versions import (
    escape,
    go_tag_semver,
    is_pseudo,
    is_valid,
    path_problem,
    sort_key,
)
from tests.services import SHARED

GO = SHARED / "fixtures" / "go"
TESTDATA = GO / "modfile-testdata"


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared Go fixtures are not laid beside the checkout)")
    return path


def test_order_agrees_with_semver_precedence() -> None:
    rng = random.Random(7)
    pres = ["", "-alpha", "-alpha.1", "-alpha.beta", "-beta.2", "-beta.11", "-rc.1", "-0.3.7"]
    versions = [
        f"v{rng.randint(0, 3)}.{rng.randint(0, 3)}.{rng.randint(0, 12)}{rng.choice(pres)}"
        for _ in range(300)
    ]
    ours = sorted(versions, key=sort_key)
    theirs = sorted(versions, key=lambda v: semver.Version.parse(v[1:]))
    assert [semver.Version.parse(v[1:]) for v in ours] == [
        semver.Version.parse(v[1:]) for v in theirs
    ]


def test_go_specifics_of_the_order() -> None:
    # +incompatible is build metadata: ignored; a pseudo-version sits between its base and
    # the next release; an invalid version sorts below every valid one; OSV's bounds lack `v`
    assert sort_key("v2.5.0+incompatible") == sort_key("v2.5.0")
    ordered = [
        "garbage",
        "v0.311.1",
        "v0.311.2-0.20260410083055-07c6232d159b",
        "v0.311.2",
        "v1.0.0-rc.1",
        "v1.0.0",
    ]
    assert sorted(reversed(ordered), key=sort_key) == ordered
    assert sort_key("0.311.2") == sort_key("v0.311.2")
    assert sort_key("v1") == sort_key("v1.0.0") and not is_valid("v1")


def test_the_three_pseudo_version_forms() -> None:
    assert is_pseudo("v0.0.0-20220624214902-1bab6f366d9e")  # vX.0.0-time-hash
    assert is_pseudo("v0.6.0-dev.0.20220419223038-86c51ed26bb4")  # vX.Y.Z-pre.0.time-hash
    assert is_pseudo("v1.2.4-0.20191109021931-daa7c04131f5")  # vX.Y.(Z+1)-0.time-hash
    assert is_pseudo("v17.12.0-ce-rc1.0.20200706150819-a40b877fbb9e+incompatible")
    assert not is_pseudo("v1.2.3-pre") and not is_pseudo("v0.1.0-deprecated")


def test_case_encoding_and_module_paths() -> None:
    # go.dev/ref/mod: github.com/Azure → github.com/!azure; the vulndb's RobotsAndPencils
    assert escape("github.com/RobotsAndPencils/go-saml") == "github.com/!robots!and!pencils/go-saml"
    assert escape("v1.0.0-RC1") == "v1.0.0-!r!c1"
    assert path_problem("github.com/BurntSushi/toml") is None
    assert path_problem("stdlib") is not None  # no dot in the first element
    assert path_problem("GitHub.com/x") is not None
    assert path_problem("example.com/a//b") is not None


def test_private_globs_match_path_prefixes() -> None:
    patterns = ["*.corp.example.com", "rsc.io/private"]
    assert match_private(patterns, "git.corp.example.com/team/mod")
    assert match_private(patterns, "rsc.io/private/quote")
    assert not match_private(patterns, "rsc.io/quote")
    assert not match_private(patterns, "corp.example.com/x")


def test_go_tags_as_osv_versions() -> None:
    assert go_tag_semver("go1.21.3") == "1.21.3"
    assert go_tag_semver("go1.21rc2") == "1.21.0-rc.2"
    assert go_tag_semver("1.13") == "1.13.0"
    assert go_tag_semver("go1") == "1.0.0"
    assert go_tag_semver("default") is None


SYNTAX_ONLY = {"block", "comment", "rule1"}  # read_test.go: their full Parse must fail


def golden_files() -> list[Path]:
    return sorted(need(TESTDATA).glob("*.in")) + sorted(TESTDATA.glob("*.golden"))


def test_golang_mod_golden_files_parse_as_x_mod_says(tmp_path: Path) -> None:
    for path in golden_files():
        text = path.read_text()
        if path.stem in SYNTAX_ONLY:
            with pytest.raises(ValueError):
                modfile.parse(text, strict=True)
            continue
        modfile.parse(text, strict=True)  # every other file passes the full Parse
    for path in sorted((TESTDATA / "work").glob("*.*")):
        if path.suffix in (".in", ".golden") and path.stem != "comment":
            modfile.parse(path.read_text(), strict=True, work=True)


def test_golden_contents() -> None:
    retract = modfile.parse(need(TESTDATA / "retract.in").read_text())
    assert [r[:2] for r in retract.retracts] == [
        ("v1.2.3", "v1.2.3"),
        ("v1.2.3", "v1.2.4"),
        ("v1.2.3", "v1.2.3"),
        ("v1.2.3", "v1.2.4"),
    ]
    replace = modfile.parse((TESTDATA / "replace.in").read_text())
    assert [(r.path, r.version, r.new_path, r.new_version) for r in replace.replaces] == [
        ("xyz", "v1.2.3", "/tmp/z", None),
        ("xyz", "v1.3.4", "my/xyz", "v1.3.4-me"),
        ("w", "v1.0.0", "./a,", None),
        ("w", "v1.0.1", "./a()", None),
        ("w", "v1.0.2", "./a[]", None),
        ("w", "v1.0.3", "./a{}", None),
    ]
    padded = modfile.parse((TESTDATA / "issue70632.in").read_text())
    assert ("golang.org/x/time", "v0.8.0") in [(r.path, r.version) for r in padded.requires]
    goline = modfile.parse((TESTDATA / "goline.in").read_text())
    assert (goline.go, goline.toolchain) == ("1.2.3", "default")
    work = modfile.parse((TESTDATA / "work" / "replace2.in").read_text(), work=True)
    wildcard = [r for r in work.replaces if r.version is None]
    assert [(r.path, r.new_path, r.new_version) for r in wildcard] == [
        ("xyz", "my/other/xyz", "v1.5.4")
    ]
    assert modfile.parse("").module is None


def txtar_gomod(name: str) -> str:
    text = need(TESTDATA / "pkgsite-proxy-testdata" / name).read_text()
    return re.split(r"^-- .* --$", text.split("-- go.mod --\n", 1)[1], flags=re.M)[0]


def test_pkgsite_deprecation_and_retraction_modules() -> None:
    assert modfile.parse(txtar_gomod("deprecated@v1.1.0.txtar")).deprecated == "use something else"
    assert modfile.parse(txtar_gomod("deprecated@v1.0.0.txtar")).deprecated is None
    latest = modfile.parse(txtar_gomod("retractions@v1.2.0.txtar"))
    assert latest.retracts == [("v1.2.0", "v1.2.0", "bad"), ("v1.1.0", "v1.1.0", "worse")]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("// Deprecated: use b\nmodule a\n", "use b"),
        ("module a // Deprecated: use c\n", "use c"),
        ("// deprecated: lower case is not it\nmodule a\n", None),
        ("// Deprecated: detached by a blank line\n\nmodule a\n", None),
        ("// About a.\n//\n// Deprecated: second\n// paragraph.\n//\n// More.\nmodule a\n",
         "second\nparagraph."),
        ("// Not Deprecated: in the middle\nmodule a\n", None),
    ],
)  # fmt: skip
def test_deprecated_exactly_as_x_mod_reads_it(text: str, expected: str | None) -> None:
    assert modfile.parse(text).deprecated == expected


def test_a_dependency_go_mod_keeps_only_what_go_reads() -> None:
    text = (
        "module m\ngo 1.23\nrequire (\n\ta.example/x v1.0.0 // indirect\n\tb.example/y v2.0.0\n)\n"
        "replace a.example/x => ./local\nexclude b.example/y v1.0.0\nunknownverb x\n"
        "retract (\n\t// a comment for the whole block\n\tv1.0.0\n\t[v1.1.0, v1.2.0] // broken\n)\n"
    )
    lax = modfile.parse(text, strict=False)
    assert lax.replaces == [] and lax.excludes == []
    assert [(r.path, r.indirect) for r in lax.requires] == [
        ("a.example/x", True),
        ("b.example/y", False),
    ]
    assert lax.retracts == [
        ("v1.0.0", "v1.0.0", "a comment for the whole block"),
        ("v1.1.0", "v1.2.0", "broken"),
    ]
    with pytest.raises(ValueError, match="unknown directive"):
        modfile.parse(text, strict=True)


def test_the_requires_column_is_what_dumps_writes() -> None:
    """A version's DEPENDENCIES is written out by hand (for speed): it must be byte for byte
    what the storage's canonical JSON makes of the same requires, quotes and non-ASCII too."""
    from stagecrawl.go.plugin import _requires_column
    from stagecrawl.storage.db import dumps

    texts = [p.read_text() for p in sorted(need(GO / "proxy").rglob("*.mod"))]
    texts += [
        'module m\nrequire (\n\t"a.example/q\\"uote" v1.0.0 // indirect\n'
        "\tb.example/\u00fc v0.1.0\n)\n",
        "module m\n",
    ]
    for text in texts:
        requires = modfile.parse_dependency(text).requires
        expected = dumps([{"path": r.path, "version": r.version, "indirect": r.indirect}
                          for r in requires])  # fmt: skip
        assert _requires_column(text) == expected
    assert '"a.example/q\\"uote"' in _requires_column(texts[-2])
