"""PyPI project names: PEP 503 normalisation is the identity (`PRODUCT_KEY`), the display name
is what the JSON API's `info.name` says."""

from __future__ import annotations

import re

from packaging.utils import canonicalize_name

from stagecrawl.pypi.declaration import NAMES

# PEP 508 / core metadata: ASCII letters, digits, and . _ - inside, starting and ending alnum.
VALID_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)
MAX_NAME_LENGTH = NAMES.bounds.name  # the columns' bound (declared once)


def normalize(name: str) -> str:
    """PEP 503: runs of `-`, `_`, `.` become one `-`, lower case (packaging's own function)."""
    return str(canonicalize_name(name))


def name_problem(name: str, bounded: bool = True) -> str | None:
    """Why `name` cannot be a PyPI project name, or None when it can. `bounded=False` leaves
    the length to the kernel (a lock's pin over the bound is rejected alone, with why)."""
    if not name:
        return "empty project name"
    if bounded and len(name) > MAX_NAME_LENGTH:
        return f"project name longer than {MAX_NAME_LENGTH} characters"
    if not VALID_NAME.match(name):
        return f"{name!r} is not a valid project name (PEP 508: letters, digits, '.', '_', '-')"
    return None
