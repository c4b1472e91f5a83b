"""License policy with cargo-deny's semantics (cargo-deny ≥ 0.18 over the `spdx` crate 0.13).

- A policy names **licensees**: an SPDX license id (deprecated ids allowed, as cargo-deny's
  config allows them) or a `LicenseRef-…`, optionally `WITH` an exception. A `+` is for the
  license holder, never the policy; a bare exception is not a license. Both are refused.
- A license expression's requirement is met by a licensee when the ids are the same, or when
  the requirement is "or later" (`MPL-1.1+`) and the licensee is a later version of the same
  license (component by component, the version compared as text, as the `spdx` crate does);
  and in every case the exceptions are the same: `Apache-2.0 WITH LLVM-exception` is a license
  of its own, met only by that licensee.
- GNU licenses (GPL, LGPL, AGPL, GFDL) never take "or later" from a `+`: `GPL-2.0+` reads as
  the id `GPL-2.0-or-later`, met only by that id; the deprecated bare ids (`GPL-3.0`) stay
  what they are and are met only by themselves.
- `A OR B` needs either side, `A AND B` both. Per requirement: the package's own exception
  (the first exception entry that names it) first, then deny (our extension: cargo-deny
  ≥ 0.18 has no deny list; a denied licensee that meets a requirement fails it), then allow.
- A license that cannot be read (an unknown id) and a package with no license fail.
- `clarify` replaces a package's license expression (cargo-deny also checks license-file
  hashes; we have no sources, so the name and version decide).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from stagecrawl.errors import InputError
from stagecrawl.sca.matcher import LicenseMatcher
from stagecrawl.sca.spdx import (
    SPDX_EXCEPTIONS,
    SPDX_LICENSES,
    LicenseReader,
    LicenseReq,
    Node,
    WithException,
)

VersionMatcher = Callable[[str], bool]


@dataclass(frozen=True)
class Licensee:
    """A license the policy names: an SPDX id or LicenseRef, and an exception or None."""

    id: str
    exception: str | None = None

    def render(self) -> str:
        return self.id + (f" WITH {self.exception}" if self.exception else "")


def parse_licensee(text: str) -> Licensee:
    """A licensee as cargo-deny's config reads it; ValueError says what is wrong."""
    words = text.split()
    if not words:
        raise ValueError("an empty license")
    if len(words) == 3 and words[1].upper() == "WITH":
        license_part, exception_text = words[0], words[2]
        exception = SPDX_EXCEPTIONS.get(exception_text.lower())
        if exception is None and not exception_text.startswith("AdditionRef-"):
            raise ValueError(f"{exception_text!r} is not an SPDX exception id")
        exception = exception or exception_text
    elif len(words) == 1:
        license_part, exception = words[0], None
    else:
        raise ValueError(f"{text!r} is not one license (optionally WITH one exception)")
    if license_part.endswith("+"):
        raise ValueError(
            f"{text!r}: a '+' is for the license holder; name the licenses you accept"
            " (for GNU licenses the -or-later id)"
        )
    if license_part.lower() in SPDX_EXCEPTIONS:
        raise ValueError(
            f"{text!r} is an exception, not a license: allow 'LICENSE WITH {license_part}'"
        )
    if license_part.startswith(("LicenseRef-", "DocumentRef-")):
        return Licensee(license_part, exception)
    canonical = SPDX_LICENSES.get(license_part.lower())
    if canonical is None:
        raise ValueError(f"{license_part!r} is not an SPDX license id")
    return Licensee(canonical, exception)


def _components_later(held: str, wanted: str) -> bool:
    """The `spdx` crate's "or later": every `-` component equal, or both versions with the
    held one greater (compared as text)."""
    a, b = held.split("-"), wanted.split("-")
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x == y:
            continue
        versions = all(c == "." or c.isdigit() for c in x) and all(
            c == "." or c.isdigit() for c in y
        )
        if versions and x > y:
            continue
        return False
    return True


def satisfies(licensee: Licensee, req: LicenseReq, exception: str | None) -> bool:
    """Whether holding `licensee` meets the requirement `req` (with `exception`)."""
    if licensee.id != req.id and not (req.or_later and _components_later(licensee.id, req.id)):
        return False
    return licensee.exception == exception


@dataclass(frozen=True)
class PackageLicenses:
    """Licenses allowed for one package (every version, or those `version` matches)."""

    name: str
    licensees: tuple[Licensee, ...]
    matches_version: VersionMatcher | None = None
    source: str = ""

    def applies(self, name: str, version: str | None) -> bool:
        if name.lower() != self.name.lower():
            return False
        if self.matches_version is None:
            return True
        return version is not None and self.matches_version(version)


@dataclass(frozen=True)
class Clarification:
    """The license expression to use for one package instead of the registry's."""

    name: str
    expression: str
    matches_version: VersionMatcher | None = None
    source: str = ""

    def applies(self, name: str, version: str | None) -> bool:
        if name.lower() != self.name.lower():
            return False
        return self.matches_version is None or (
            version is not None and self.matches_version(version)
        )


