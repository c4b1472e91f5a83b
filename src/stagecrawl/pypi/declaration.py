"""PyPI as the command line, `status` and `stagecrawl audit DIR` see it before anything runs:
its names, words, settings and lock files (standard library only, with the settings table)."""

from __future__ import annotations

from dataclasses import dataclass

from stagecrawl.kernel.declaration import LockKind, RegistryDecl, Words
from stagecrawl.settings import Section, rate_setting, register_section, setting
from stagecrawl.storage.names import VERSION_MAX, Bounds, registry_names

DEFAULT_INDEX_URL = "https://pypi.org/simple/"
DEFAULT_API_URL = "https://pypi.org/"
DEFAULT_OSV_URL = "https://osv-vulnerabilities.storage.googleapis.com/PyPI/all.zip"
# PyPI names have no length limit of the registry's own; real ones reach well past 64, so the
# columns hold 200 (the names' bound is declared once, here, and checked where a name enters).
NAME_MAX = 200
# https://pypi.org/project/NAME/VERSION/ at the longest name and version
URL_MAX = len("https://pypi.org/project///") + NAME_MAX + VERSION_MAX

# TB_COMP_LIB_PYPI_LIST (keyed by PROJECT_NAME, the PEP 503 name), TB_COMP_LIB_VERSION_PYPI,
# TB_COMP_LIB_PRODUCT_PYPI, TB_STAGECRAWL_SEED_PYPI, TB_COMP_LIB_VULN_PYPI_*
NAMES = registry_names(
    "PYPI",
    group="PROJECT_NAME",
    bounds=Bounds(name=NAME_MAX, url=URL_MAX),
    schema_version=2,
)


@register_section
@dataclass(frozen=True, kw_only=True)
class PypiSettings(Section):
    """PyPI's lanes: the Simple API (authoritative), the JSON API and the files host (PEP 658
    core metadata) enrich; burst 1 each (docs/operations.md says why these rates)."""

    KEY = "pypi"
    ENV_PREFIX = "PYPI_"

    index_url: str = setting(
        DEFAULT_INDEX_URL, "PyPI Simple API root (a mirror works)", check="url"
    )
    api_url: str = setting(DEFAULT_API_URL, "PyPI JSON API root", check="url")
    index_rate: float = rate_setting(5.0, "PyPI index lane (Simple API): requests per second")
    api_rate: float = rate_setting(2.0, "PyPI api lane (JSON API): requests per second")
    files_rate: float = rate_setting(5.0, "PyPI files lane (core metadata): requests per second")


DECLARATION = RegistryDecl(
    cli="pypi",
    title="PyPI",
    names=NAMES,
    words=Words(
        unit="project",
        units="projects",
        index="the index",
        problems_fail=False,  # invalid versions are kept, reported
        name_example="requests",
    ),
    section=PypiSettings,
    tables="stagecrawl.pypi.tables",
    plugin="stagecrawl.pypi.plugin:REGISTRY",
    locks=(
        LockKind("requirements", ("requirements*.txt", "requirements*.in")),
        LockKind("poetry.lock", ("poetry.lock",)),
        LockKind("uv.lock", ("uv.lock",)),
        LockKind("pylock.toml", ("pylock.toml", "pylock.*.toml")),
    ),
    seed_env="STAGECRAWL_PYPI_SEED_PACKAGES",
    osv_url=DEFAULT_OSV_URL,
    osv_ecosystem="PyPI",
    pin_form="NAME==VERSION",
    lock_help="requirements.txt, poetry.lock, uv.lock or pylock.toml; repeatable.",
)
