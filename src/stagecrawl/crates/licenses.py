"""crates.io's licenses: the loose license names crates.io still holds, as the SCA core's SPDX
reader reads them for the matcher and for a license policy. The expression grammar, the
reference, the matcher, the policy, backfill and the check are ecosystem-neutral
(stagecrawl.sca, stagecrawl.kernel.sca)."""

from __future__ import annotations

from typing import Any

from stagecrawl.sca import matcher as _matcher
from stagecrawl.sca.policy import Policy
from stagecrawl.sca.policy import evaluate as _evaluate
from stagecrawl.sca.spdx import LicenseReader, Normalised

# Loose names crates.io still holds, compared in lower case with spaces collapsed. Only names
# that say one license: `Apache`, `BSD`, `MPL` follow the `spdx` crate's lax reading (the one
# cargo-deny applies to crate metadata: Apache-2.0, BSD-2-Clause, MPL-2.0); a bare `GPL` or
# `LGPL` (which version?) or `public domain` stays unmatched and `backfill` reports it.
LOOSE_NAMES: dict[str, str] = {
    **dict.fromkeys(
        ["mit license", "the mit license", "mit licence", "mit-license", "licence mit"], "MIT"
    ),
    **dict.fromkeys(
        [
            "apache",
            "apache 2",
            "apache 2.0",
            "apache-2",
            "apache2",
            "apache2.0",
            "apache v2",
            "apache v2.0",
            "apache-v2",
            "apache license",
            "apache license 2.0",
            "apache license 2",
            "apache license v2",
            "apache license v2.0",
            "apache license version 2",
            "apache license version 2.0",
            "apache license, version 2.0",
            "apache license (2.0)",
            "apache 2.0 license",
            "apache-2.0 license",
            "apache software license 2.0",
            "apache software license, version 2.0",
            "asl 2.0",
            "asl-2.0",
            "asl2.0",
            "asl2",
        ],
        "Apache-2.0",
    ),
    **dict.fromkeys(
        [
            "bsd-3",
            "bsd3",
            "bsd 3",
            "bsd 3-clause",
            "bsd 3 clause",
            "bsd-3 clause",
            "bsd-3clause",
            "bsd 3-clause license",
            "bsd-3-clause license",
            "3-clause bsd",
            "3-clause bsd license",
            "new bsd",
            "new bsd license",
            "modified bsd license",
            "revised bsd license",
        ],
        "BSD-3-Clause",
    ),
    **dict.fromkeys(
        [
            "bsd",
            "bsd-2",
            "bsd2",
            "bsd 2",
            "bsd 2-clause",
            "bsd 2 clause",
            "bsd-2 clause",
            "bsd-2clause",
            "bsd 2-clause license",
            "bsd-2-clause license",
            "2-clause bsd",
            "2-clause bsd license",
            "simplified bsd",
            "simplified bsd license",
        ],
        "BSD-2-Clause",
    ),
    **dict.fromkeys(["mpl", "mpl2", "mpl 2", "mpl 2.0", "mpl-2", "mpl v2", "mpl v2.0"], "MPL-2.0"),
    **dict.fromkeys(["gpl2", "gplv2", "gpl v2", "gpl-2", "gnu gpl v2", "gpl 2"], "GPL-2.0-only"),
    **dict.fromkeys(["gpl3", "gplv3", "gpl v3", "gpl-3", "gnu gpl v3", "gpl 3"], "GPL-3.0-only"),
    **dict.fromkeys(["lgpl3", "lgplv3", "lgpl v3", "lgpl-3"], "LGPL-3.0-only"),
    **dict.fromkeys(["agpl3", "agplv3", "agpl v3", "agpl-3"], "AGPL-3.0-only"),
    **dict.fromkeys(["cc0", "cc0 1.0", "cc0-1", "cc0 license"], "CC0-1.0"),
    **dict.fromkeys(["isc license", "the isc license"], "ISC"),
    **dict.fromkeys(["the unlicense", "unlicense license"], "Unlicense"),
    **dict.fromkeys(["boost software license", "boost software license 1.0", "boost"], "BSL-1.0"),
    **dict.fromkeys(["zlib license", "the zlib license"], "Zlib"),
}

CRATES_READER = LicenseReader(LOOSE_NAMES)
"""crates.io license strings as SPDX expressions (`MIT/Apache-2.0`, `Apache License 2.0`…)."""
CRATES_POLICY_READER = LicenseReader(LOOSE_NAMES, keep_deprecated=True)
"""The same strings as a license policy reads them: deprecated ids kept (cargo-deny's lax
reading of crate metadata: `GPL-3.0` is not `GPL-3.0-only`)."""


def normalise(text: str) -> Normalised:
    return CRATES_READER.normalise(text)


def license_names(expression: str) -> list[str]:
    return CRATES_READER.license_names(expression)


class LicenseMatcher(_matcher.LicenseMatcher):
    """The reference matcher reading crates.io's license strings."""

    def __init__(self, rows: list[dict[str, Any]], reader: LicenseReader = CRATES_READER) -> None:
        super().__init__(rows, reader)


def evaluate(
    expression: str | None, policy: Policy, crate: str | None = None, version: str | None = None
) -> str | None:
    """A crate's license string against a policy, read as cargo-deny reads crate metadata."""
    return _evaluate(expression, policy, crate, version, CRATES_POLICY_READER)


def parse_policy(allow: list[str], deny: list[str], exceptions: list[str]) -> Policy:
    """A policy from command-line options as `crates licenses check` reads them
    (`--exception CRATE=LICENSE` or `CRATE@VERSION=LICENSE`, cargo's version requirements)."""
    from stagecrawl.crates.semver import version_matcher

    return Policy.parse(allow, deny, exceptions, "CRATE", version_matcher)
