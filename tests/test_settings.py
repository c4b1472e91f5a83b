"""The settings table: one source for flags, environment and defaults, and its documentation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stagecrawl.errors import ConfigError
from stagecrawl.settings import Settings, settings_table

DOCS = Path(__file__).resolve().parents[1] / "docs" / "operations.md"


def test_flag_beats_environment_beats_default() -> None:
    env = {"STAGECRAWL_API_RATE": "0.5", "STAGECRAWL_CONCURRENCY": "3"}
    s = Settings.resolve({"api_rate": 2.0}, env)
    assert (s.api_rate, s.sources["api_rate"]) == (2.0, "flag")
    assert (s.concurrency, s.sources["concurrency"]) == (3, "env")
    assert (s.index_rate, s.sources["index_rate"]) == (10.0, "default")


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        ({"concurrency": 0}, {}, "--concurrency must be at least 1"),
        ({"api_rate": 0.0}, {}, "--api-rate must be greater than 0"),
        ({"api_rate": float("nan")}, {}, "--api-rate must be a finite number"),
        ({"index_url": "index.crates.io"}, {}, "--index-url must be an http(s) URL"),
        ({}, {"STAGECRAWL_API_RATE": "fast"}, "STAGECRAWL_API_RATE must be a number"),
        ({}, {"STAGECRAWL_RETRIES": "-1"}, "STAGECRAWL_RETRIES must not be negative"),
    ],
)
def test_bad_values_are_refused_naming_their_source(
    flags: dict[str, object], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        Settings.resolve(flags, env)


def test_the_documented_table_is_the_table() -> None:
    text = DOCS.read_text()
    start = text.index("-->\n", text.index("<!-- settings:start")) + 4
    end = text.index("<!-- settings:end -->")
    assert text[start:end] == settings_table()
