"""The PyPI look-alike behaves as PyPI does where the crawler depends on it."""

from __future__ import annotations

import hashlib
import json

from stagecrawl.testing.pypi_origin import SIMPLE_JSON, PyPIOrigin
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
