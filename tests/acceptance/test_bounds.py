"""No value poisons a queue (issue 31): on SQLite, MariaDB and PostgreSQL alike, a value one
character over its column's bound — a version, a display name, a hash, a requires-python, a
rust-version, a links key, a pin — fails the one unit it belongs to, with its reason, and
the rest of the run is written (exit 1); a rerun is unaffected (same rows, same failures). An
ETag over its bound is dropped where it enters (the unit is collected; the next request is
unconditional). The bounds are the declared ones (storage/names.py, the registries'
declarations), read here from the same declarations."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stagecrawl.crates.declaration import NAMES as CRATES_NAMES
from stagecrawl.demo.registry import build_mirror
from stagecrawl.pypi.declaration import NAMES as PYPI_NAMES
from stagecrawl.storage.names import SHA256_MAX, SHORT_TEXT_MAX, VALIDATOR_MAX, VERSION_MAX
from stagecrawl.testing.go_origin import GoOrigin
from stagecrawl.testing.origin import TestOrigin
from stagecrawl.testing.pypi_origin import PyPIOrigin, Release, build_project
from tests.acceptance.sites import CONTACT, dump_tables
from tests.cli import stagecrawl

OVER_VERSION = "1.0.0-" + "a" * (VERSION_MAX - 5)  # valid semver, one over
RUST_VERSION_MAX, LINKS_MAX = 32, 128  # crates/tables.py's, checked against the DDL below


def collected(url: str, cli: str) -> dict[str, Any]:
    """What a run wrote: VERSION, PRODUCT, the registry's own table and the LIST's collected
    events (a failed one climbs its ladder on each run: that is the rerun's business)."""
    tables = dump_tables(url, cli)
    tables["LIST"] = [e for e in tables["LIST"] if e["PROCESSED"] == 1]
    return tables


def rerun_is_unaffected(cli: str, url: str, args: list[str]) -> dict[str, Any]:
    """Crawl, then crawl again: both exit 1 (the poisoned units failed, said once each), and
    the second run changes nothing collected. Returns the first run's JSON report."""
    first = stagecrawl(cli, "crawl", *args, "--db", url, "--format", "json")
    assert first.returncode == 1, first.stderr
    assert "Traceback" not in first.stderr
    written = collected(url, cli)
    again = stagecrawl(cli, "crawl", *args, "--db", url, "--format", "json")
    assert again.returncode == 1, again.stderr
    assert collected(url, cli) == written
    report: dict[str, Any] = json.loads(first.stdout)
    return report


# -- crates ---------------------------------------------------------------------------------

GOOD_CRATES = {"cfg-if": (["0.1.0", "1.0.0"], [], set()), "libc": (["0.2.100"], [], set())}
POISON = {  # crate -> (field of its newest index line, value one over its bound)
    "p-version": ("vers", OVER_VERSION),
    "p-cksum": ("cksum", "a" * (SHA256_MAX + 1)),
    "p-rust": ("rust_version", "1." + "9" * (RUST_VERSION_MAX - 1)),
    "p-links": ("links", "l" * (LINKS_MAX + 1)),
}


@pytest.fixture
def crates_mirror(tmp_path: Path) -> Iterator[tuple[TestOrigin, TestOrigin]]:
    crates = {**GOOD_CRATES, **{name: (["1.0.0", "1.1.0"], [], set()) for name in POISON}}
    build_mirror(tmp_path, crates)  # type: ignore[arg-type]
    for name, (field, value) in POISON.items():
        path = tmp_path / "index" / name[:2] / name[2:4] / name
        lines = path.read_text().splitlines()
        last = json.loads(lines[-1])
        last[field] = value
        path.write_text("\n".join([*lines[:-1], json.dumps(last)]) + "\n")
    with TestOrigin(tmp_path / "index") as index, TestOrigin(tmp_path / "api") as api:
        index.rule("/cf/g-/cfg-if", headers={"ETag": '"' + "e" * VALIDATOR_MAX + '"'})
        yield index, api


def test_crates_values_over_their_bounds_fail_their_crate_alone(
    crates_mirror: tuple[TestOrigin, TestOrigin], db_url: str
) -> None:
    index, api = crates_mirror
    urls = ["--index-url", index.url + "/", "--api-url", api.url + "/", "--api-rate", "100"]
    report = rerun_is_unaffected("crates", db_url, [*GOOD_CRATES, *POISON, *urls])
    tables = dump_tables(db_url, "crates")
    written = {(r["NAME"], r["VERSION"]) for r in tables["VERSION"]}
    assert written >= {("cfg-if", "0.1.0"), ("cfg-if", "1.0.0"), ("libc", "0.2.100")}
    # a value one over its column fails its crate alone, with why
    failed = report["collect"]["failures"]
    assert set(failed) == {"p-cksum", "p-rust", "p-links"}
    assert all("longer than its" in why for why in failed.values()), failed
    assert not {name for name, _v in written} & set(failed)
    # a version one over its bound is an unreadable index line: reported, never registered;
    # the crate's readable versions are collected (crates.io's index is read line by line)
    assert ("p-version", "1.0.0") in written
    assert "longer than 100" in report["seed"]["index_problems"]["p-version"][0]
    assert all(len(e["VERSION"]) <= VERSION_MAX for e in tables["LIST"])
    # the ETag over its bound was dropped where it entered; the crate is written
    state = {r["NAME"]: r for r in tables["own"]}
    assert state["cfg-if"]["ETAG"] is None and state["libc"]["ETAG"]


def test_crates_pins_over_their_bounds_are_rejected_alone(
    crates_mirror: tuple[TestOrigin, TestOrigin], db_url: str, tmp_path: Path
) -> None:
    index, api = crates_mirror
    lock = tmp_path / "Cargo.lock"
    lock.write_text(
        "version = 3\n\n"
        '[[package]]\nname = "cfg-if"\nversion = "1.0.0"\n'
        'source = "registry+https://github.com/rust-lang/crates.io-index"\n\n'
        f'[[package]]\nname = "libc"\nversion = "{"1" * 120}"\n'
        'source = "registry+https://github.com/rust-lang/crates.io-index"\n\n'
        f'[[package]]\nname = "{"n" * (CRATES_NAMES.bounds.name + 1)}"\nversion = "1.0.0"\n'
        'source = "registry+https://github.com/rust-lang/crates.io-index"\n'
    )
    urls = ["--index-url", index.url + "/", "--api-url", api.url + "/"]
    done = stagecrawl("crates", "lock", "--lockfile", str(lock), "--db", db_url, *urls)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "longer than" in done.stdout + done.stderr
    listed = {(r["NAME"], r["VERSION"]) for r in dump_tables(db_url, "crates")["LIST"]}
    assert ("cfg-if", "1.0.0") in listed
    assert all(len(v) <= VERSION_MAX and len(n) <= 64 for n, v in listed)


# -- PyPI -----------------------------------------------------------------------------------


@pytest.fixture
def pypi_origin() -> Iterator[PyPIOrigin]:
    origin = PyPIOrigin()
    origin.add_project(build_project("good", [Release("1.0.0"), Release("1.1.0")]))
    origin.add_project(build_project("etag-long", [Release("2.0.0")]))
    origin.add_project(build_project("p-version", [Release("1.0.0"), Release("1." + "1" * 99)]))
    long_display = "P" + "._" * (PYPI_NAMES.bounds.name // 2) + "display"
    origin.add_project(build_project(long_display, [Release("1.0.0")]))
    origin.add_project(
        build_project("p-python", [Release("1.0.0", requires_python="!=3.0," * 43 + ">=3.8")])
    )
    sha = build_project("p-sha", [Release("1.0.0")])
    for f in sha.page["files"]:
        f["hashes"] = {"sha256": "f" * (SHA256_MAX + 1)}
    origin.add_project(sha)
    with origin:
        origin.rule("/simple/etag-long/", headers={"ETag": '"' + "e" * VALIDATOR_MAX + '"'})
        yield origin


POISONED_PROJECTS = ["p-version", "p-display", "p-python", "p-sha"]


def test_pypi_values_over_their_bounds_fail_their_project_alone(
    pypi_origin: PyPIOrigin, db_url: str
) -> None:
    assert len("!=3.0," * 43 + ">=3.8") > SHORT_TEXT_MAX
    urls = [
        *("--index-url", f"{pypi_origin.url}/simple/", "--api-url", f"{pypi_origin.url}/"),
        *("--contact", CONTACT, "--files-rate", "100", "--api-rate", "100"),
    ]
    report = rerun_is_unaffected("pypi", db_url, ["good", "etag-long", *POISONED_PROJECTS, *urls])
    tables = dump_tables(db_url, "pypi")
    written = {(r["PRODUCT_KEY"], r["VERSION"]) for r in tables["VERSION"]}
    assert written == {("good", "1.0.0"), ("good", "1.1.0"), ("etag-long", "2.0.0")}
    said = json.dumps(report)
    for name in POISONED_PROJECTS:
        assert name in said, name
    assert "longer than its" in said
    etags = {r["PRODUCT_KEY"]: r["ETAG"] for r in tables["PRODUCT"]}
    assert etags["etag-long"] is None and etags["good"]


def test_pypi_pins_over_their_bounds_are_rejected_alone(
    pypi_origin: PyPIOrigin, db_url: str, tmp_path: Path
) -> None:
    lock = tmp_path / "requirements.txt"
    lock.write_text(f"good==1.0.0\nlong-pin=={'1' * 120}\n{'n' * 201}==1.0\n")
    urls = ["--index-url", f"{pypi_origin.url}/simple/", "--api-url", f"{pypi_origin.url}/"]
    done = stagecrawl("pypi", "lock", "--lockfile", str(lock), "--db", db_url, *urls)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    listed = {(r["NAME"], r["VERSION"]) for r in dump_tables(db_url, "pypi")["LIST"]}
    assert ("good", "1.0.0") in listed
    assert all(len(v) <= VERSION_MAX for _n, v in listed)


# -- Go -------------------------------------------------------------------------------------

GO_VERSION_MAX = 32  # go/tables.py's GO_VERSION and TOOLCHAIN


@pytest.fixture
def go_origin() -> Iterator[GoOrigin]:
    origin = GoOrigin()
    for path in ("example.com/good", "example.com/long-version", "example.com/long-go"):
        origin.publish(path, "v1.0.0", f"module {path}\n\ngo 1.22\n")
    origin.publish("example.com/long-version", "v1.1.0-" + "a" * (VERSION_MAX - 6), "")
    origin.publish(
        "example.com/long-go",
        "v1.1.0",
        "module example.com/long-go\n\ngo 1." + "9" * GO_VERSION_MAX + "\n",
    )
    with origin:
        yield origin


def test_go_values_over_their_bounds_fail_their_module_alone(
    go_origin: GoOrigin, db_url: str
) -> None:
    flags = [
        *("--proxy-url", go_origin.proxy_url, "--index-url", go_origin.index_url),
        *("--contact", CONTACT, "--proxy-rate", "100"),
    ]
    names = ["example.com/good", "example.com/long-version", "example.com/long-go"]
    report = rerun_is_unaffected("go", db_url, [*names, *flags])
    written = {(r["PRODUCT_KEY"], r["VERSION"]) for r in dump_tables(db_url, "go")["VERSION"]}
    assert written == {("example.com/good", "v1.0.0")}
    said = json.dumps(report)
    assert "example.com/long-version" in said and "example.com/long-go" in said
    assert said.count("longer than its") >= 2
