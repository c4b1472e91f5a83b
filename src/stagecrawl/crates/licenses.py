"""crates.io's licenses: the loose license names crates.io still holds, read by the SCA core's
SPDX reader, and the crates.io VERSION table's license columns (backfill, AI backfill, policy
check over the database). The expression grammar, the reference, the matcher and the policy
are ecosystem-neutral (stagecrawl.sca)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sqlalchemy import select

from stagecrawl.crates.semver import sort_key, version_matcher
from stagecrawl.crates.tables import LANGUAGE, REPOSITORY, versions
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.errors import ConfigError
from stagecrawl.sca import matcher as _matcher
from stagecrawl.sca.ai import AiBackfillReport, AiLicenseClient
from stagecrawl.sca.ai import backfill_ai as _backfill_ai
from stagecrawl.sca.audit import Package
from stagecrawl.sca.config import GateConfig
from stagecrawl.sca.matcher import BackfillReport
from stagecrawl.sca.policy import (
    Clarification,
    LicenseCheck,
    PackageLicenses,
    Policy,
    Violation,
    check_rows,
    parse_licensee,
)
from stagecrawl.sca.policy import evaluate as _evaluate
from stagecrawl.sca.reference import stable_id
from stagecrawl.sca.spdx import LicenseReader, Normalised
from stagecrawl.settings import DEFAULTS
from stagecrawl.storage.db import Database

# Re-exported for the crates pipeline modules that build rows with them (worker, dbdump).
__all__ = ["AiLicenseClient", "LicenseMatcher", "stable_id"]

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


def backfill(db: Database, recompute_all: bool = False) -> BackfillReport:
    """Fill STANDARD_LICENSE, LICENSE_IDS and LICENSE_EXPRESSION of the crates VERSION table
    from the stored LICENSE; no network."""
    return _matcher.backfill(db, versions(db).table, LicenseMatcher.load(db), recompute_all)


async def backfill_ai(
    db: Database,
    client: AiLicenseClient,
    stop: GracefulStop | None = None,
    concurrency: int = DEFAULTS.concurrency,
) -> AiBackfillReport:
    """Ask the classifier again for every crates VERSION row whose LICENSE_AI is NULL."""
    identity = {"LANGUAGE": LANGUAGE, "REPOSITORY": REPOSITORY}
    return await _backfill_ai(db, versions(db).table, identity, client, stop, concurrency)


def parse_policy(allow: list[str], deny: list[str], exceptions: list[str]) -> Policy:
    """A policy from command-line options (`--exception CRATE=LICENSE` or
    `CRATE@VERSION=LICENSE`)."""
    return Policy.parse(allow, deny, exceptions, "CRATE", version_matcher)


def policy_from_config(
    config: GateConfig, allow: list[str], deny: list[str], exceptions: list[str]
) -> Policy:
    """The license policy of a run: the flags over the config file (`--allow` / `--deny`
    replace the file's lists; `--exception` adds to its exceptions); the file's version
    requirements are cargo's."""
    flags = parse_policy(allow, deny, exceptions)
    try:
        from_file = Policy(
            tuple(parse_licensee(text) for text in config.allow),
            tuple(parse_licensee(text) for text in config.deny),
            tuple(
                PackageLicenses(
                    rule.name,
                    tuple(parse_licensee(text) for text in rule.licenses),
                    None if rule.version is None else version_matcher(rule.version),
                    rule.source,
                )
                for rule in config.exceptions
            ),
            tuple(
                Clarification(
                    rule.name,
                    rule.expression or "",
                    None if rule.version is None else version_matcher(rule.version),
                    rule.source,
                )
                for rule in config.clarify
            ),
        )
    except ValueError as exc:
        files = ", ".join(config.files) or "the config"
        raise ConfigError(f"{files}: licenses: {exc}") from None
    for rule in config.clarify:
        if CRATES_POLICY_READER.normalise(rule.expression or "").expression is None:
            raise ConfigError(
                f"{rule.source}: licenses.clarify: {rule.name}: not an SPDX expression"
            )
    return Policy(
        allow=flags.allow or from_file.allow,
        deny=flags.deny or from_file.deny,
        exceptions=flags.exceptions + from_file.exceptions,
        clarify=from_file.clarify,
    )


def evaluate(
    expression: str | None, policy: Policy, crate: str | None = None, version: str | None = None
) -> str | None:
    return _evaluate(expression, policy, crate, version, CRATES_POLICY_READER)


def check_database(db: Database, policy: Policy) -> LicenseCheck:
    """Every collected (crate, version) whose license the policy does not accept."""
    matcher = LicenseMatcher.load(db)
    with db.reading() as conn:
        rows = ((name, version, text) for _, name, version, _, text in versions(db).licenses(conn))
        return check_rows(rows, policy, matcher, sort_key, CRATES_POLICY_READER)


def check_packages(db: Database, packages: list[Package], policy: Policy) -> LicenseCheck:
    """The license of each (crate, version) of a project, as collected; a version not
    collected is reported (its license is unknown), never passed."""
    table = db.version
    licenses: dict[tuple[str, str], str | None] = {}
    names = sorted({p.name.lower() for p in packages})
    with db.engine.connect() as conn:
        for start in range(0, len(names), 500):
            query = select(table.c.PRODUCT_KEY, table.c.VERSION, table.c.LICENSE).where(
                table.c.PRODUCT_KEY.in_(names[start : start + 500])
            )
            for row in conn.execute(query):
                licenses[(str(row.PRODUCT_KEY).lower(), str(row.VERSION))] = row.LICENSE
    matcher = LicenseMatcher.load(db)
    collected = [p for p in packages if (p.name.lower(), p.version) in licenses]
    result = check_rows(
        ((p.name, p.version, licenses[(p.name.lower(), p.version)]) for p in collected),
        policy,
        matcher,
        sort_key,
        CRATES_POLICY_READER,
    )
    sources = {(p.name.lower(), p.version): tuple(p.sources) for p in packages}
    missing = [
        Violation(p.name, p.version, None, None, "not collected: license unknown")
        for p in packages
        if (p.name.lower(), p.version) not in licenses
    ]
    result.rows += len(missing)
    result.violations = sorted(
        (
            replace(v, found_in=sources.get((v.package.lower(), v.version), ()))
            for v in [*result.violations, *missing]
        ),
        key=lambda v: (v.package.lower(), sort_key(v.version)),
    )
    return result
