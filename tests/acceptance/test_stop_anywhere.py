"""A stop at a random moment of `refresh`, `lock` and `vulns`, for every registry, then a plain
rerun of the same command: every table equals a clean run's, on SQLite and on PostgreSQL.

The moment is drawn over the whole of a clean run's duration, so the stops fall in start-up,
on the wire, between a fetch and its write, inside registration and inside an import. What a
run fetched but did not apply must not be recorded as done (a refresh's validators and cursor
go only with the work they imply), and what it wrote must be what a rerun would write.

The suite draws `STAGECRAWL_STOP_RUNS` moments per command, registry and backend (1 unless
told: 18 stops, about three minutes); the acceptance count, 20 each (360 stops, about forty
minutes), is run by setting it, and `STAGECRAWL_STOP_SEED` replays a failure's draws. Stops
during a git clone are engine/test_git_cache.py's (one clone path serves every registry's
lock)."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import MetaData, create_engine, make_url, select, text

from stagecrawl.demo.advisories import advisory, osv_zip
from stagecrawl.testing.go_origin import GoOrigin
from stagecrawl.testing.origin import TestOrigin
from stagecrawl.testing.pypi_origin import PyPIOrigin
from stagecrawl.testing.registry import write_cargo_lock
from tests.acceptance.registry import CRATES
from tests.acceptance.sites import Site, site_for
from tests.cli import spawn, stagecrawl
from tests.services import POSTGRES_URL

RUNS = int(os.environ.get("STAGECRAWL_STOP_RUNS", "1"))
SEED = int(os.environ.get("STAGECRAWL_STOP_SEED", str(random.randrange(1 << 30))))
# Columns that say when or by whom, not what: a stopped run and a clean one differ there.
WHEN = {
    "TIMESTAMP", "LAST_UPDATED", "CLAIMED_BY", "CLAIMED_UNTIL", "CLAIMED_AT", "CHECKED_AT",
    "IMPORTED_AT", "CREATED_AT", "UPDATED_AT", "FIRST_SEEN", "LAST_SEEN",
}  # fmt: skip
ECOSYSTEM = {"crates": "crates.io", "pypi": "PyPI", "go": "Go"}
LOCK_PINS = 20_000  # enough that registration takes a while on either backend


@dataclass
class Backend:
    """Where a run's database lives, and how a prepared one is copied for each run."""

    kind: str
    root: Path

    def url(self, name: str) -> str:
        if self.kind == "sqlite":
            return f"sqlite:///{self.root / (name + '.db')}"
        return str(make_url(POSTGRES_URL).set(database=self._pg_name(name)))

    def _pg_name(self, name: str) -> str:
        return f"{make_url(POSTGRES_URL).database}_stop_{name}"

    def create(self, name: str, template: str | None = None) -> str:
        """A new, empty database (or a copy of `template`'s), by name."""
        if self.kind == "sqlite":
            target = self.root / (name + ".db")
            target.unlink(missing_ok=True)
            if template is not None and (self.root / (template + ".db")).exists():
                shutil.copyfile(self.root / (template + ".db"), target)
            return self.url(name)
        admin = create_engine(
            make_url(POSTGRES_URL).set(database="postgres"), isolation_level="AUTOCOMMIT"
        )
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{self._pg_name(name)}"'))
            like = f' TEMPLATE "{self._pg_name(template)}"' if template else ""
            conn.execute(text(f'CREATE DATABASE "{self._pg_name(name)}"{like}'))
        admin.dispose()
        return self.url(name)

    def drop_all(self, names: list[str]) -> None:
        if self.kind == "sqlite":
            return
        admin = create_engine(
            make_url(POSTGRES_URL).set(database="postgres"), isolation_level="AUTOCOMMIT"
        )
        with admin.connect() as conn:
            for name in names:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{self._pg_name(name)}"'))
        admin.dispose()


def dump_everything(url: str) -> dict[str, list[dict[str, Any]]]:
    """Every row of every table the runs made, sorted, without the columns that say when
    (the worker table too: a stopped run's row must be gone, as a clean run's is)."""
    engine = create_engine(url)
    metadata = MetaData()
    metadata.reflect(engine)
    result: dict[str, list[dict[str, Any]]] = {}
    with engine.connect() as conn:
        for name, table in sorted(metadata.tables.items()):
            columns = [c for c in table.columns if c.name.upper() not in WHEN]
            rows = conn.execute(select(*columns)).all()
            result[name] = sorted(
                (dict(r._mapping) for r in rows), key=lambda r: json.dumps(r, default=str)
            )
    engine.dispose()
    return result


def flags_without(site: Site, *dropped: str) -> list[str]:
    """The site's flags less the options (each with its value) a command does not take."""
    kept, flags = [], iter(site.flags)
    for option in flags:
        value = next(flags)
        if option not in dropped:
            kept += [option, value]
    return kept


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Scenario:
    """One command of one registry: what the database holds before it (`prepare`, run once,
    then copied), what changes at the origin before it (`change`), and its arguments."""

    args: list[str]
    prepare: Callable[[str], None] = lambda url: None
    change: Callable[[], None] = lambda: None


