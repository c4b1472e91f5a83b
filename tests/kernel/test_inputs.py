"""What the kernel checks of a version where it enters from an input (a lock file's pin, a pin on
the command line), for every registry by the syntax it declares: a version the registry could
not have published is refused alone, in the registry's words, before anything is registered."""

from __future__ import annotations

import pytest

from stagecrawl.errors import InputError
from stagecrawl.kernel.registry import Registry
from stagecrawl.registries import load_all

CASES = {
    # registry code: (versions it publishes, versions it cannot have, its words for them)
    "RUST": (["1.0.0", "0.1.0-alpha.1+build.5"], ["1.0", "v1.0.0", "not.a.ver"], "version"),
    "PYPI": (["1.0", "3.13.0", "1.0.post1", "2.0rc1"], ["not.a.ver", "1.0-beta-x"], "PEP 440"),
    "GOLANG": (
        ["v1.2.3", "v0.0.0-20240101000000-abcdefabcdef", "v2.0.0+incompatible"],
        ["1.2.3", "v1.2", "latest"],
        "canonical Go module version",
    ),
}


def _registries() -> dict[str, Registry]:
    return {registry.code: registry for registry in load_all()}


@pytest.mark.parametrize("code", sorted(CASES))
def test_a_version_is_checked_by_the_syntax_its_registry_declares(code: str) -> None:
    registry = _registries()[code]
    good, bad, words = CASES[code]
    for version in good:
        assert registry.check_version("pkg", version) == version
    for version in bad:
        with pytest.raises(InputError, match=words):
            registry.check_version("pkg", version)
    with pytest.raises(InputError, match="version ''"):
        registry.check_version("pkg", "")
    with pytest.raises(InputError, match="longer than"):
        registry.check_version("pkg", "1" * (registry.decl.names.bounds.version + 1))
