"""License parsing and matching, collection, backfill, import, and the AI client."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aiohttp import web
from sqlalchemy import select, update

from stagecrawl.crates.licenses import LicenseMatcher, license_names, normalise, parse_policy
from stagecrawl.errors import InputError
from stagecrawl.sca.reference import ensure_reference, import_reference, stable_id
from stagecrawl.storage.db import Database
from stagecrawl.testing.origin import TestOrigin
from tests.cli import stagecrawl
from tests.crates.conftest import Registry
from tests.crates.kernel import backfill, check_database, rust
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

    table = rust(db).version
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


# --- crates.io license strings ---------------------------------------------------------------

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


async def test_licenses_check_over_the_database(
    db_url: str, registry: Registry, tmp_path: Path
) -> None:
    db = Database(db_url)
    await crawl(db, registry, ["cc", "syn", "a", "noapi"])
    got = versions(db)
    assert got[("syn", "1.0.0")]["LICENSE_EXPRESSION"] == "MIT OR Apache-2.0"  # from MIT/Apache
    table = rust(db).version
    with db.engine.begin() as conn:
        for key, text in [("a", "MIT AND GPL-3.0"), ("cc", "Foo-Bar")]:
            conn.execute(update(table).where(table.c.PRODUCT_KEY == key).values(LICENSE=text))
    result = check_database(db, parse_policy(["MIT", "Apache-2.0"], [], []))
    reasons = {(v.package, v.version): v.reason for v in result.violations}
    assert result.rows == len(got)
    assert reasons == {
        # cargo-deny reads the deprecated GPL-3.0 as itself, not as GPL-3.0-only
        **{(n, v): "not allowed: GPL-3.0" for (n, v) in got if n == "a"},
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
        "MIT,Apache-2.0,GPL-3.0",
        "--exception",
        "cc=LicenseRef-Foo",
        "--db",
        url,
    )
    assert ok.returncode == 1 and "Foo-Bar" in ok.stdout
    assert not [line for line in ok.stdout.splitlines() if line.startswith("a\t")]
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
            select(rust(db).version.c.LICENSE_AI).where(rust(db).version.c.LICENSE.is_not(None))
        ).all()
    assert licensed and all(r[0] is None for r in licensed)

    state["down"] = False
    again = stagecrawl("crates", "licenses", "backfill", *ai, "--format", "json", env=env)
    assert again.returncode == 0, again.stderr
    filled = json.loads(again.stdout)["ai"]
    assert filled["filled"] == len(licensed) and filled["failed"] == 0
    with db.engine.connect() as conn:
        values = conn.execute(
            select(rust(db).version.c.LICENSE_AI).where(rust(db).version.c.LICENSE.is_not(None))
        ).all()
    assert {r[0] for r in values} == {f"[{MIT}]"}
