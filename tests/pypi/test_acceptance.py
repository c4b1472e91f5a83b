"""PyPI acceptance, as a user runs it (the CLI in a real process against the look-alike):
SIGINT/SIGTERM and what goes back, a hostile origin in PyPI's own ways, bad input. Nothing
collected is lost, nothing is written twice, every error is one line. (Kill -9 then a rerun
is proved with every registry: tests/acceptance/test_every_registry.py.)"""

from __future__ import annotations

import itertools
import json
import signal
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stagecrawl.testing.pypi_origin import PyPIOrigin, synthetic_project
from tests.cli import spawn, stagecrawl

NAMES = [f"accept-{i:02d}" for i in range(12)]
VOLATILE = {"LAST_UPDATED", "TIMESTAMP", "CLAIMED_BY", "CLAIMED_UNTIL", "RELEASE_DATE_SEEN"}


@pytest.fixture
def origin() -> Iterator[PyPIOrigin]:
    server = PyPIOrigin()
    for n, name in enumerate(NAMES):
        project = synthetic_project(name, 3 + n % 4, requires=["six>=1.0"], yanked={0})
        if n % 3 == 0:  # no core metadata: the JSON API answers (requires_dist null: unknown)
            for f in project.page["files"]:
                f["core-metadata"] = f["data-dist-info-metadata"] = False
        server.add_project(project)
    server.start()
    yield server
    server.stop()


def urls(origin: PyPIOrigin, rate: str = "40") -> list[str]:
    return [
        *("--index-url", f"{origin.url}/simple/", "--api-url", f"{origin.url}/"),
        *("--contact", "tests@example.org", "--index-rate", rate, "--api-rate", rate),
        *("--files-rate", rate),
    ]


def dump(path: Path) -> dict[str, list[dict[str, Any]]]:
    """The PyPI tables, rows sorted, columns that hold times left out."""
    connection = sqlite3.connect(path)
    connection.row_factory = sqlite3.Row
    result = {}
    for table in ("TB_COMP_LIB_PYPI_LIST", "TB_COMP_LIB_VERSION_PYPI", "TB_COMP_LIB_PRODUCT_PYPI"):
        rows = [
            {k: row[k] for k in row.keys() if k not in VOLATILE}  # noqa: SIM118
            for row in connection.execute(f"SELECT * FROM {table}")
        ]
        result[table] = sorted(rows, key=repr)
    connection.close()
    return result


