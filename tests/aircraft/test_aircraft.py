"""The aircraft pipeline end to end through the CLI against the loopback Wikidata."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path
from typing import Any

from stagecrawl.demo.wikidata import install
from stagecrawl.testing.origin import TestOrigin
from tests.cli import spawn, stagecrawl
from tests.kills import kill_when, sqlite_count


def urls(origin: TestOrigin) -> list[str]:
    return ["--sparql-url", origin.url + "/sparql", "--entities-url", origin.url + "/w/api.php"]


def load(out: Path, name: str) -> dict[str, Any]:
    return json.loads((out / f"{name}.json").read_text())


def test_three_passes_units_ranks_and_politeness(origin: TestOrigin, tmp_path: Path) -> None:
    calls = install(origin, maxlag_first=True)
    origin.rule("/sparql", too_many=1, retry_after="1")  # WDQS 429 with Retry-After
    out = tmp_path / "out"
    done = stagecrawl("aircraft", "crawl", "--out", str(out), *urls(origin), "--batch", "2")
    assert done.returncode == 0, done.stderr

    manufacturers = load(out, "manufacturers")
    assert set(manufacturers) == {"Q100", "Q200", "Q300"}
    assert manufacturers["Q200"]["countries"] == ["Q142", "Q183"]
    assert manufacturers["Q100"]["aliases"] == ["AF Works", "Aerofab Ltd"]
    assert manufacturers["Q100"]["inception"] == "1920-01-01"

    models = load(out, "models")
    assert set(models) == {"Q1001", "Q1002", "Q1003", "Q1004", "Q2001"}  # none for Q300
    assert models["Q1002"]["manufacturers"] == ["Q100", "Q200"]
    assert models["Q1001"]["first_flight"] == "1967-04-09"

    specs = load(out, "specs")
    af1 = specs["Q1001"]
    assert [v["value"] for v in af1["wingspan"]] == [35.8]  # the deprecated 99 m is skipped
    assert af1["length"] == [
        {"value": 35.814, "unit": "m", "original": {"amount": 117.5, "unit": "Q3710"}}
    ]
    assert [v["value"] for v in af1["height"]] == [11.3]  # preferred beats normal
    assert [v["value"] for v in af1["max_takeoff_mass"]] == [69853.2]  # 154,000 lb
    assert [v["value"] for v in af1["empty_mass"]] == [70000.0]
    assert [v["value"] for v in af1["max_speed"]] == [907.48]  # 490 kn
    assert [v["value"] for v in af1["cruise_speed"]] == [850.0]
    assert [v["value"] for v in af1["range"]] == [5556.0]  # 3,000 nmi
    assert af1["passengers"] == [180.0, 200.0]  # several normal values kept
    assert (af1["engine_models"], af1["engine_count"]) == (["Q5001"], 2.0)
    assert af1["service_entry"] == ["1968"] and af1["crew"] == [2.0]
    assert specs["Q1002"]["wingspan"] == []  # a missing claim
    assert specs["Q2001"]["wingspan"] == []  # somevalue: no value to convert
    assert specs["Q1003"] == {"qid": "Q1003", "missing": True}  # deleted
    assert specs["Q1004"]["redirected_to"] == "Q1005"

    sparql_log = origin.requests_to("/sparql")
    assert sparql_log[0].status == 429 and sparql_log[1].time - sparql_log[0].time >= 1.0
    assert calls["api"] == 4  # 5 models in batches of 2 = 3 requests, plus the maxlag retry
    api_log = origin.requests_to("/w/api.php")
    assert api_log[1].time - api_log[0].time >= 1.0  # maxlag honoured as a Retry-After
    agent = sparql_log[0].headers["User-Agent"]
    assert agent.startswith("stagecrawl/")
    attribution = (out / "ATTRIBUTION.md").read_text()
    assert "CC0" in attribution and "Retrieved:" in attribution and "SELECT" in attribution

    exported = stagecrawl("aircraft", "export", "--out", str(out), "--format", "csv")
    assert exported.returncode == 0, exported.stderr
    rows = {r["qid"]: r for r in csv.DictReader((out / "specs.csv").open())}
    assert rows["Q1001"]["length"] == "35.814" and "Q1003" not in rows


def test_rerun_skips_what_is_stored_and_real_wikidata_needs_a_contact(
    origin: TestOrigin, tmp_path: Path
) -> None:
    calls = install(origin)
    out = tmp_path / "out"
    assert stagecrawl("aircraft", "crawl", "--out", str(out), *urls(origin)).returncode == 0
    before = {name: (out / f"{name}.json").read_bytes() for name in ("models", "specs")}
    api_calls = calls["api"]
    again = stagecrawl("aircraft", "crawl", "--out", str(out), *urls(origin), "--stage", "specs")
    assert again.returncode == 0 and calls["api"] == api_calls  # nothing refetched
    assert (out / "specs.json").read_bytes() == before["specs"]
    refreshed = stagecrawl(
        "aircraft", "crawl", "--out", str(out), *urls(origin), "--stage", "specs", "--refresh"
    )
    assert refreshed.returncode == 0 and calls["api"] > api_calls
    assert (out / "specs.json").read_bytes() == before["specs"]
    real = stagecrawl("aircraft", "crawl", "--out", str(tmp_path / "real"))
    assert real.returncode == 2 and "contact is required" in real.stderr


DONE_REQUESTS = "SELECT COUNT(*) FROM requests WHERE state = 2"


def _frontiers(out: Path) -> list[Path]:
    return sorted((out / ".stagecrawl").glob("*.frontier.sqlite"))


def test_killed_mid_pass_then_resumed_gives_identical_stores(
    origin: TestOrigin, tmp_path: Path
) -> None:
    install(origin)
    origin.rule("/w/api.php", stall=0.4)
    origin.rule("/sparql", stall=0.3)
    reference = tmp_path / "reference"
    args = [*urls(origin), "--batch", "1"]
    assert stagecrawl("aircraft", "crawl", "--out", str(reference), *args).returncode == 0
    expected = {
        n: (reference / f"{n}.json").read_bytes() for n in ("manufacturers", "models", "specs")
    }
    requests = sqlite_count(_frontiers(reference), DONE_REQUESTS)
    moments = random.Random(6)
    for attempt in range(3):
        out = tmp_path / f"run{attempt}"
        process = spawn("aircraft", "crawl", "--out", str(out), *args)
        # The kill lands after a random number of requests are done (seen in the frontiers).
        target = moments.randint(1, int(requests * 0.6))
        kill_when(process, lambda out=out: sqlite_count(_frontiers(out), DONE_REQUESTS), target)
        done = sqlite_count(_frontiers(out), DONE_REQUESTS)
        assert 0 < done < requests, (attempt, done)  # mid-run: requests done, requests to do
        for name in expected:  # whatever is on disk is whole JSON, never half a file
            path = out / f"{name}.json"
            if path.exists() and path.stat().st_size:
                json.loads(path.read_bytes())
        resumed = stagecrawl("aircraft", "crawl", "--out", str(out), *args)
        assert resumed.returncode == 0, resumed.stderr
        for name, content in expected.items():
            assert (out / f"{name}.json").read_bytes() == content, (attempt, name)


def test_a_failed_request_is_retried_by_the_plain_rerun(origin: TestOrigin, tmp_path: Path) -> None:
    install(origin)
    broken = origin.rule("/w/api.php", status=500)  # the entity API is down for this run
    out = tmp_path / "out"
    args = ["aircraft", "crawl", "--out", str(out), *urls(origin), "--batch", "2"]
    first = stagecrawl(*args, env={"STAGECRAWL_RETRIES": "0"})
    assert first.returncode == 1, first.stderr  # something is left on the retry ladder
    assert "on the retry ladder (next run)" in first.stdout and "status 500" in first.stdout
    assert load(out, "specs") == {}
    status = stagecrawl("status", "--aircraft", str(out), "--format", "json")
    ladder = json.loads(status.stdout)["aircraft"]["passes"]["specs"]["ladder"]
    assert ladder and all("500" in entry["reason"] for entry in ladder)

    origin.rules.remove(broken)
    again = stagecrawl(*args)  # the same command, nothing else
    assert again.returncode == 0, again.stderr
    assert set(load(out, "specs")) == set(load(out, "models"))
    assert "retried from the ladder" in again.stdout


def test_a_long_pause_waits_off_the_ladder_and_the_next_passes_wait_too(
    origin: TestOrigin, tmp_path: Path
) -> None:
    """The entity API asks for a pause longer than a run may wait (600 s): the specs requests
    were not attempted, so none climbs the retry ladder (a few such runs must not give them
    up), the run sends nothing more after the refusal, says what waits and until when (one
    line on stderr, JSON `waiting`), exits 1; the same command after the pause finishes."""
    install(origin)
    paused = origin.rule("/w/api.php", too_many=10**9, retry_after="900")
    out = tmp_path / "out"
    args = ["aircraft", "crawl", "--out", str(out), *urls(origin), "--batch", "2"]
    for _ in range(3):  # more runs than the ladder's attempts: still nothing given up
        first = stagecrawl(*args, "--format", "json")
        assert first.returncode == 1, first.stderr
        assert "Traceback" not in first.stderr
        lines = [line for line in first.stderr.splitlines() if "rerun after that" in line]
        assert len(lines) == 1 and "(server Retry-After)" in lines[0], first.stderr
        document = json.loads(first.stdout)
        specs = document["passes"]["specs"]
        assert specs["ladder"] == 0 and specs["gave_up"] == 0, specs
        assert document["waiting"]["items"] >= 1
        assert "asked for a pause" in document["waiting"]["reason"]
    assert len(origin.requests_to("/w/api.php")) == 3  # one refusal a run, then nothing
    assert load(out, "specs") == {}
    status = stagecrawl("status", "--aircraft", str(out), "--format", "json")
    assert json.loads(status.stdout)["aircraft"]["passes"]["specs"]["ladder"] == []

    origin.rules.remove(paused)
    again = stagecrawl(*args)
    assert again.returncode == 0, again.stderr
    assert set(load(out, "specs")) == set(load(out, "models"))