def refresh_scenario(site: Site, root: Path) -> Scenario:
    def prepare(url: str) -> None:
        done = stagecrawl(site.cli, "crawl", *site.names, "--db", url, *site.flags, *site.fast)
        assert done.returncode == 0, done.stderr
        if site.cli == "go":  # the feed's cursor starts (an hour back by our clock: a when)
            done = stagecrawl("go", "refresh", "--db", url, *site.flags, *site.fast)
            assert done.returncode == 0, done.stderr

    def change() -> None:
        changed = site.names[::3]
        if site.cli == "crates":
            from stagecrawl.demo.registry import build_mirror

            grown = {
                name: ([*versions, "9.0.0"] if name in changed else versions, deps, yanked)
                for name, (versions, deps, yanked) in CRATES.items()
            }
            build_mirror(root / "mirror", grown)
        elif site.cli == "pypi":
            from tests.pypi.test_refresh import add_release

            assert isinstance(site.origin, PyPIOrigin)
            for name in changed:
                add_release(site.origin, name, "9.0.0")
        else:
            assert isinstance(site.origin, GoOrigin)
            for path in changed:
                site.origin.publish(path, "v1.9.0", f"module {path}\n\ngo 1.22\n", when=now())

    return Scenario(["refresh", *site.flags, *site.slow], prepare, change)


def lock_scenario(site: Site, root: Path) -> Scenario:
    lock = root / "locks"
    lock.mkdir(exist_ok=True)
    if site.cli == "crates":  # crates' lock asks the index for every locked crate
        path = write_cargo_lock(lock / "Cargo.lock", sorted(CRATES))
        rate = ["--index-rate", "6"]
    elif site.cli == "pypi":  # pins alone: registration is the work
        path = lock / "requirements.txt"
        path.write_text("".join(f"pin-{i:05d}=={i % 7}.{i % 3}\n" for i in range(LOCK_PINS)))
        rate = []
    else:
        path = lock / "go.mod"
        required = "".join(f"\texample.com/pin/m{i:05d} v1.{i % 7}.0\n" for i in range(LOCK_PINS))
        path.write_text(f"module example.com/app\n\ngo 1.22\n\nrequire (\n{required})\n")
        rate = []
    flags = flags_without(site, "--contact") if site.cli != "pypi" else []
    return Scenario(["lock", "--lockfile", str(path), *flags, *rate])


def vulns_scenario(site: Site, origin: TestOrigin) -> Scenario:
    ecosystem = ECOSYSTEM[site.cli]
    records = [
        advisory(
            f"STOP-{n:05d}",
            ecosystem,
            site.names[n % len(site.names)] if n % 2 else f"elsewhere-{n}",
            f"made-up advisory {n}",
            [[("introduced", "0"), ("fixed", "9.0.0" if site.cli != "go" else "v1.9.0")]],
            aliases=[f"CVE-2099-{n:05d}"] if n % 3 == 0 else [],
        )
        for n in range(3000)
    ]
    origin.add("/osv/all.zip", osv_zip(records))
    # an answer that takes a second: the stops fall on the wire too, not only in the import
    origin.rule("/osv/*", stall=1.0)
    return Scenario(["vulns", "--source", origin.url + "/osv/all.zip", "--scope", "all"])


@pytest.fixture(params=["crates", "pypi", "go"])
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Site]:
    with site_for(request.param, tmp_path / "mirror") as made:
        yield made


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    made = Backend(request.param, tmp_path)
    yield made
    made.drop_all(["base", "clean", "run"])


def run_to_the_end(site: Site, command: list[str], url: str) -> float:
    started = time.monotonic()
    done = stagecrawl(site.cli, *command[:1], "--db", url, *command[1:])
    assert done.returncode in (0, 1), done.stderr
    return time.monotonic() - started


@pytest.mark.slow
@pytest.mark.parametrize("command", ["refresh", "lock", "vulns"])
def test_a_stop_anywhere_then_a_plain_rerun_equals_a_clean_run(
    site: Site, backend: Backend, command: str, tmp_path: Path
) -> None:
    with TestOrigin(tmp_path / "osv-origin") as osv:
        scenario = {
            "refresh": lambda: refresh_scenario(site, tmp_path),
            "lock": lambda: lock_scenario(site, tmp_path),
            "vulns": lambda: vulns_scenario(site, osv),
        }[command]()
        scenario.prepare(backend.create("base"))
        scenario.change()
        took = run_to_the_end(site, scenario.args, backend.create("clean", template="base"))
        expected = dump_everything(backend.url("clean"))
        draw = random.Random(SEED)
        for attempt in range(RUNS):
            at = draw.uniform(0.2, took)
            sig = draw.choice([signal.SIGINT, signal.SIGTERM])
            url = backend.create("run", template="base")
            process = spawn(site.cli, scenario.args[0], "--db", url, *scenario.args[1:])
            time.sleep(at)
            process.send_signal(sig)
            _out, err = process.communicate(timeout=120)
            said = f"seed {SEED}, run {attempt}, {sig.name} at {at:.2f} s of {took:.2f} s"
            # 130/143: the command's own exit; -2/-15: the signal came in the interpreter's
            # first tenths of a second, before the command began (a shell shows 130/143)
            assert process.returncode in (0, 1, 130, 143, -2, -15), f"{said}: {err}"
            assert "Traceback" not in err, f"{said}: {err}"
            rerun = stagecrawl(site.cli, scenario.args[0], "--db", url, *scenario.args[1:])
            assert rerun.returncode in (0, 1), f"{said}: {rerun.stderr}"
            assert dump_everything(url) == expected, said
