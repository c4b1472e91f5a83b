"""`pypi licenses check` as a user runs it on a project's lock: a pin is the collected version
PEP 440 calls the same (`3.13.0` is the `3.13` PyPI lists), so its license is the collected
one, never "not collected"; a version really not collected is reported, never passed."""

from __future__ import annotations

import json
from pathlib import Path

from stagecrawl.testing.pypi_origin import PyPIOrigin, Release, build_project
from tests.cli import stagecrawl


def test_a_pin_is_checked_against_the_version_pep_440_calls_the_same(tmp_path: Path) -> None:
    origin = PyPIOrigin()
    origin.add_project(build_project("Demo.Yaml", [Release("3.12"), Release("3.13")]))
    url = f"sqlite:///{tmp_path / 'l.db'}"
    with origin:
        crawled = stagecrawl(
            "pypi", "crawl", "demo-yaml", "--db", url, "--contact", "tests@example.org",
            "--index-url", f"{origin.url}/simple/", "--api-url", f"{origin.url}/",
        )  # fmt: skip
        assert crawled.returncode == 0, crawled.stderr
    lock = tmp_path / "requirements.txt"
    lock.write_text("Demo.Yaml==3.13.0\n")
    check = stagecrawl("pypi", "licenses", "check", "--lockfile", str(lock), "--allow", "MIT",
                       "--db", url, "--format", "json")  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    assert json.loads(check.stdout)["violations"] == []
    lock.write_text("Demo.Yaml==3.14\n")  # not collected: its license is unknown, and said
    missing = stagecrawl("pypi", "licenses", "check", "--lockfile", str(lock), "--allow", "MIT",
                         "--db", url, "--format", "json")  # fmt: skip
    assert missing.returncode == 1
    assert "not collected" in json.dumps(json.loads(missing.stdout)["violations"])
