"""`crates refresh`: conditional GETs against the loopback index; only changes cost anything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import select

from stagecrawl.storage.db import Database
from stagecrawl.testing.origin import TestOrigin
from stagecrawl.testing.registry import index_line as make_line
from stagecrawl.testing.registry import write_crate
from tests.cli import stagecrawl
from tests.crates.kernel import rust

CRATES = [f"steady-{i:03d}" for i in range(200)]


def index_line(name: str, vers: str, yanked: bool = False) -> str:
    return make_line(name, vers, yanked=yanked)


def write_index(root: Path, name: str, lines: list[str]) -> None:
    write_crate(root, name, lines)


def one_version_each(root: Path, names: list[str]) -> None:
    """An index file with version 1.0.0 and a bare API page for each crate."""
    for name in names:
        write_index(root, name, [index_line(name, "1.0.0")])
        api = root / "api" / "api" / "v1" / "crates" / name
        api.parent.mkdir(parents=True, exist_ok=True)
        api.write_text(json.dumps({"crate": {"name": name}, "versions": []}))


def dump(url: str) -> list[list[dict[str, Any]]]:
    db = Database(url)
    tables = (
        rust(db).list,
        rust(db).version,
        rust(db).product,
        rust(db).own["TB_COMP_LIB_RUST_INDEX_STATE"],
    )
    with db.engine.connect() as conn:
        result = [
            [dict(r._mapping) for r in conn.execute(select(t).order_by(*t.primary_key.columns))]
            for t in tables
        ]
    db.dispose()
    return result


def test_unchanged_crates_cost_one_304_each_and_changes_only_what_changed(
    tmp_path: Path,
) -> None:
    root = tmp_path / "reg"
    for name in CRATES:
        write_index(root, name, [index_line(name, "1.0.0"), index_line(name, "1.1.0")])
        api = root / "api" / "api" / "v1" / "crates" / name
        api.parent.mkdir(parents=True, exist_ok=True)
        api.write_text(
            json.dumps(
                {
                    "crate": {"name": name, "description": "d"},
                    "versions": [{"num": "1.0.0", "license": "MIT"}],
                }
            )
        )
    with TestOrigin(root / "index") as index, TestOrigin(root / "api") as api_origin:
        db = f"sqlite:///{tmp_path / 'r.db'}"
        urls = [
            "--index-url",
            index.url + "/",
            "--api-url",
            api_origin.url + "/",
            "--api-rate",
            "1000",
            "--index-rate",
            "1000",
            "--db",
            db,
        ]
        done = stagecrawl("crates", "crawl", *CRATES, *urls)
        assert done.returncode == 0, done.stderr
        before = dump(db)
        index.log.clear()
        api_origin.log.clear()

        quiet = stagecrawl("crates", "refresh", *urls)
        assert quiet.returncode == 0, quiet.stderr
        assert len(index.log) == 200 and all(r.status == 304 for r in index.log)
        assert all("If-None-Match" in r.headers for r in index.log)
        assert api_origin.log == []
        assert dump(db) == before  # not one row rewritten

        write_index(
            root,
            "steady-000",
            [
                index_line("steady-000", "1.0.0"),
                index_line("steady-000", "1.1.0"),
                index_line("steady-000", "1.2.0"),
            ],
        )
        write_index(
            root,
            "steady-001",
            [index_line("steady-001", "1.0.0", yanked=True), index_line("steady-001", "1.1.0")],
        )
        index.log.clear()
        changed = stagecrawl("crates", "refresh", *urls)
        assert changed.returncode == 0, changed.stderr
        assert [r.path for r in api_origin.log] == ["/api/v1/crates/steady-000"]
        # the collect reads the index file the refresh found changed: asked once, not twice
        assert len(index.requests_to("*/steady-000")) == 1
        after = dump(db)
        events = {(e["NAME"], e["VERSION"]): e for e in after[0]}
        assert events[("steady-000", "1.2.0")]["PROCESSED"] == 1
        assert events[("steady-001", "1.0.0")]["YANKED"] in (True, 1)
        versions = {(v["PRODUCT_KEY"], v["VERSION"]): v for v in after[1]}
        assert versions[("steady-001", "1.0.0")]["YANKED"] in (True, 1)
        products = {p["PRODUCT_KEY"]: p for p in after[2]}
        assert products["steady-000"]["LATEST_VERSION"] == "1.2.0"
        assert products["steady-000"]["VERSION_COUNT"] == 3
        untouched = [p for p in after[2] if p["PRODUCT_KEY"] not in ("steady-000", "steady-001")]
        assert untouched == [
            p for p in before[2] if p["PRODUCT_KEY"] not in ("steady-000", "steady-001")
        ]


def test_a_changed_file_with_a_bad_line_registers_its_readable_versions(tmp_path: Path) -> None:
    root = tmp_path / "reg"
    one_version_each(root, ["alpha", "beta"])
    with TestOrigin(root / "index") as index, TestOrigin(root / "api") as api_origin:
        db = f"sqlite:///{tmp_path / 'r.db'}"
        urls = ["--index-url", index.url + "/", "--api-url", api_origin.url + "/", "--db", db]
        assert stagecrawl("crates", "crawl", "alpha", "beta", *urls).returncode == 0
        before = dump(db)
        cut = index_line("alpha", "1.3.0")[:30]  # not JSON: cut short
        write_index(
            root, "alpha", [index_line("alpha", "1.0.0"), index_line("alpha", "1.2.0"), cut]
        )
        write_index(root, "beta", ["{oops", "[]"])  # not one readable line
        done = stagecrawl("crates", "refresh", *urls, "--format", "json")
        assert done.returncode == 1, done.stderr  # problems reported: said in the exit code
        assert "Traceback" not in done.stderr
        report = json.loads(done.stdout)["refresh"]
        assert report["changed"] == ["alpha"]
        problem = "line 3: not JSON: Expecting ',' delimiter at column 31"
        assert report["index_problems"] == {"alpha": [problem]}
        assert f"skipped: alpha: unreadable index lines: {problem}" in done.stderr
        assert report["failed"]["beta"].startswith("index file has no readable versions")
        after = dump(db)
        events = {(e["NAME"], e["VERSION"]): e["PROCESSED"] for e in after[0]}
        assert events == {("alpha", "1.0.0"): 1, ("alpha", "1.2.0"): 1, ("beta", "1.0.0"): 1}
        beta = [[r for r in table if "beta" in str(r.values())] for table in after]
        assert beta == [[r for r in table if "beta" in str(r.values())] for table in before]


def test_a_long_retry_after_leaves_every_crate_waiting_not_failed(tmp_path: Path) -> None:
    """A 429 whose Retry-After is longer than a run may wait (600 s) is a pause, not a failure
    of the crates refresh asked about: none is reported failed, none is asked after the first
    refusal, nothing is applied (the stored ETags stay, so the next refresh asks again), the
    report says what waits and until when (JSON `waiting`, one line on stderr), exit 1; and
    a refresh after the pause brings the change in."""
    root = tmp_path / "reg"
    names = [f"paused-{i}" for i in range(4)]
    one_version_each(root, names)
    with TestOrigin(root / "index") as index, TestOrigin(root / "api") as api_origin:
        db = f"sqlite:///{tmp_path / 'r.db'}"
        urls = ["--index-url", index.url + "/", "--api-url", api_origin.url + "/", "--db", db]
        urls += ["--index-rate", "1000", "--api-rate", "1000", "--concurrency", "1"]
        assert stagecrawl("crates", "crawl", *names, *urls).returncode == 0
        write_index(root, names[0], [index_line(names[0], "1.0.0"), index_line(names[0], "1.1.0")])
        before = dump(db)
        index.log.clear()
        index.rule("/*", too_many=10**9, retry_after="900")

        paused = stagecrawl("crates", "refresh", *urls, "--format", "json")
        assert paused.returncode == 1, paused.stderr
        assert "Traceback" not in paused.stderr and "failed:" not in paused.stderr
        document = json.loads(paused.stdout)
        assert document["refresh"]["failed"] == {}
        assert sorted(document["refresh"]["waiting"]) == names
        assert document["waiting"]["items"] == len(names)
        assert "asked for a pause" in document["waiting"]["reason"]
        lines = [line for line in paused.stderr.splitlines() if "rerun after that" in line]
        assert len(lines) == 1, paused.stderr
        assert len(index.log) == 1  # the first refusal holds every other crate back
        assert dump(db) == before
        table = stagecrawl("crates", "refresh", *urls)  # the table report: the same one line
        assert table.returncode == 1, table.stderr
        assert [line for line in table.stderr.splitlines() if "rerun after that" in line]
        assert table.stderr.count("rerun after that") == 1, table.stderr
        assert "not asked (waiting for a pause)" in table.stdout
        assert dump(db) == before

        index.clear_rules()
        after = stagecrawl("crates", "refresh", *urls, "--format", "json")
        assert after.returncode == 0, after.stderr
        assert json.loads(after.stdout)["refresh"]["changed"] == [names[0]]
        assert "rerun after that" not in after.stderr


def test_what_waits_after_a_refresh_and_its_collect_is_counted_once(tmp_path: Path) -> None:
    """One crate changed; the index host then pauses before the other three are asked, and the
    collect that follows (the changed index file it has from the refresh) finds the API host
    paused: four wait in all (three crates not asked, one event not attempted), each counted
    once."""
    root = tmp_path / "reg"
    names = [f"paused-{i}" for i in range(4)]
    one_version_each(root, names)
    with TestOrigin(root / "index") as index, TestOrigin(root / "api") as api_origin:
        db = f"sqlite:///{tmp_path / 'r.db'}"
        urls = ["--index-url", index.url + "/", "--api-url", api_origin.url + "/", "--db", db]
        urls += ["--index-rate", "1000", "--api-rate", "1000", "--concurrency", "1"]
        assert stagecrawl("crates", "crawl", *names, *urls).returncode == 0
        write_index(root, names[0], [index_line(names[0], "1.0.0"), index_line(names[0], "1.1.0")])
        for name in names[1:]:
            index.rule(f"/pa/us/{name}", too_many=10**9, retry_after="900")
        api_origin.rule(f"/api/v1/crates/{names[0]}", too_many=10**9, retry_after="900")

        paused = stagecrawl("crates", "refresh", *urls, "--format", "json")
        assert paused.returncode == 1, paused.stderr
        document = json.loads(paused.stdout)
        assert document["refresh"]["changed"] == [names[0]]
        assert document["refresh"]["new_events"] == 1 and "collect" in document  # it ran
        assert sorted(document["refresh"]["waiting"]) == names[1:]
        assert document["waiting"]["items"] == 3 + 1
        assert paused.stderr.count("rerun after that") == 1, paused.stderr
