"""The `stagecrawl` command line (typer + rich): the only layer that parses options and
renders. Pipelines return report objects; this package turns them into tables or JSON and
exit codes (cli/common.py).

This module imports only the standard library: `stagecrawl --version` answers without
loading the CLI, and a SIGINT or SIGTERM while the rest is imported ends the process with
130 or 143 and no traceback. The command tree is in cli/commands.py; each command's module is
imported when that command runs.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType
from typing import Any

EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 2, 130, 143


def _terminated(_signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(EXIT_TERMINATED)


def main() -> None:
    """Run the app; a usage error (unknown option, a value out of range) is one line and exit
    2 like every other bad input, not a framed usage block."""
    # Until a command installs its own handlers (cli/common.py's `run`), SIGTERM ends the
    # process as 143 and SIGINT as 130, with no traceback, even mid-import. SIGINT is set
    # here too: a shell without job control starts a background job (`stagecrawl … &` in a
    # script) with SIGINT ignored, and Python then leaves it ignored; the command's own
    # handlers take SIGINT anyway once it runs, so start-up would be the one deaf phase.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminated)
    try:
        if sys.argv[1:] == ["--version"]:
            from stagecrawl import __version__

            print(f"stagecrawl {__version__}")
            sys.exit(0)
        _run_app()
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)


def _run_app() -> None:
    from stagecrawl.cli.commands import app
    from stagecrawl.cli.common import fail

    try:
        code = app(standalone_mode=False)
    except Exception as exc:
        message = getattr(exc, "format_message", None)
        exit_code = getattr(exc, "exit_code", None)
        if message is None or not isinstance(exit_code, int):
            raise
        text = message()
        if type(exc).__name__ == "NoArgsIsHelpError":  # the help itself, not an error
            print(text)
        else:
            fail(text, exit_code)
        sys.exit(exit_code)
    except EOFError:
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(code if isinstance(code, int) else 0)


def __getattr__(name: str) -> Any:
    """`stagecrawl.cli.commands` (the typer app) on first use, for tests and tools."""
    if name == "app":
        from stagecrawl.cli.commands import app

        return app
    raise AttributeError(name)