def count(path: Path, sql: str) -> int:
    connection = sqlite3.connect(path)
    try:
        return int(connection.execute(sql).fetchone()[0])
    finally:
        connection.close()


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_collect_and_a_rerun_finishes(
    origin: PyPIOrigin, tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    db = tmp_path / "stop.db"
    url = f"sqlite:///{db}"
    seeded = stagecrawl("pypi", "seed", *NAMES, "--db", url, *urls(origin))
    assert seeded.returncode == 0, seeded.stderr
    process = spawn("pypi", "collect", "--db", url, *urls(origin, "4"), "--format", "json")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if count(db, "SELECT COUNT(*) FROM TB_COMP_LIB_VERSION_PYPI"):
            break
        time.sleep(0.1)
    process.send_signal(sig)
    stdout, stderr = process.communicate(timeout=90)
    assert process.returncode == code, stderr
    assert "Traceback" not in stderr
    # The report says what went back to the queue and why, in words: at 4 requests a second
    # with 8 at once, work was waiting on our own lanes when the signal came.
    report = json.loads(stdout)["collect"]
    assert report["interrupted"] is True and report["released"] > 0, report
    assert report["given_back"].startswith("given back: "), report
    assert "waiting on our" in report["given_back"] or "not started" in report["given_back"]
    events = count(db, "SELECT COUNT(*) FROM TB_COMP_LIB_PYPI_LIST")
    done = count(db, "SELECT COUNT(*) FROM TB_COMP_LIB_PYPI_LIST WHERE PROCESSED = 1")
    assert 0 < done < events
    assert count(db, "SELECT COUNT(*) FROM TB_COMP_LIB_PYPI_LIST WHERE CLAIMED_BY IS NOT NULL") == 0
    rerun = stagecrawl("pypi", "collect", "--db", url, *urls(origin))
    assert rerun.returncode == 0, rerun.stderr
    assert count(db, "SELECT COUNT(*) FROM TB_COMP_LIB_PYPI_LIST WHERE PROCESSED != 1") == 0


def test_hostile_origin_fails_projects_not_the_run(origin: PyPIOrigin, tmp_path: Path) -> None:
    db = tmp_path / "hostile.db"
    url = f"sqlite:///{db}"
    origin.misbehave(f"/simple/{NAMES[0]}/", "html")  # HTML where JSON was asked
    origin.misbehave(f"/simple/{NAMES[1]}/", "not-json")
    origin.misbehave(f"/simple/{NAMES[2]}/", "wrong-shape")
    origin.rule("/pypi/*", too_many=3, retry_after="1")  # 429s the crawl must wait out
    origin.rule(f"/files/*{NAMES[4].replace('-', '_')}-1.0.1-*", fail_times=99, fail_status=500)
    done = stagecrawl("pypi", "crawl", *NAMES, "--db", url, *urls(origin), "--format", "json")
    assert done.returncode == 1, done.stderr  # failures wait on the ladder
    assert "Traceback" not in done.stderr
    failed = done.stdout
    for name in NAMES[:3]:
        assert name in failed
    # every other project is in, the 429s waited out, the 500s on one metadata file retried
    # and failed that project only
    stored = count(db, "SELECT COUNT(DISTINCT PRODUCT_KEY) FROM TB_COMP_LIB_VERSION_PYPI")
    assert stored == len(NAMES) - 4
    origin.clear_misbehaviour()
    origin.clear_rules()
    rerun = stagecrawl("pypi", "crawl", *NAMES, "--db", url, *urls(origin))
    assert rerun.returncode == 0, rerun.stderr
    stored = count(db, "SELECT COUNT(DISTINCT PRODUCT_KEY) FROM TB_COMP_LIB_VERSION_PYPI")
    assert stored == len(NAMES)


def test_invalid_versions_are_kept_and_reported(origin: PyPIOrigin, tmp_path: Path) -> None:
    project = synthetic_project("oddities", 2)
    for f in project.page["files"]:
        f["filename"] = f["filename"].replace("1.0.0", "unknown")
    project.page["versions"] = ["unknown", "1.0.1"]
    origin.add_project(project)
    db = tmp_path / "odd.db"
    done = stagecrawl(
        "pypi", "crawl", "oddities", "--db", f"sqlite:///{db}", *urls(origin), "--format", "json"
    )
    assert done.returncode == 0, done.stderr
    assert "unknown: not a PEP 440 version (kept)" in done.stdout
    assert count(db, "SELECT COUNT(*) FROM TB_COMP_LIB_VERSION_PYPI WHERE VERSION_VALID = 0") == 1
    latest = (
        sqlite3.connect(db)
        .execute("SELECT LATEST_VERSION, INVALID_VERSIONS FROM TB_COMP_LIB_PRODUCT_PYPI")
        .fetchone()
    )
    assert latest == ("1.0.1", '["unknown"]')
    shown = stagecrawl("status", "--db", f"sqlite:///{db}", "--format", "json")
    assert shown.returncode == 0, shown.stderr
    pypi = json.loads(shown.stdout)["pypi"]
    assert pypi["versions"] == 2 and pypi["products"] == 1
    assert pypi["list"] == [{"processed": 1, "meaning": "collected", "events": 2}]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["crawl", "bad name!"], "not a valid project name"),
        (["crawl"], "no project names given"),
        (["crawl", "six", "--index-rate", "-1"], "index-rate"),
        (["crawl", "six", "--index-url", "ftp://x/"], "index-url"),
        (["lock", "--lockfile", "MISSING.lock"], "cannot read"),
        (["audit", "six>=1"], "NAME==VERSION"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    origin: PyPIOrigin, tmp_path: Path, args: list[str], message: str
) -> None:
    db = tmp_path / "never.db"
    extra = [] if args[0] in ("lock", "audit") else urls(origin)
    # later options win: the bad ones are given last
    done = stagecrawl("pypi", *args[:1], *extra, *args[1:], "--db", f"sqlite:///{db}")
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert not db.exists()


