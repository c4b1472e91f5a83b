"""License policy with cargo-deny's semantics: allow / deny lists, exceptions allowed with WITH,
per-package extra licenses, and the verdict on a license expression. Ecosystem-neutral: the
caller passes the reader of its registry's license strings."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from stagecrawl.errors import InputError
from stagecrawl.sca.matcher import LicenseMatcher
from stagecrawl.sca.spdx import (
    SPDX_EXCEPTIONS,
    SPDX_READER,
    LicenseReader,
    LicenseReq,
    Node,
    WithException,
)

_VERSIONED = re.compile(r"^(?P<family>.+?)-(?P<version>\d+(?:\.\d+)*)(?P<suffix>-only|-or-later)?$")


@dataclass(frozen=True)
class Policy:
    """Allowed and denied licenses, exceptions allowed with WITH (none listed: any), and
    per-package extra licenses (`--exception PACKAGE=LICENSE`)."""

    allow: frozenset[str] = frozenset()
    deny: frozenset[str] = frozenset()
    allow_exceptions: frozenset[str] = frozenset()
    deny_exceptions: frozenset[str] = frozenset()
    package_exceptions: dict[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def parse(
        cls,
        allow: list[str],
        deny: list[str],
        exceptions: list[str],
        reader: LicenseReader = SPDX_READER,
        package_word: str = "PACKAGE",
    ) -> Policy:
        """Options as given on the command line (comma-separated lists allowed). An id that is
        not on the SPDX list (nor a LicenseRef-…) is an error: a typo must not deny quietly."""
        licenses, allowed_exceptions = _policy_ids(allow, "--allow", reader)
        denied, denied_exceptions = _policy_ids(deny, "--deny", reader)
        per_crate: dict[str, set[str]] = {}
        for item in (i.strip() for value in exceptions for i in value.split(",") if i.strip()):
            crate, equals, license_id = item.partition("=")
            if not equals or not crate.strip() or not license_id.strip():
                raise InputError(f"--exception takes {package_word}=LICENSE, not {item!r}")
            ids, _ = _policy_ids([license_id], "--exception", reader)
            per_crate.setdefault(crate.strip().lower(), set()).update(ids)
        return cls(
            frozenset(licenses),
            frozenset(denied),
            frozenset(allowed_exceptions),
            frozenset(denied_exceptions),
            {k: frozenset(v) for k, v in per_crate.items()},
        )


def _policy_ids(values: list[str], option: str, reader: LicenseReader) -> tuple[set[str], set[str]]:
    licenses: set[str] = set()
    exceptions: set[str] = set()
    for item in (i.strip() for value in values for i in value.split(",") if i.strip()):
        if item.lower() in SPDX_EXCEPTIONS:
            exceptions.add(SPDX_EXCEPTIONS[item.lower()])
            continue
        node = reader.normalise(item).tree
        if not isinstance(node, LicenseReq) or not node.known:
            raise InputError(f"{option}: {item!r} is not an SPDX license or exception id")
        licenses.add(node.render())
    return licenses, exceptions


def _family(license_id: str) -> tuple[str, tuple[int, ...]] | None:
    match = _VERSIONED.match(license_id)
    if match is None:
        return None
    return match["family"], tuple(int(n) for n in match["version"].split("."))


def _satisfies(allowed: str, req: LicenseReq) -> bool:
    """Whether holding `allowed` meets `req`: the same id; or, for an "or later" requirement
    (`MPL-2.0+`, `GPL-2.0-or-later`), any version of the same license at least as new."""
    if allowed == req.render() or (allowed == req.id and not req.or_later):
        return True
    later = req.or_later or req.id.endswith("-or-later")
    wanted, held = _family(req.id), _family(allowed)
    return (
        later
        and wanted is not None
        and held is not None
        and (held[0] == wanted[0] and held[1] >= wanted[1])
    )


def _accepts(req: LicenseReq, policy: Policy, extra: frozenset[str]) -> str | None:
    """None when the policy accepts one license, else why not. Order as cargo-deny: a crate's
    own exception first, then deny (deny wins over allow), then allow."""
    if any(_satisfies(a, req) for a in extra):
        return None
    if req.render() in policy.deny or req.id in policy.deny:
        return f"denied: {req.render()}"
    if any(_satisfies(a, req) for a in policy.allow):
        return None
    return f"not allowed: {req.render()}"


def _failures(node: Node, policy: Policy, extra: frozenset[str]) -> list[str]:
    """Why `node` is not satisfied (empty when it is): OR needs one side, AND every side."""
    if isinstance(node, LicenseReq):
        reason = _accepts(node, policy, extra)
        return [reason] if reason else []
    if isinstance(node, WithException):
        reasons = _failures(node.license, policy, extra)
        if node.exception in policy.deny_exceptions:
            reasons.append(f"denied: {node.exception}")
        elif policy.allow_exceptions and node.exception not in policy.allow_exceptions:
            reasons.append(f"exception not allowed: {node.exception}")
        return reasons
    parts = [_failures(item, policy, extra) for item in node.items]
    if node.operator == "OR":
        return [] if any(not p for p in parts) else [r for p in parts for r in p]
    return [r for p in parts for r in p]


def evaluate(
    expression: str | None,
    policy: Policy,
    package: str | None = None,
    reader: LicenseReader = SPDX_READER,
) -> str | None:
    """None when `policy` accepts the license expression (for `package`, whose own
    exceptions count), else the reason: `no license`, `unknown license: …`, or the licenses
    denied or not allowed."""
    if expression is None or not expression.strip():
        return "no license"
    normalised = reader.normalise(expression)
    if normalised.tree is None or normalised.unknown:
        return f"unknown license: {', '.join(normalised.unknown)}"
    extra = policy.package_exceptions.get(package.lower(), frozenset()) if package else frozenset()
    failures = _failures(normalised.tree, policy, extra)
    unique = list(dict.fromkeys(failures))
    return "; ".join(unique) if unique else None


@dataclass(frozen=True)
class Violation:
    package: str
    version: str
    license: str | None  # as the registry holds it
    expression: str | None  # normalised
    reason: str


@dataclass
class LicenseCheck:
    rows: int = 0
    violations: list[Violation] = field(default_factory=list)


def check_rows(
    rows: Iterable[tuple[str, str, str | None]],
    policy: Policy,
    matcher: LicenseMatcher,
    sort_key: Callable[[str], object] = str,
) -> LicenseCheck:
    """Every (package, version, license as the registry holds it) whose license the policy
    does not accept, sorted by package and `sort_key` of the version (the ecosystem's order)."""
    verdicts: dict[tuple[str | None, str | None], str | None] = {}
    found: list[Violation] = []
    result = LicenseCheck()
    for crate, version, license_text in rows:
        result.rows += 1
        expression = matcher.standardise(license_text).expression if license_text else None
        unknown = license_text is not None and expression is None
        own = crate.lower() if crate.lower() in policy.package_exceptions else None
        key = (license_text, own)
        if key not in verdicts:
            text = license_text if unknown else expression
            verdicts[key] = evaluate(text, policy, own, matcher.reader)
        reason = verdicts[key]
        if reason is not None:
            found.append(Violation(crate, version, license_text, expression, reason))
    found.sort(key=lambda v: (v.package.lower(), sort_key(v.version)))
    result.violations = found
    return result