@dataclass(frozen=True)
class Policy:
    allow: tuple[Licensee, ...] = ()
    deny: tuple[Licensee, ...] = ()
    exceptions: tuple[PackageLicenses, ...] = ()
    clarify: tuple[Clarification, ...] = ()

    @classmethod
    def parse(
        cls,
        allow: Iterable[str],
        deny: Iterable[str] = (),
        exceptions: Iterable[str] = (),
        package_word: str = "PACKAGE",
        version_matcher: Callable[[str], VersionMatcher] | None = None,
    ) -> Policy:
        """Options as given on the command line (comma-separated lists allowed; an
        exception is `NAME=LICENSE` or `NAME@VERSION=LICENSE`). A typo is an error, never a
        quiet deny."""
        per_package: dict[tuple[str, str | None], list[Licensee]] = {}
        for item in _items(exceptions):
            spec, equals, license_text = item.partition("=")
            if not equals or not spec.strip() or not license_text.strip():
                raise InputError(
                    f"--exception takes {package_word}=LICENSE or {package_word}@VERSION=LICENSE,"
                    f" not {item!r}"
                )
            name, _, version = spec.strip().partition("@")
            key = (name.strip(), version.strip() or None)
            per_package.setdefault(key, []).append(_licensee(license_text, "--exception"))
        rules = []
        for (package, at), licensees in per_package.items():
            matcher: VersionMatcher | None = None
            if at is not None:
                matcher = (
                    _exactly(at)
                    if version_matcher is None
                    else _version_matcher(version_matcher, "=" + at, "--exception")
                )
            rules.append(PackageLicenses(package, tuple(licensees), matcher, "--exception"))
        return cls(
            tuple(_licensee(i, "--allow") for i in _items(allow)),
            tuple(_licensee(i, "--deny") for i in _items(deny)),
            tuple(rules),
        )


def _exactly(version: str) -> VersionMatcher:
    return lambda candidate: candidate == version


def _items(values: Iterable[str]) -> list[str]:
    return [i.strip() for value in values for i in value.split(",") if i.strip()]


def _licensee(text: str, option: str) -> Licensee:
    try:
        return parse_licensee(text.strip())
    except ValueError as exc:
        raise InputError(f"{option}: {exc}") from None


def _version_matcher(
    factory: Callable[[str], VersionMatcher], requirement: str, where: str
) -> VersionMatcher:
    try:
        return factory(requirement)
    except ValueError as exc:
        raise InputError(f"{where}: {exc}") from None


# The reading of a registry's license string for a policy: as the `spdx` crate's lax mode
# reads crate metadata — deprecated ids kept as themselves, GNU `+` as the -or-later id.
POLICY_READER = LicenseReader(keep_deprecated=True)


def _failures(node: Node, policy: Policy, own: PackageLicenses | None) -> list[str]:
    if isinstance(node, LicenseReq | WithException):
        req = node.license if isinstance(node, WithException) else node
        exception = node.exception if isinstance(node, WithException) else None
        shown = node.render()
        if own is not None and any(satisfies(lic, req, exception) for lic in own.licensees):
            return []
        if any(satisfies(lic, req, exception) for lic in policy.deny):
            return [f"denied: {shown}"]
        if any(satisfies(lic, req, exception) for lic in policy.allow):
            return []
        return [f"not allowed: {shown}"]
    parts = [_failures(item, policy, own) for item in node.items]
    if node.operator == "OR":
        return [] if any(not p for p in parts) else [r for p in parts for r in p]
    return [r for p in parts for r in p]


def evaluate(
    expression: str | None,
    policy: Policy,
    package: str | None = None,
    version: str | None = None,
    reader: LicenseReader = POLICY_READER,
) -> str | None:
    """None when `policy` accepts the license expression of `package` `version`, else why
    not: `no license`, `unknown license: …`, or the licenses denied or not allowed."""
    if package is not None:
        clarified = next((c for c in policy.clarify if c.applies(package, version)), None)
        if clarified is not None:
            expression = clarified.expression
    if expression is None or not expression.strip():
        return "no license"
    normalised = reader.normalise(expression)
    if normalised.tree is None or normalised.unknown:
        return f"unknown license: {', '.join(normalised.unknown)}"
    own = None
    if package is not None:
        own = next((e for e in policy.exceptions if e.applies(package, version)), None)
    failures = _failures(normalised.tree, policy, own)
    unique = list(dict.fromkeys(failures))
    return "; ".join(unique) if unique else None


@dataclass(frozen=True)
class Violation:
    package: str
    version: str
    license: str | None  # as the registry holds it
    expression: str | None  # normalised
    reason: str
    found_in: tuple[str, ...] = ()


@dataclass
class LicenseCheck:
    rows: int = 0
    violations: list[Violation] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # inputs that could not be read
    notes: list[str] = field(default_factory=list)  # config keys read but not applied

    @property
    def exit_code(self) -> int:
        return 1 if self.violations or self.problems else 0


def check_rows(
    rows: Iterable[tuple[str, str, str | None]],
    policy: Policy,
    matcher: LicenseMatcher,
    sort_key: Callable[[str], object] = str,
    reader: LicenseReader | None = None,
) -> LicenseCheck:
    """Every (package, version, license as the registry holds it) whose license the policy
    does not accept, sorted by package and `sort_key` of the version (the ecosystem's order).
    The verdict reads the registry's string (`reader`; by default the matcher's loose names
    with deprecated ids kept); the reported expression is the matcher's normalised one."""
    if reader is None:
        reader = LicenseReader(matcher.reader.loose_names, keep_deprecated=True)
    verdicts: dict[tuple[str | None, str, str], str | None] = {}
    found: list[Violation] = []
    result = LicenseCheck()
    special = {e.name.lower() for e in policy.exceptions} | {c.name.lower() for c in policy.clarify}
    for name, version, license_text in rows:
        result.rows += 1
        expression = matcher.standardise(license_text).expression if license_text else None
        own = name.lower() in special
        key = (license_text, name.lower() if own else "", version if own else "")
        if key not in verdicts:
            verdicts[key] = evaluate(license_text, policy, name, version, reader)
        reason = verdicts[key]
        if reason is not None:
            found.append(Violation(name, version, license_text, expression, reason))
    found.sort(key=lambda v: (v.package.lower(), sort_key(v.version)))
    result.violations = found
    return result
