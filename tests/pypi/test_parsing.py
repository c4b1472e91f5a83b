"""Reading what PyPI sends: Simple pages, JSON API replies, core metadata, versions, licenses."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from stagecrawl.pypi.deps import dependencies, dependency
from stagecrawl.pypi.jsonapi import parse_json_api
from stagecrawl.pypi.licenses import classifier_expression, declared_license
from stagecrawl.pypi.metadata import header_fields, parse_core_metadata
from stagecrawl.pypi.names import name_problem, normalize
from stagecrawl.pypi.plugin import REGISTRY
from stagecrawl.pypi.simple import SimpleFormatError, parse_simple_page, version_of
from stagecrawl.pypi.tables import PEP440
from stagecrawl.pypi.versions import sort_key
from stagecrawl.storage.owners import latest_version
from stagecrawl.testing.pypi_origin import SIMPLE_JSON, PyPIOrigin
from tests.pypi.conftest import PYPI_SHARED
from tests.pypi.http import get
from tests.services import needs_shared, shared_fixture

METADATA = PYPI_SHARED / "simple" / "pep658-metadata" / "poetry"


def page(pypi: PyPIOrigin, name: str) -> bytes:
    return get(f"{pypi.url}/simple/{name}/", accept=SIMPLE_JSON).body


def test_names() -> None:
    assert normalize("discord.py") == "discord-py"
    assert normalize("Foo__Bar-.baz") == "foo-bar-baz"
    assert REGISTRY.product_key("PyYAML") == "pyyaml"  # rows are keyed by the PEP 503 name
    assert name_problem("requests") is None
    assert name_problem("-bad") is not None
    assert name_problem("a b") is not None
    assert name_problem("x" * 300) is not None


def test_versions_invalid_kept_below_valid() -> None:
    listed = ["1.10", "unknown", "1.1.4", ".9", "2.0rc1", "2020.12.5.10.49"]
    assert sorted(listed, key=sort_key) == [
        ".9",
        "unknown",
        "1.1.4",
        "1.10",
        "2.0rc1",
        "2020.12.5.10.49",
    ]


def test_latest_version_rule_in_pep440_order() -> None:
    def latest(pairs: list[tuple[str, bool]]) -> str | None:
        return latest_version(pairs, PEP440).latest

    assert latest([("1.0", False), ("2.0", True), ("2.1rc1", False)]) == "1.0"
    assert latest([("1.0.post1", False), ("1.0", False)]) == "1.0.post1"
    assert latest([("1.10", False), ("1.9", False)]) == "1.10"
    assert latest([("2.0", True), ("1.0rc1", False)]) == "1.0rc1"  # no final one
    assert latest([("2.0", True), ("1.0rc1", True)]) == "2.0"  # every one yanked
    assert latest([("unknown", False), ("0.1", False)]) == "0.1"
    assert latest([("unknown", False)]) == "unknown"
    assert latest([]) is None


def test_file_names_give_versions_as_spelled() -> None:
    assert version_of("discord-py", "discord.py-2.0.0-py3-none-any.whl") == "2.0.0"
    assert version_of("poetry-core", "poetry_core-2.1.3.tar.gz") == "2.1.3"
    assert version_of("pyyaml", "PyYAML-3.13.win32-py2.7.exe") == "3.13"
    assert version_of("hbmqtt", "hbmqtt-0.9.6.linux-x86_64.tar.gz") == "0.9.6"  # bdist_dumb
    assert version_of("a", "a-1.0.macosx-10.9-x86_64.tar.gz") == "1.0"
    assert version_of("a", "a-2.1.freebsd-13.1-RELEASE-amd64.zip") == "2.1"
    assert version_of("a", "a-1.0.win-arm64.zip") == "1.0"
    assert version_of("a", "a-1.0.linuxfoo.tar.gz") == "1.0.linuxfoo"  # no platform: kept
    assert version_of("a", "a-1.0+cpu.win32.tar.gz") == "1.0+cpu.win32"  # PEP 440's local label
    assert version_of("trackpy", "trackpy-unknown.tar.gz") == "unknown"
    assert version_of("a-b", "a-b-1.0.zip") == "1.0"
    assert version_of("x", "README.txt") is None


def test_simple_pages_of_every_fixture_project(pypi: PyPIOrigin) -> None:
    for name in sorted(pypi.projects):
        project = parse_simple_page(page(pypi, name), f"{pypi.url}/simple/{name}/", name)
        assert project.name == name
        assert project.releases, name
        assert not project.problems, (name, project.problems)
        listed = json.loads(page(pypi, name)).get("versions")
        if listed is not None:  # PyPI's own list (PEP 700): no version made from a file name
            assert {r.version for r in project.releases} == set(listed), name
        for release in project.releases:
            assert release.files, (name, release.version)
    black = parse_simple_page(page(pypi, "black"), pypi.url, "black")
    assert [r.version for r in black.releases] == ["19.10b0", "21.11b0"]
    kept, yanked = black.releases
    assert yanked.yanked
    # the reason as the page in ../shared gives it (read there, not pasted here)
    files = pypi.project("black").files_of("21.11b0")
    assert files and yanked.yanked_reason == files[0]["yanked"]
    assert not kept.yanked and kept.requires_python == ">=3.6"
    wheel = kept.metadata_file()
    assert wheel is not None and wheel.filename == "black-19.10b0-py36-none-any.whl"
    assert wheel.core_metadata_sha256 and wheel.metadata_url.endswith(".whl.metadata")
    assert wheel.size == 97525 and wheel.upload_time == "2019-10-28T23:53:54.000711Z"


def test_yanked_per_pep_592(pypi: PyPIOrigin) -> None:
    project = parse_simple_page(page(pypi, "yanked"), pypi.url, "yanked")
    (release,) = project.releases
    assert release.yanked and release.yanked_reason == "not good"
    assert release.requires_python is None  # "" on the page is no constraint
    assert project.last_serial is not None
    pypi.yank("requests", "2.18.0", "x")
    pypi.project("requests").page["files"][1]["yanked"] = False  # one file back: not yanked
    requests = parse_simple_page(page(pypi, "requests"), pypi.url, "requests")
    (partly,) = [r for r in requests.releases if r.version == "2.18.0"]
    assert not partly.yanked


def test_versions_without_files_and_pages_without_versions() -> None:
    body = json.dumps(
        {
            "meta": {"api-version": "1.1", "_last-serial": 7},
            "name": "microsoft",
            "versions": ["0.0.1"],
            "files": [],
        }
    ).encode()
    project = parse_simple_page(body, "https://pypi.org/simple/microsoft/", "microsoft")
    assert [(r.version, r.files, r.yanked) for r in project.releases] == [("0.0.1", (), False)]
    assert project.last_serial == 7
    pyflyby = shared_fixture("pypi", "simple", "uv-inline", "pyflyby.json").read_bytes()
    parsed = parse_simple_page(pyflyby, "https://pypi.org/simple/pyflyby/", "pyflyby")
    assert [r.version for r in parsed.releases] == ["1.7.7", "1.7.8"]
    bad = next(f for r in parsed.releases for f in r.files if "1.7.7" in f.filename)
    assert bad.requires_python is not None and ",," in bad.requires_python  # kept as sent


@needs_shared("pypi")
def test_relative_urls_resolve_against_the_page() -> None:
    body = (PYPI_SHARED / "simple" / "pypi-simple" / "argset-relative.json").read_bytes()
    project = parse_simple_page(body, "https://example.org/simple/argset/", "argset")
    urls = [f.url for r in project.releases for f in r.files]
    assert urls and all(u.startswith("https://example.org/simple/argset/packages/") for u in urls)


def test_bad_pages_are_refused() -> None:
    with pytest.raises(SimpleFormatError, match="HTML"):
        parse_simple_page(b"<!DOCTYPE html><html></html>", "u", "x")
    with pytest.raises(SimpleFormatError, match="not JSON"):
        parse_simple_page(b"\x00garbage{", "u", "x")
    with pytest.raises(SimpleFormatError, match="no files"):
        parse_simple_page(b'{"files": "nope"}', "u", "x")
    with pytest.raises(SimpleFormatError, match=r"version 2\.0"):
        parse_simple_page(b'{"meta": {"api-version": "2.0"}, "files": []}', "u", "x")
    # nested deeper than the decoder recurses: was a RecursionError that ended the whole run
    deep = b"[" * 100_000 + b"]" * 100_000
    with pytest.raises(SimpleFormatError, match="not JSON"):
        parse_simple_page(deep, "u", "x")
    with pytest.raises(SimpleFormatError, match="not JSON"):
        parse_json_api(deep)


def test_core_metadata() -> None:
    text = shared_fixture(
        "pypi",
        "simple",
        "pep658-metadata",
        "poetry",
        "requests-2.18.0-py2.py3-none-any.whl.metadata",
    ).read_bytes()
    meta = parse_core_metadata(text)
    assert meta.license == "Apache 2.0" and meta.summary == "Python HTTP for Humans."
    assert meta.provides_extra == ("security", "socks")
    assert "License :: OSI Approved :: Apache Software License" in meta.classifiers
    deps = dependencies(meta.requires_dist)
    assert deps is not None and len(deps) == 9
    assert deps[0] == {
        "name": "certifi",
        "req": ">=2017.4.17",
        "extras": [],
        "marker": None,
        "optional": False,
        "extra": None,
        "url": None,
    }
    socks = [d for d in deps if d["extra"] == "socks"]
    assert {d["name"] for d in socks} == {"pysocks", "win-inet-pton"}
    assert all(d["optional"] for d in socks)


def test_project_urls_and_expression_in_metadata() -> None:
    meta = parse_core_metadata(
        b"Metadata-Version: 2.4\nName: demo\nVersion: 1.0\nLicense-Expression: MIT OR Apache-2.0\n"
        b"Project-URL: Source, https://example.org/src\nRequires-Python: >=3.9\n\nbody text\n"
    )
    assert meta.license_expression == "MIT OR Apache-2.0"
    assert meta.project_urls == {"Source": "https://example.org/src"}
    assert meta.requires_python == ">=3.9" and meta.requires_dist == ()
    assert dependencies(meta.requires_dist) == []  # none declared: an empty list, known


def test_dependencies_unknown_stay_unknown_and_bad_lines_are_kept() -> None:
    assert dependencies(None) is None
    # old-style specifiers in parentheses, as older metadata writes them (made-up names)
    assert dependency("demo-sql (>=0.2.2)")["req"] == ">=0.2.2"
    assert dependency("demo-asgi (<4,>=3.2.10)")["req"] == "<4,>=3.2.10"
    signing = dependency("Demo_NaCl (>=1.4.0) ; extra == 'signing'")
    assert (signing["name"], signing["extra"], signing["optional"]) == (
        "demo-nacl",
        "signing",
        True,
    )
    broken = dependency("foo >=>= 1")
    assert broken["raw"] == "foo >=>= 1" and broken["problem"]


@pytest.mark.parametrize(
    ("path", "name", "requires_dist_known"),
    [
        ("json/poetry-2022/requests.json", "requests", True),
        ("json/poetry-2022/pygame-music-grid.json", "pygame-music-grid", False),
        ("json/cassettes-pypi-json/numpy/1.20.3.json", "numpy", False),
        ("json/cassettes-shippinglabel/Django.json", "Django", True),
        ("json/fetchcode/pypi/asgiref.json", "asgiref", True),
        ("json/cassettes-pypi-json/octocheese.json", "octocheese", True),
    ],
)
@needs_shared("pypi")
def test_json_api_shapes(path: str, name: str, requires_dist_known: bool) -> None:
    release = parse_json_api((PYPI_SHARED / path).read_bytes())
    assert release.display_name == name
    assert (release.requires_dist is not None) == requires_dist_known


@needs_shared("pypi")
def test_json_api_yanked_release_old_shape_and_errors() -> None:
    isodate = parse_json_api((PYPI_SHARED / "json/poetry/isodate/0.7.0.json").read_bytes())
    assert isodate.display_name == "isodate" and isodate.summary
    trackpy = parse_json_api((PYPI_SHARED / "json/poetry-2022/trackpy.json").read_bytes())
    assert trackpy.display_name == "trackpy"
    with pytest.raises(SimpleFormatError):
        parse_json_api(b"<html>")
    with pytest.raises(SimpleFormatError):
        parse_json_api(b'{"info": null}')


def test_license_order_and_classifier_table() -> None:
    apache = "License :: OSI Approved :: Apache Software License"
    mit = "License :: OSI Approved :: MIT License"
    assert classifier_expression([apache, "Programming Language :: Python"]) == "Apache-2.0"
    assert classifier_expression([mit, apache]) == "Apache-2.0 AND MIT"
    assert classifier_expression(["License :: OSI Approved :: BSD License"]) is None
    assert classifier_expression([mit, "License :: OSI Approved :: BSD License"]) is None
    assert classifier_expression([]) is None

    def standardise(text: str) -> str | None:
        return {"Apache 2.0": "Apache-2.0", "MIT": "MIT"}.get(text)

    first = declared_license("MIT OR Apache-2.0", "BSD", [mit], standardise=None)
    assert (first.expression, first.source) == ("MIT OR Apache-2.0", "license-expression")
    text = declared_license(None, "Apache 2.0", [mit], standardise)
    assert (text.expression, text.source, text.text) == ("Apache-2.0", "license", "Apache 2.0")
    quoted = declared_license(None, '"MIT"', [], standardise)
    assert quoted.expression == "MIT"
    placeholder = declared_license(None, "UNKNOWN", [mit], standardise)
    assert (placeholder.expression, placeholder.source) == ("MIT", "classifiers")
    nothing = declared_license(None, "whole license text …", [], standardise)
    assert (nothing.expression, nothing.source, nothing.text) == (
        None,
        None,
        "whole license text …",
    )


@needs_shared("pypi")
def test_every_real_metadata_file_parses() -> None:
    unreadable = []
    for path in sorted(METADATA.glob("*.metadata")):
        meta = parse_core_metadata(path.read_bytes())
        assert header_fields(path.read_text(errors="replace"))["name"], path.name
        unreadable += [
            (path.name, line) for line in meta.requires_dist if "problem" in dependency(line)
        ]
    # The one real broken line (a missing comma in ipython 4.1.0rc1), kept raw, not dropped.
    assert unreadable == [
        ("ipython-4.1.0rc1-py2.py3-none-any.whl.metadata", "setuptools (>=18.5decorator)")
    ]


@pytest.mark.parametrize(
    "times",
    [
        ["2024-01-02T00:00:00.000000Z", "2024-01-01T23:59:59.999999Z"],
        ["2024-01-01T00:00:00Z", "2024-01-01T00:00:00.500000Z", "2023-12-31T23:00:00.1Z"],
        ["2024-01-01T01:00:00+01:00", "2024-01-01T00:30:00Z"],  # an offset: each parsed
        ["0000-00-00T00:00:00Z", "2024-05-01T00:00:00Z"],  # no date: the others
        ["not a time", "2024-05-01T00:00:00.1Z"],
        ["2024-05-01T00:00:00.1Z"],
        [],
    ],
)
def test_a_release_date_is_its_first_upload_in_whole_seconds(times: list[str]) -> None:
    """Against each time parsed by datetime (the upload-times as PyPI gives them, in UTC)."""
    files = [
        {"filename": f"demo-1.0-{i}.whl", "url": f"https://x/{i}", "upload-time": t}
        for i, t in enumerate(times)
    ]
    body = json.dumps({"meta": {"api-version": "1.1"}, "name": "demo", "files": files})
    (release,) = parse_simple_page(body.encode(), "https://x/", "demo").releases or [None]
    parsed = []
    for text in times:
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            continue
        parsed.append(moment.astimezone(UTC).replace(tzinfo=None, microsecond=0))
    expected = min(parsed, default=None)
    assert (release.first_upload if release else None) == expected