def test_malformed_lock_files_are_one_line_and_create_nothing(tmp_path: Path) -> None:
    db = tmp_path / "never.db"
    cases = {
        "poetry.lock": "[[package]\nname =",
        "uv.lock": "version = 7\n",
        "pylock.toml": 'lock-version = "1.0"\n[[packages]]\nversion = "1"\n',
        "requirements.txt": "requests==2.0 ;;; !!\n",
    }
    for name, text in cases.items():
        lock = tmp_path / name
        lock.write_text(text)
        done = stagecrawl("pypi", "lock", "--lockfile", str(lock), "--db", f"sqlite:///{db}")
        assert done.returncode == 2, (name, done.stderr)
        assert done.stderr.count("\n") == 1 and name in done.stderr, (name, done.stderr)
        assert "Traceback" not in done.stderr
    assert not db.exists()


def test_a_contact_is_required(origin: PyPIOrigin, tmp_path: Path) -> None:
    args = ["--index-url", f"{origin.url}/simple/", "--api-url", f"{origin.url}/"]
    done = stagecrawl("pypi", "crawl", "six", *args, "--db", f"sqlite:///{tmp_path / 'x.db'}")
    assert done.returncode == 2 and "contact" in done.stderr
    assert origin.log == []  # refused before the first request


def observed_rate(origin: PyPIOrigin, pattern: str) -> float:
    """Requests per second on one lane, first to last (a single late grant does not count:
    the pace is the lane's, on average, burst 1)."""
    times = sorted(r.time for r in origin.requests_to(pattern))
    assert len(times) >= 4, pattern
    return (len(times) - 1) / (times[-1] - times[0])


def closest_gap(origin: PyPIOrigin, pattern: str) -> float:
    """The shortest time between two requests on one lane, by the origin's clock. With burst 1
    no two grants come closer than the lane's interval, so a gap below the default rate's
    interval shows that a faster configured rate took effect, however slowly a loaded machine
    supplied the rest of the work (an average rate over the run does not show that)."""
    times = sorted(r.time for r in origin.requests_to(pattern))
    return min(later - earlier for earlier, later in itertools.pairwise(times))


def test_lane_rate_flags_and_variables_reach_their_lanes(
    origin: PyPIOrigin, tmp_path: Path
) -> None:
    args = ["--index-url", f"{origin.url}/simple/", "--api-url", f"{origin.url}/"]
    names = NAMES[:6]
    done = stagecrawl(
        "pypi", "crawl", *names, *args, "--contact", "t@example.org",
        "--index-rate", "5", "--api-rate", "4", "--files-rate", "8",
        "--db", f"sqlite:///{tmp_path / 'a.db'}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert observed_rate(origin, "/pypi/*") <= 4
    assert closest_gap(origin, "/pypi/*") < 0.4  # the default 2/s never comes closer than 0.5 s
    assert observed_rate(origin, "/simple/*") <= 5
    assert observed_rate(origin, "/files/*") <= 8
    origin.log.clear()
    env = {
        "STAGECRAWL_PYPI_API_RATE": "3",
        "STAGECRAWL_CONTACT": "t@example.org",
        "STAGECRAWL_PYPI_SEED_PACKAGES": ",".join(NAMES[6:9]),
        "STAGECRAWL_PYPI_INDEX_URL": f"{origin.url}/simple/",
        "STAGECRAWL_PYPI_API_URL": f"{origin.url}/",
    }
    done = stagecrawl("pypi", "crawl", "--db", f"sqlite:///{tmp_path / 'b.db'}", env=env)
    assert done.returncode == 0, done.stderr
    assert {r.path.split("/")[2] for r in origin.requests_to("/simple/*")} == set(NAMES[6:9])
    assert observed_rate(origin, "/pypi/*") <= 3
    assert closest_gap(origin, "/pypi/*") < 0.45  # 3/s, not the default 2/s
    assert all("t@example.org" in r.headers.get("User-Agent", "") for r in origin.log)
