"""Requires-Dist lines (PEP 508, old-style `name (>=1.0)` included) as VERSION's DEPENDENCIES:
one entry per line with the normalised name, the specifier, extras, the marker and the extra
that switches it on. A line packaging cannot read is kept raw with its reason, never dropped."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from stagecrawl.pypi.names import normalize

_EXTRA = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]""")


# A project's releases repeat most of their lines (and packaging's parse of one took a quarter
# of a PyPI collect's CPU): a line is read once while it recurs. Bounded, so memory stays flat;
# the entries are shared, so nobody may change one.
@lru_cache(maxsize=4096)
def dependency(line: str) -> dict[str, Any]:
    try:
        requirement = Requirement(line)
    except InvalidRequirement as exc:
        return {"raw": line, "problem": str(exc).splitlines()[0][:200]}
    marker = str(requirement.marker) if requirement.marker is not None else None
    extra = _EXTRA.search(marker) if marker else None
    return {
        "name": normalize(requirement.name),
        "req": str(requirement.specifier) or "*",
        "extras": sorted(requirement.extras),
        "marker": marker,
        "optional": extra is not None,
        "extra": normalize(extra.group(1)) if extra else None,
        "url": requirement.url,
    }


def dependencies(lines: tuple[str, ...] | None) -> list[dict[str, Any]] | None:
    """None stays None: unknown dependencies are not an empty list."""
    if lines is None:
        return None
    return [dependency(line) for line in lines]
