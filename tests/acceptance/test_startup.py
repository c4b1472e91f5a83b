"""Start-up: every command is still there and works when its module is imported only as it
runs; a signal during start-up ends the process with 130/143 and no traceback. (How fast it
starts is measured in bench/startup.py, never asserted here.)"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from stagecrawl.cli.commands import LAZY, load
from tests.cli import cli_env, stagecrawl


def test_version_and_help_list_every_command() -> None:
    version = stagecrawl("--version")
    assert version.returncode == 0 and version.stdout.startswith("stagecrawl ")
    listed = stagecrawl("--help")
    assert listed.returncode == 0
    for name in LAZY:
        assert f" {name} " in listed.stdout, name


@pytest.mark.parametrize("name", sorted(LAZY))
def test_each_command_loads_and_answers_help(name: str) -> None:
    command = load(name)
    assert command.name == name
    done = stagecrawl(name, "--help")
    assert done.returncode == 0, done.stderr
    assert "Usage:" in done.stdout and "Traceback" not in done.stderr


def test_help_imports_no_engine_database_or_pipeline() -> None:
    probe = (
        "import sys\n"
        "from stagecrawl.cli import main\n"
        "sys.argv = ['stagecrawl', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('aiohttp', 'sqlalchemy', 'stagecrawl.kernel.phases',"
        " 'stagecrawl.crates.plugin', 'stagecrawl.pypi.plugin', 'stagecrawl.go.plugin',"
        " 'stagecrawl.aircraft.run', 'stagecrawl.crates.licenses', 'asyncio')"
        " if m in sys.modules]\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=cli_env(), timeout=120
    )
    assert "HEAVY []" in done.stderr, done.stderr


# Runs `stagecrawl status` in a child that holds still right after it has imported WHEN (and
# says so on stderr), so the signal lands mid-start-up, never after the child has finished.
HOLD_AFTER_IMPORT = """
import importlib.machinery, runpy, sys, time
when, db = sys.argv[1], sys.argv[2]

class HoldAfter:
    def find_spec(self, name, path=None, target=None):
        if name != when:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            print("IMPORTED", name, file=sys.stderr, flush=True)
            time.sleep(30)  # inside the import statement: the signal comes now

        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, HoldAfter())
sys.argv = ["stagecrawl", "status", "--db", db]
runpy.run_module("stagecrawl", run_name="__main__", alter_sys=True)
"""


def sigint_ignored() -> None:
    """How a shell without job control starts a background job (`stagecrawl … &`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def sigint_default() -> None:
    """How a terminal starts a command (whatever this test process was started with)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize(
    ("signum", "code", "started"),
    [
        (signal.SIGINT, 130, sigint_default),
        (signal.SIGTERM, 143, sigint_default),
        (signal.SIGINT, 130, sigint_ignored),
    ],
    ids=["SIGINT", "SIGTERM", "SIGINT-in-a-background-job"],
)
@pytest.mark.parametrize("when", ["typer", "stagecrawl.cli.commands", "sqlalchemy.engine"])
def test_a_signal_during_start_up_exits_quietly(
    signum: int, code: int, started: Callable[[], None], when: str, tmp_path: Path
) -> None:
    """The signal lands while the CLI is still importing (just after `when` was imported,
    inside the import that asked for it): 130/143, and never a traceback; also when the
    command was started with SIGINT ignored, as a script's background job is."""
    # a driver named: status opens it through SQLAlchemy (a plain sqlite:/// URL is read with
    # the standard library's sqlite3 and never imports sqlalchemy.engine)
    db = f"sqlite+pysqlite:///{tmp_path}/no.db"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD_AFTER_IMPORT, when, db],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
        preexec_fn=started,
    )
    assert proc.stderr is not None
    seen: list[str] = []
    for line in proc.stderr:
        seen.append(line)
        if line.strip() == f"IMPORTED {when}":
            proc.send_signal(signum)
            break
    else:
        pytest.fail("".join(seen[-20:]))
    rest = proc.stderr.read()
    proc.wait(timeout=60)
    messages = rest.splitlines()
    assert proc.returncode == code, messages
    assert not any("Traceback" in m or "KeyboardInterrupt" in m for m in messages), messages
