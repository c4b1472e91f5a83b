"""A hostile origin, one scenario at a time, end to end through the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.acceptance.conftest import NAMES, Mirror, dump, stagecrawl

SOME = ["serde", "tokio", "regex", "libc"]


def events(url: str) -> dict[str, dict[str, Any]]:
    return {f"{e['NAME']}@{e['VERSION']}": e for e in dump(url)["TB_COMP_LIB_RUST_LIST"]}


def crawl(mirror: Mirror, url: str, names: list[str], **env: str) -> Any:
    return stagecrawl(
        "crates",
        "crawl",
        *names,
        "--db",
        url,
        *mirror.urls(),
        "--api-rate",
        "50",
        "--index-rate",
        "200",
        env=env,
    )


def test_429_storm_with_retry_after_is_waited_out(mirror: Mirror, tmp_path: Path) -> None:
    # Scaled down: Retry-After 2 s (the real storm's 120 s is covered with an injected clock
    # in tests/engine); the origin must see no request inside any cooldown.
    mirror.api.rule("/api/*", too_many=3, retry_after="2")
    url = f"sqlite:///{tmp_path / 'a.db'}"
    done = crawl(mirror, url, SOME)
    assert done.returncode == 0, done.stderr
    log = mirror.api.requests_to("/api/*")
    refusals = [r for r in log if r.status == 429]
    assert len(refusals) == 3
    for refused in refusals:
        later = [r for r in log if refused.time < r.time < refused.time + 1.9]
        assert all(r.status == 429 for r in later)  # only refusals already in flight
    assert "429s seen" in done.stderr and {e["PROCESSED"] for e in events(url).values()} == {1}


def test_429_without_retry_after_backs_off(mirror: Mirror, tmp_path: Path) -> None:
    mirror.api.rule("/api/v1/crates/serde", too_many=2)
    url = f"sqlite:///{tmp_path / 'b.db'}"
    done = crawl(mirror, url, ["serde"])
    assert done.returncode == 0, done.stderr
    times = [r.time for r in mirror.api.requests_to("/api/v1/crates/serde")]
    assert len(times) == 3


def test_5xx_burst_is_retried(mirror: Mirror, tmp_path: Path) -> None:
    mirror.index.rule("/se/rd/serde", fail_times=6, fail_status=503)
    url = f"sqlite:///{tmp_path / 'c.db'}"
    seeded = stagecrawl(
        "crates", "seed", "serde", "--db", url, *mirror.urls(), env={"STAGECRAWL_RETRIES": "8"}
    )
    assert seeded.returncode == 0, seeded.stderr
    assert len(mirror.index.requests_to("/se/rd/serde")) == 7


def test_failures_go_to_the_ladder_with_their_reason(mirror: Mirror, tmp_path: Path) -> None:
    """Stall, empty body, truncated body, invalid index JSON, oversize body: each hits one
    crate; that crate's events climb the ladder with the reason and the others are
    collected."""
    url = f"sqlite:///{tmp_path / 'd.db'}"
    victims = {
        "tokio": "Timeout",
        "regex": "empty body",
        "libc": "transient",
        "serde": "not JSON",
        "rand": "larger than",
    }
    assert stagecrawl("crates", "seed", *NAMES, "--db", url, *mirror.urls()).returncode == 0
    mirror.api.rule("/api/v1/crates/tokio", stall=3.0)
    mirror.api.rule("/api/v1/crates/regex", empty=True)
    mirror.index.rule("/li/bc/libc", truncate=True)
    mirror.index.rule("/se/rd/serde", invalid_json=True)
    mirror.api.rule("/api/v1/crates/rand", oversize=3 * 1024 * 1024)
    done = stagecrawl(
        "crates",
        "collect",
        "--db",
        url,
        *mirror.urls(),
        "--api-rate",
        "50",
        env={"STAGECRAWL_TIMEOUT": "0.5", "STAGECRAWL_RETRIES": "1", "STAGECRAWL_MAX_BODY_MB": "1"},
    )
    assert done.returncode == 1, done.stderr  # some failed: said in the exit code
    state = events(url)
    for name, reason in victims.items():
        mine = [e for key, e in state.items() if key.startswith(f"{name}@")]
        assert mine and all(e["PROCESSED"] == 30 for e in mine), name
        assert all(reason in e["LAST_ERROR"] for e in mine), (name, mine[0]["LAST_ERROR"])
    others = [e for key, e in state.items() if key.split("@")[0] not in victims]
    assert others and all(e["PROCESSED"] == 1 for e in others)


def test_a_redirect_to_another_host_never_carries_the_token(mirror: Mirror, tmp_path: Path) -> None:
    from stagecrawl.testing.origin import TestOrigin

    with TestOrigin(mirror.root / "index") as elsewhere:
        mirror.index.rule("/se/rd/serde", redirect_to=elsewhere.url)
        url = f"sqlite:///{tmp_path / 'e.db'}"
        done = crawl(mirror, url, ["serde", "tokio"], STAGECRAWL_INDEX_TOKEN="t0ken-for-index")
        assert done.returncode == 0, done.stderr
        assert all(
            r.headers.get("Authorization") == "Bearer t0ken-for-index"
            for r in mirror.index.log
            if r.path != "/config.json"
        )
        assert elsewhere.log and all("Authorization" not in r.headers for r in elsewhere.log)
        assert all("Authorization" not in r.headers for r in mirror.api.log)
    assert "t0ken" not in done.stderr + done.stdout  # secrets never in logs
    assert json.loads(str(events(url)["serde@1.0.204"]["REF_TAGS"])) == []
