"""The PyPI look-alike behaves as PyPI does where the crawler depends on it (on the real replies
of ../shared/fixtures/pypi/), and serves what its caller gives it."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pytest

from stagecrawl.testing.pypi_origin import (
    SIMPLE_JSON,
    NoProjects,
    PyPIOrigin,
    Release,
    build_project,
    json_api_release,
    synthetic_project,
)
from tests.pypi.http import get


def test_simple_api_negotiates_json_and_html(pypi: PyPIOrigin) -> None:
    as_json = get(f"{pypi.url}/simple/requests/", accept=SIMPLE_JSON)
    assert as_json.status == 200
    assert as_json.headers["content-type"].startswith(SIMPLE_JSON)
    page = json.loads(as_json.body)
    assert page["name"] == "requests"
    assert page["versions"] == ["2.18.0", "2.18.1", "2.18.2", "2.18.3", "2.18.4", "2.19.0"]
    assert all(f["url"].startswith(f"{pypi.url}/files/packages/") for f in page["files"])
    assert page["meta"]["_last-serial"] == int(as_json.headers["x-pypi-last-serial"])
    default = get(f"{pypi.url}/simple/requests/")
    assert default.headers["content-type"].startswith("text/html")
    assert b"requests-2.18.0-py2.py3-none-any.whl" in default.body
    html_first = get(f"{pypi.url}/simple/requests/", accept=f"text/html, {SIMPLE_JSON};q=0.5")
    assert html_first.headers["content-type"].startswith("text/html")


def test_versions_are_listed_as_pypi_spells_them(pypi: PyPIOrigin) -> None:
    toga = json.loads(get(f"{pypi.url}/simple/toga/", accept=SIMPLE_JSON).body)
    assert toga["versions"] == ["0.3.0.dev1", "0.3.0.dev2", "0.3.0", "0.4.0"]
    pyyaml = json.loads(get(f"{pypi.url}/simple/pyyaml/", accept=SIMPLE_JSON).body)
    assert pyyaml["versions"] == ["3.13"]


def test_redirects_for_other_spellings(pypi: PyPIOrigin) -> None:
    simple = get(f"{pypi.url}/simple/PyYAML/", accept=SIMPLE_JSON)
    assert (simple.status, simple.headers["location"]) == (301, "/simple/pyyaml/")
    assert get(f"{pypi.url}/simple/pyyaml").headers["location"] == "/simple/pyyaml/"
    api = get(f"{pypi.url}/pypi/pyyaml/json")
    assert (api.status, api.headers["location"]) == (301, "/pypi/PyYAML/json")
    slash = get(f"{pypi.url}/pypi/PyYAML/json/")
    assert (slash.status, slash.headers["location"]) == (301, "/pypi/PyYAML/json")
    release = get(f"{pypi.url}/pypi/discord_py/2.0.0/json")
    assert release.headers["location"] == "/pypi/discord.py/2.0.0/json"
    final = get(f"{pypi.url}/pypi/PyYAML/json")
    assert final.status == 200
    assert json.loads(final.body)["info"]["name"] == "PyYAML"


def test_unknown_projects_get_404_html(pypi: PyPIOrigin) -> None:
    for path in ("/simple/fizzbuzz/", "/pypi/FizzBuzz/json", "/pypi/requests/9.9.9/json"):
        reply = get(pypi.url + path, accept=SIMPLE_JSON)
        assert reply.status == 404, path
        assert reply.headers["content-type"].startswith("text/html")


def test_etag_304_and_last_serial(pypi: PyPIOrigin) -> None:
    first = get(f"{pypi.url}/pypi/requests/json")
    document = json.loads(first.body)
    assert document["last_serial"] == int(first.headers["x-pypi-last-serial"])
    again = get(f"{pypi.url}/pypi/requests/json", **{"If-None-Match": first.headers["etag"]})
    assert again.status == 304 and again.body == b""
    pypi.yank("requests", "2.18.0", "broken")
    changed = get(f"{pypi.url}/pypi/requests/json", **{"If-None-Match": first.headers["etag"]})
    assert changed.status == 200
    assert int(changed.headers["x-pypi-last-serial"]) == document["last_serial"] + 1
    release = json.loads(get(f"{pypi.url}/pypi/requests/2.18.0/json").body)
    assert release["info"]["yanked"] is True and release["info"]["yanked_reason"] == "broken"


def test_generic_clients_are_refused(pypi: PyPIOrigin) -> None:
    assert get(f"{pypi.url}/simple/requests/", agent="python-requests/2.31").status == 406
    assert get(f"{pypi.url}/simple/requests/", agent="").status == 406
    assert get(f"{pypi.url}/simple/requests/", agent="bot (+https://example.org)").status == 200


def test_files_host_serves_core_metadata_matching_the_page(pypi: PyPIOrigin) -> None:
    page = json.loads(get(f"{pypi.url}/simple/requests/", accept=SIMPLE_JSON).body)
    offered = [f for f in page["files"] if f["core-metadata"]]
    assert len(offered) == 6
    for entry in offered:
        reply = get(entry["url"] + ".metadata")
        assert reply.status == 200
        assert hashlib.sha256(reply.body).hexdigest() == entry["core-metadata"]["sha256"]
    sdist = next(f for f in page["files"] if not f["core-metadata"])
    assert get(sdist["url"] + ".metadata").status == 404


def test_strict_lanes_answer_429_past_their_rate(pypi: PyPIOrigin) -> None:
    pypi.strict(index_rate=0.5, api_rate=0.5, files_rate=0.5, burst=1)
    assert get(f"{pypi.url}/simple/six/", accept=SIMPLE_JSON).status == 200
    assert get(f"{pypi.url}/simple/six/", accept=SIMPLE_JSON).status == 429
    assert get(f"{pypi.url}/pypi/six/json").status == 200  # another lane, its own bucket
    statuses = [r.status for r in pypi.requests_to("/simple/*")]
    assert statuses == [200, 429]


def test_misbehaviour_on_demand(pypi: PyPIOrigin) -> None:
    pypi.misbehave("/simple/six/", "html")
    pypi.misbehave("/pypi/six/json", "not-json")
    html = get(f"{pypi.url}/simple/six/", accept=SIMPLE_JSON)
    assert html.status == 200 and html.headers["content-type"].startswith("text/html")
    garbage = get(f"{pypi.url}/pypi/six/json")
    assert garbage.status == 200
    try:
        json.loads(garbage.body)
        raise AssertionError("the body should not be JSON")
    except ValueError:
        pass
    pypi.rule("/simple/attrs/", too_many=1)
    assert get(f"{pypi.url}/simple/attrs/", accept=SIMPLE_JSON).status == 429
    assert get(f"{pypi.url}/simple/attrs/", accept=SIMPLE_JSON).status == 200


# --- what the look-alike serves is what its caller gives it (no shared data needed) ----------


def test_a_folder_without_simple_pages_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(NoProjects, match=r"no PyPI project to serve under .*simple/<source>"):
        PyPIOrigin().load_folder(tmp_path / "missing")
    (tmp_path / "simple" / "pep658-metadata" / "x").mkdir(parents=True)
    (tmp_path / "simple" / "pep658-metadata" / "x" / "a-1.0-py3-none-any.whl.metadata").touch()
    with pytest.raises(NoProjects):
        PyPIOrigin().load_folder(tmp_path)


def test_an_origin_started_empty_says_so(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING), PyPIOrigin() as empty:
        assert get(f"{empty.url}/simple/anything/", accept=SIMPLE_JSON).status == 404
    assert any("serves no project" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING), PyPIOrigin(projects=[synthetic_project("a", 1)]):
        pass
    assert not caplog.records


def test_a_folder_laid_out_as_shared_is_served(tmp_path: Path) -> None:
    """A small made-up folder in the layout of ../shared/fixtures/pypi/: pages by source, a
    variant page left out, JSON API releases and core metadata found beside them."""
    built = build_project(
        "Demo.Pkg", [Release("1.0", requires=["six>=1"]), Release("2.0", metadata=False)]
    )
    (tmp_path / "simple" / "made-up").mkdir(parents=True)
    (tmp_path / "simple" / "made-up" / "demo-pkg.json").write_text(json.dumps(built.page))
    variant = {**built.page, "versions": ["9.9"], "files": []}
    (tmp_path / "simple" / "made-up" / "demo-pkg-variant.json").write_text(json.dumps(variant))
    release = json_api_release("Demo.Pkg", Release("2.0", license="BSD"), None)
    (tmp_path / "json" / "made-up" / "demo-pkg").mkdir(parents=True)
    (tmp_path / "json" / "made-up" / "demo-pkg" / "2.0.json").write_text(json.dumps(release))
    (tmp_path / "simple" / "pep658-metadata" / "made-up").mkdir(parents=True)
    for filename, text in built.metadata.items():
        (tmp_path / "simple" / "pep658-metadata" / "made-up" / f"{filename}.metadata").write_bytes(
            text
        )
    with PyPIOrigin().load_folder(tmp_path) as origin:
        page = json.loads(get(f"{origin.url}/simple/demo-pkg/", accept=SIMPLE_JSON).body)
        assert page["versions"] == ["1.0", "2.0"]
        wheel = next(f for f in page["files"] if f["core-metadata"])
        served = get(wheel["url"] + ".metadata")
        assert served.body == built.metadata[wheel["filename"]]
        assert hashlib.sha256(served.body).hexdigest() == wheel["core-metadata"]["sha256"]
        moved = get(f"{origin.url}/pypi/demo-pkg/2.0/json")
        assert moved.headers["location"] == "/pypi/Demo.Pkg/2.0/json"  # the display name
        info = json.loads(get(f"{origin.url}/pypi/Demo.Pkg/2.0/json").body)["info"]
        assert info["license"] == "BSD"


def test_projects_built_in_code() -> None:
    built = build_project(
        "Demo.Pkg",
        [
            Release("1.0", requires=["six>=1"], license_expression="MIT OR Apache-2.0"),
            Release("1.1", yanked="broken build", metadata=False, json_api=True),
            Release("1.2", metadata=False),
        ],
        summary="made up",
    )
    with PyPIOrigin(projects=[built]) as origin:
        page = json.loads(get(f"{origin.url}/simple/demo-pkg/", accept=SIMPLE_JSON).body)
        names = [f["filename"] for f in page["files"]]
        assert names[:2] == ["Demo_Pkg-1.0-py3-none-any.whl", "Demo.Pkg-1.0.tar.gz"]
        assert [f["yanked"] for f in page["files"]][2:4] == ["broken build", "broken build"]
        metadata = get(page["files"][0]["url"] + ".metadata").body.decode()
        assert "License-Expression: MIT OR Apache-2.0\n" in metadata
        assert "Requires-Dist: six>=1\n" in metadata
        known = json.loads(get(f"{origin.url}/pypi/Demo.Pkg/1.1/json").body)["info"]
        assert known["yanked_reason"] == "broken build" and known["summary"] == "made up"
        bare = json.loads(get(f"{origin.url}/pypi/Demo.Pkg/1.2/json").body)["info"]
        assert bare["requires_dist"] is None  # neither metadata nor a reply: unknown
