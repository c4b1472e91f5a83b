"""The settings table: one source for flags, environment and defaults, and its documentation."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from stagecrawl.crates.declaration import CratesSettings
from stagecrawl.errors import ConfigError
from stagecrawl.settings import SETTINGS, Settings, settings_table

DOCS = Path(__file__).resolve().parents[1] / "docs" / "operations.md"


def test_flag_beats_environment_beats_default() -> None:
    env = {"STAGECRAWL_API_RATE": "0.5", "STAGECRAWL_CONCURRENCY": "3"}
    s = Settings.resolve({"crates.api_rate": 2.0}, env)
    assert (s.section(CratesSettings).api_rate, s.sources["crates.api_rate"]) == (2.0, "flag")
    assert (s.concurrency, s.sources["concurrency"]) == (3, "env")
    crates = s.section(CratesSettings)
    assert (crates.index_rate, s.sources["crates.index_rate"]) == (10.0, "default")


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        ({"concurrency": 0}, {}, "--concurrency must be at least 1"),
        ({"crates.api_rate": 0.0}, {}, "--api-rate must be greater than 0"),
        ({"crates.api_rate": float("nan")}, {}, "--api-rate must be a finite number"),
        ({"crates.index_url": "index.crates.io"}, {}, "--index-url must be an http(s) URL"),
        ({}, {"STAGECRAWL_API_RATE": "fast"}, "STAGECRAWL_API_RATE must be a number"),
        ({}, {"STAGECRAWL_RETRIES": "-1"}, "STAGECRAWL_RETRIES must not be negative"),
        # Sent in a header: a CR (a file edited on Windows) or a newline failed every request.
        ({"contact": "ops@example.org\r"}, {},
         "--contact must be one line of text without control characters, got 'ops@"),
        ({}, {"STAGECRAWL_CONTACT": "ops@example.org\nX-Evil: 1"}, "STAGECRAWL_CONTACT must be"),
        # ... and in --db, a file `stagecrawl.db\r` was made (its URL is never shown)
        ({}, {"STAGECRAWL_DB": "sqlite:///stagecrawl.db\r"},
         "STAGECRAWL_DB must be one line of text without control characters"),
        ({"cache_dir": "cache\t"}, {}, "--cache-dir must be one line of text"),
    ],
)  # fmt: skip
def test_bad_values_are_refused_naming_their_source(
    flags: dict[str, object], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        Settings.resolve(flags, env)


@pytest.mark.parametrize("name", ["STAGECRAWL_INDEX_TOKEN", "STAGECRAWL_API_TOKEN"])
def test_a_token_with_a_control_character_is_refused_and_not_shown(name: str) -> None:
    token = "T0ken-Cr-71\r"  # read from a file with Windows line ends
    with pytest.raises(ConfigError) as caught:
        Settings.resolve({}, {name: token})
    assert str(caught.value) == f"{name} must be one line of text without control characters"


def test_the_documented_table_is_the_table() -> None:
    text = DOCS.read_text()
    start = text.index("-->\n", text.index("<!-- settings:start")) + 4
    end = text.index("<!-- settings:end -->")
    assert text[start:end] == settings_table()


def test_the_engine_parts_take_their_defaults_from_the_table() -> None:
    """One default per setting: a part built without settings behaves as the table says."""
    from stagecrawl.engine.fetcher import FetchSettings
    from stagecrawl.engine.work import LoopSettings
    from stagecrawl.kernel.collecting import CollectSettings

    d = Settings.resolve({}, {})
    loop, collect, fetch = LoopSettings(), CollectSettings(), FetchSettings()
    assert (loop.concurrency, loop.commit_batch, loop.grace_period) == (
        d.concurrency,
        d.commit_batch,
        d.grace_period,
    )
    assert (collect.concurrency, collect.commit_batch, collect.lease_seconds) == (
        d.concurrency,
        d.commit_batch,
        d.lease_seconds,
    )
    assert (fetch.timeout, fetch.deadline, fetch.retries, fetch.max_body_bytes) == (
        d.timeout,
        d.deadline,
        d.retries,
        int(d.max_body_mb * 2**20),
    )


def test_a_misspelt_setting_is_a_type_error(tmp_path: Path) -> None:
    """`Settings` is a typed, frozen object: mypy refuses `s.api_rat`, and so does Python."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from stagecrawl.settings import Settings\n\n"
        "def rate(s: Settings) -> float:\n    return s.api_rat\n"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(probe)],
        capture_output=True,
        text=True,
        cwd=root,
        env={**os.environ, "MYPYPATH": str(root / "src")},
        timeout=300,
    )
    assert '"Settings" has no attribute "api_rat"' in done.stdout, done.stdout + done.stderr
    s = Settings.resolve({}, {})
    with pytest.raises(AttributeError):
        s.api_rat  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.section(CratesSettings).api_rate = 2.0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        ({"concurrency": 10_000_000}, {}, "--concurrency must be at most 1024"),
        ({}, {"STAGECRAWL_CONCURRENCY": "5000"}, "STAGECRAWL_CONCURRENCY must be at most 1024"),
        ({"crates.api_burst": 100_000}, {}, "--api-burst must be at most 1000"),
        ({"lease_seconds": 1e9}, {}, "--lease-seconds must be at most 86400"),
        ({"grace_period": 1e6}, {}, "--grace-period must be at most 3600"),
        ({}, {"STAGECRAWL_COMMIT_BATCH": "1000000"}, "STAGECRAWL_COMMIT_BATCH must be at most"),
        ({}, {"STAGECRAWL_MAX_BODY_MB": "1e6"}, "STAGECRAWL_MAX_BODY_MB must be at most 4096"),
        ({}, {"STAGECRAWL_RETRIES": "1000"}, "STAGECRAWL_RETRIES must be at most 100"),
        ({"crates.index_rate": 1e12}, {}, "--index-rate must be at most"),
        ({"aircraft_concurrency": 2000}, {}, "--concurrency must be at most 1024"),
    ],
)
def test_sizes_have_upper_bounds(
    flags: dict[str, object], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        Settings.resolve(flags, env)


def test_every_bound_is_documented() -> None:
    """Every number has an upper bound, and the table prints it."""
    for setting in SETTINGS:
        if setting.kind in (int, float):
            assert setting.maximum is not None, setting.name
            assert f"≤ {setting.maximum:g}" in settings_table()
