"""Go crawl acceptance on a strict one-host look-alike (stagecrawl.testing.go_origin), as a user
runs it: the proxy under a path prefix and the index feed, a token bucket on each lane, 403
without a contact, 400 for a path that is not case-encoded. Every row, retracted flag,
deprecation, latest and requires is what the world was built to say (tests/go/world.py)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from stagecrawl.testing.go_origin import GoOrigin
from tests.cli import stagecrawl
from tests.go import world


@pytest.fixture
def origin() -> Iterator[GoOrigin]:
    server = GoOrigin()
    server.expected = world.build(server)  # type: ignore[attr-defined]
    server.start()
    yield server
    server.stop()


def rows(db: Path, sql: str) -> list[sqlite3.Row]:
    connection = sqlite3.connect(db)
    connection.row_factory = sqlite3.Row
    try:
        return list(connection.execute(sql))
    finally:
        connection.close()


def test_crawl_then_feed_refresh_stores_what_go_says(origin: GoOrigin, tmp_path: Path) -> None:
    want: world.Expected = origin.expected  # type: ignore[attr-defined]
    # the crawl's own rates, enforced; burst 3 absorbs the jitter between the client's sends
    # and the server's arrival times on a loaded machine (the client itself keeps burst 1)
    origin.strict(proxy=25, index=5, burst=3)
    db = tmp_path / "go.db"
    url = f"sqlite:///{db}"
    done = stagecrawl("go", "crawl", *world.NAMED, "--db", url, *world.urls(origin, 25),
                      "--format", "json")  # fmt: skip
    assert done.returncode == 1, done.stderr  # the 404 and the 410 module: not found
    report = json.loads(done.stdout)
    assert sorted(report["seed"]["not_found"]) == [world.GONE, world.REMOVED]
    assert report["rate_limited"] == {} and origin.rejected == 0
    # pseudo-versions come from the feed only: the mirror walks it from the start
    fed = stagecrawl("go", "refresh", "--since", "2020-01-01T00:00:00Z", "--db", url,
                     *world.urls(origin, 25), "--format", "json")  # fmt: skip
    assert fed.returncode == 0, fed.stderr
    assert json.loads(fed.stdout)["rate_limited"] == {} and origin.rejected == 0

    for path, versions in want.versions.items():
        stored = {
            r["VERSION"]: r
            for r in rows(db, "SELECT * FROM TB_COMP_LIB_VERSION_GOLANG")
            if r["PRODUCT_KEY"] == path
        }
        assert sorted(stored) == sorted(v["version"] for v in versions), path
        for v in versions:
            row = stored[str(v["version"])]
            assert json.loads(row["DEPENDENCIES"]) == v["requires"], (path, v["version"])
            why = want.retracted.get(path, {}).get(str(v["version"]))
            assert (row["YANKED"], row["RETRACTED"]) == (why is not None,) * 2, v["version"]
            assert row["RETRACTED_REASON"] == why
            assert bool(row["PSEUDO"]) == (v["version"] in want.pseudo.get(path, set()))
            assert row["LICENSE"] is None and row["LICENSE_SOURCE"] is None  # zips off: unknown
        product = rows(db, f"SELECT * FROM TB_COMP_LIB_PRODUCT_GOLANG WHERE PRODUCT_KEY = '{path}'")
        assert product[0]["LATEST_VERSION"] == want.latest[path], path
        assert product[0]["DEPRECATED"] == want.deprecated[path], path
        assert product[0]["LANGUAGE"] == "Golang"
    # the retraction in v1.100.0's go.mod does not count; v1.159.0's go.mod is where they are
    big = rows(db, f"SELECT * FROM TB_COMP_LIB_PRODUCT_GOLANG WHERE NAME = '{world.BIG}'")[0]
    assert big["RETRACTIONS_FROM"] == "v1.159.0"
    assert rows(db, "SELECT COUNT(*) FROM TB_COMP_LIB_GOLANG_LIST WHERE PROCESSED != 1")[0][0] == 0

    # what the origin saw: case-encoded paths only (no 400), the header that keeps the proxy
    # from fetching for us, a contact in every User-Agent
    assert not [r for r in origin.log if r.status == 400]
    assert any("/example.com/!big/!mod/@v/" in r.path for r in origin.log)
    proxy = [r for r in origin.log if r.path.startswith(origin.prefix)]
    assert all(r.headers.get("Disable-Module-Fetch") == "true" for r in proxy)
    assert all("tests@example.org" in r.headers.get("User-Agent", "") for r in origin.log)


def test_a_crawl_without_a_contact_is_refused_by_the_origin(
    origin: GoOrigin, tmp_path: Path
) -> None:
    args = ["--proxy-url", origin.proxy_url, "--db", f"sqlite:///{tmp_path / 'x.db'}"]
    done = stagecrawl("go", "crawl", world.LOWER, *args, "--format", "json")
    assert done.returncode == 1, done.stderr
    assert "403" in done.stdout and origin.log and origin.log[0].status == 403


def test_private_modules_are_never_asked(origin: GoOrigin, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'p.db'}"
    done = stagecrawl("go", "crawl", world.LOWER, "--db", db, *world.urls(origin),
                      env={"GOPRIVATE": "example.com/low*"})  # fmt: skip
    assert done.returncode == 2 and "private" in done.stderr and done.stderr.count("\n") == 1
    assert origin.log == []


def test_the_zip_lane_gives_licenses_and_their_policy(origin: GoOrigin, tmp_path: Path) -> None:
    db = tmp_path / "z.db"
    url = f"sqlite:///{db}"
    origin.module(world.LEGACY).license = "Apache License\nVersion 2.0, January 2004\n"  # no text
    args = ["--db", url, *world.urls(origin), "--zips", "1"]
    done = stagecrawl("go", "crawl", world.LOWER, world.LEGACY, *args)
    assert done.returncode == 0, done.stderr
    columns = "PRODUCT_KEY, VERSION, LICENSE, LICENSE_EXPRESSION, LICENSE_SOURCE"
    found = {
        (key, version): tuple(rest)
        for key, version, *rest in rows(db, f"SELECT {columns} FROM TB_COMP_LIB_VERSION_GOLANG")
    }
    assert found[(world.LOWER, "v0.2.0")] == ("MIT", "MIT", "zip")
    # a zip read whose LICENSE is not a license text: none found, and said to be from the zip
    assert found[(world.LEGACY, "v1.0.0")] == (None, None, "zip")
    assert [r for r in origin.log if r.path.endswith(".zip")]
    check = stagecrawl("go", "licenses", "check", "--allow", "Apache-2.0", "--db", url,
                       "--format", "json")  # fmt: skip
    assert check.returncode == 1 and world.LOWER in check.stdout
    # a go.mod of what is collected, checked against its licenses: the standard library it
    # names (audited against the Go database) is no registry package, so no license unknown
    gomod = tmp_path / "app" / "go.mod"
    gomod.parent.mkdir()
    gomod.write_text(f"module example.com/app\n\ngo 1.22\n\nrequire {world.LOWER} v0.2.0\n")
    project = stagecrawl("go", "licenses", "check", "--lockfile", str(gomod), "--allow", "MIT",
                         "--db", url, "--format", "json")  # fmt: skip
    assert project.returncode == 0, project.stdout + project.stderr
    assert "stdlib" not in project.stdout
    # a zip over the cap fails that module (on the retry ladder), never the run
    small = stagecrawl("go", "crawl", world.OLDSTYLE, "--db", f"sqlite:///{tmp_path / 's.db'}",
                       *world.urls(origin), "--zips", "1", "--zip-max-mb", "0.0001")  # fmt: skip
    assert small.returncode == 1 and "Traceback" not in small.stderr


def test_an_advisory_on_a_mixed_case_module_hits_its_collected_versions(
    tmp_path: Path,
) -> None:
    """Module paths are case-sensitive: `example.com/Mixed/Case` is stored as written, and
    the import's scope and hits compare it as written (a lower-cased key found nothing)."""
    path = "example.com/Mixed/Case"
    server = GoOrigin()
    for version in ("v1.0.0", "v1.1.0", "v1.2.0"):
        server.publish(path, version, f"module {path}\n\ngo 1.22\n")
    folder = tmp_path / "osv"
    folder.mkdir()
    (folder / "TEST-GO-0001.json").write_text(
        json.dumps(
            {
                "id": "TEST-GO-0001",
                "modified": "2026-11-01T00:00:00Z",
                "affected": [
                    {
                        "package": {"ecosystem": "Go", "name": path},
                        "ranges": [
                            {"type": "SEMVER", "events": [{"introduced": "0"}, {"fixed": "1.2.0"}]}
                        ],
                    }
                ],
            }
        )
    )
    db = tmp_path / "go.db"
    url = f"sqlite:///{db}"
    with server:
        done = stagecrawl("go", "crawl", path, "--db", url, *world.urls(server, 50))
        assert done.returncode == 0, done.stderr
    imported = stagecrawl("go", "vulns", "--source", str(folder), "--db", url, "--format", "json")
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["in_scope"] == 1
    hits = rows(db, "SELECT PRODUCT_KEY, VERSION FROM TB_COMP_LIB_VULN_GOLANG_HIT")
    assert sorted((r["PRODUCT_KEY"], r["VERSION"]) for r in hits) == [
        (path, "v1.0.0"),
        (path, "v1.1.0"),
    ]


def test_a_modules_versions_are_asked_together_not_one_after_another(tmp_path: Path) -> None:
    """A module of many versions on a slow proxy: its versions' requests are in flight
    together (the lane paces them), not one round trip after another (a module of 300
    versions took 600 round trips). Counted from the origin's own arrival times."""
    server = GoOrigin()
    path = "example.com/many/versions"
    for v in range(24):
        server.publish(path, f"v1.{v}.0", f"module {path}\n\ngo 1.22\n")
    server.rule("*.info", stall=0.4)
    with server:
        url = f"sqlite:///{tmp_path / 'm.db'}"
        done = stagecrawl("go", "crawl", path, "--db", url, *world.urls(server, 1000))
        assert done.returncode == 0, done.stderr
    # one after another, no two .info requests would arrive within 0.4 s of each other
    assert server.max_in_window("*.info", window=0.4) >= 4
    assert len(rows(tmp_path / "m.db", "SELECT * FROM TB_COMP_LIB_VERSION_GOLANG")) == 24
