"""`stagecrawl pypi …`: the kernel's commands (cli/registry.py); PyPI has no command of its
own. Same shapes, exit codes and `--format` as every registry: 0 ok, 1 something failed or
waits, 2 bad input or configuration, 130/143 stopped by a signal."""

from __future__ import annotations

from stagecrawl.cli.registry import add_lock_command, registry_app
from stagecrawl.pypi.declaration import DECLARATION as PYPI

app = registry_app(PYPI)
add_lock_command(app, PYPI)  # pins only: a lock file of Python is its own resolution

__all__ = ["app"]
