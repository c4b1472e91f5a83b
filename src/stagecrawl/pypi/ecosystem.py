"""PyPI as the SCA core knows it: the OSV ecosystem `PyPI` ordered by PEP 440 (`packaging`),
purl type `pypi` (names PEP 503-normalised, as the purl spec asks) and PYSEC as its advisory
database."""

from __future__ import annotations

from packaging.version import Version

from stagecrawl.pypi.names import normalize
from stagecrawl.pypi.versions import parse, sort_key
from stagecrawl.sca.ecosystem import Ecosystem


def normalised(version: str) -> str:
    """The PEP 440 normal form (`v23.9.0` → `23.9.0`, `2.0.0RC1` → `2.0.0rc1`, `3.0-1` →
    `3.0.post1`); a version that is not PEP 440 as written."""
    parsed = parse(version)
    return version if parsed is None else str(parsed)


PYPI = Ecosystem(
    name="PyPI",
    purl_type="pypi",
    parse_version=Version,  # InvalidVersion is a ValueError: such a version matches no range
    version_kind="PEP 440 version",
    product_key=normalize,
    primary_prefix="PYSEC-",
    database_name="PyPA Advisory Database",
    sort_key=sort_key,
    package_word="project",
    registry_key="pypi",
    lockfile_name="lock file",
    normalise_version=normalised,  # equality: packaging's Version (the default key)
)
