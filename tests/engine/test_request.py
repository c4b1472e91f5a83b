"""Canonical URLs: the fast path for plain URLs agrees with the general one on every URL."""

from __future__ import annotations

import itertools

import pytest

from stagecrawl.engine.request import (
    Request,
    _canonical_general,
    _canonical_lower,
    _canonical_plain,
    canonical_url,
)

SCHEMES = ["http", "HTTPS", "https"]
AUTHORITIES = [
    "example.org",
    "Example.ORG",
    "example.org:80",
    "example.org:443",
    "example.org:8080",
    "example.org:0080",
    "example.org:08080",
    "example.org:0",
    "127.0.0.1:65535",
    "127.0.0.1:99999",
    "user:pw@example.org",
    "[::1]:8080",
    "",
    ":80",
]
PATHS = ["", "/", "/a/B/c.json", "/a%20b", "/a b", "/ü", "/x;y"]
QUERIES = [
    "",
    "?",
    "?b=2&a=1",
    "?a=2&a=1",
    "?n=1&run=x",
    "?a=1&a.b=2",
    "?a.b=1&a=2",
    "?a=1&a=1",
    "?a=1&b=2&c=",
    "?a=&a=1",
    "?x=1",
    "?A=1&a=1",
    "?a",
    "?a=",
    "?a=1&&b=2",
    "?q=a+b",
    "?q=a%20b",
    "?q=ü",
    "?b=1;a=2",
    "?a==b",
]
FRAGMENTS = ["", "#top", "#a?b=c"]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_fast_path_agrees_with_the_general_one(scheme: str) -> None:
    taken = 0
    for authority, path, query, fragment in itertools.product(
        AUTHORITIES, PATHS, QUERIES, FRAGMENTS
    ):
        url = f"{scheme}://{authority}{path}{query}{fragment}"
        fast = _canonical_plain(url)
        if fast is None:
            continue
        taken += 1
        assert fast == _canonical_general(url), url
    assert taken > 100  # the fast path is the common one


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_lowercase_path_agrees_with_the_general_one(scheme: str) -> None:
    taken = 0
    for authority, path, query, fragment in itertools.product(
        AUTHORITIES, PATHS, QUERIES, FRAGMENTS
    ):
        url = f"{scheme}://{authority}{path}{query}{fragment}"
        try:
            general = _canonical_general(url)
        except ValueError:  # a port out of range: no canonical form, never made one here
            assert _canonical_lower(url) is None, url
            continue
        lower = _canonical_lower(url)
        if lower is not None:
            taken += 1
            assert lower == general, url
        assert canonical_url(url) == general, url
    assert taken > 50 or scheme == "HTTPS"


def test_canonical_form() -> None:
    assert canonical_url("HTTP://Example.org:80/a?b=2&a=1#x") == "http://example.org/a?a=1&b=2"
    assert canonical_url("https://h:8443") == "https://h:8443/"
    assert Request("https://h/p?z=1&y=2").key == "https://h/p?y=2&z=1"


def test_a_canonical_url_is_its_own_canonical_form() -> None:
    """A key is a URL that fetches the same thing: canonicalising it again changes nothing
    (an IPv6 host keeps its brackets: `http://::1:8080/` is no URL)."""
    for authority, path, query in itertools.product(AUTHORITIES, PATHS, QUERIES):
        url = f"http://{authority}{path}{query}"
        try:
            key = canonical_url(url)
        except ValueError:  # a port out of range: no canonical form
            continue
        assert canonical_url(key) == key, url
    assert canonical_url("http://[::1]:8080/a") == "http://[::1]:8080/a"
