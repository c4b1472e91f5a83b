"""Every registry stagecrawl knows, as its declaration (light: names, words, settings, lock
files). Importing this module declares their settings sections; a registry's tables are
declared when its work is loaded (`RegistryDecl.load`) or all at once by `load_all`.

Above the registry packages in the arrows (like cli/): the core never imports it. A new
registry adds its declaration here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stagecrawl.crates.declaration import DECLARATION as CRATES
from stagecrawl.go.declaration import DECLARATION as GO
from stagecrawl.kernel.declaration import RegistryDecl
from stagecrawl.pypi.declaration import DECLARATION as PYPI

if TYPE_CHECKING:
    from stagecrawl.kernel.registry import Registry

DECLARATIONS: tuple[RegistryDecl, ...] = (CRATES, PYPI, GO)
BY_CLI = {decl.cli: decl for decl in DECLARATIONS}


def declare_tables() -> None:
    """Declare every registry's tables (storage/schema.py), without loading its clients:
    what a database opened for all of them (status, the tests) needs."""
    for decl in DECLARATIONS:
        decl.declare_tables()


def load_all() -> list[Registry[Any]]:
    from stagecrawl.kernel.registry import load as load_registry

    return [load_registry(decl) for decl in DECLARATIONS]
