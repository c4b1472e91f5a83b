"""Running the `stagecrawl` command as a user would: a real process, a clean environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without any STAGECRAWL_* setting, and a wide terminal."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STAGECRAWL_")}
    return {**env, "COLUMNS": "250", **(extra or {})}


def stagecrawl(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stagecrawl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=cli_env(env),
        cwd=cwd,
    )


def spawn(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start the command without waiting (to kill it, interrupt it, or run several)."""
    return subprocess.Popen(
        [sys.executable, "-m", "stagecrawl", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(env),
    )
