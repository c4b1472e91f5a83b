"""`stagecrawl go …`: the kernel's commands (cli/registry.py) for Go modules; Go has no command
of its own. `--since` on refresh walks the index feed (a mirror of everything new), `--private`
keeps modules away from the public proxy and its advisories."""

from __future__ import annotations

from stagecrawl.cli.registry import add_lock_command, registry_app, section_params
from stagecrawl.go.declaration import DECLARATION as GO

# a repository's go.mod is read as it is committed (nothing resolves it), --private applies
app = registry_app(GO, resolve=[p for p in section_params(GO, ()) if p.name == "private"])
add_lock_command(app, GO)  # the pins only: the build list is the go.mod's

__all__ = ["app"]
