"""The license matcher: each license of a normalised expression matched against TB_LICENSE_V2
for the Go-compatible STANDARD_LICENSE / LICENSE_IDS (exact NAME_SHORT, then NAME, both
case-insensitive, then the MAPPING regexes), and the backfill that fills those columns (and
LICENSE_EXPRESSION) in a registry's VERSION table. Exceptions (`WITH LLVM-exception`) are not
licenses and do not stop the match; the raw string stays in LICENSE."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

from sqlalchemy import select

from stagecrawl.sca.reference import ensure_reference, spdx_reference_rows
from stagecrawl.sca.spdx import (
    SPDX_LICENSES,
    SPDX_READER,
    LicenseReader,
    LicenseReq,
    Node,
    Operation,
    WithException,
    leaves,
)
from stagecrawl.storage.db import Database, dumps

if TYPE_CHECKING:
    from stagecrawl.storage.owners import VersionTable


@dataclass
class Standardised:
    standard_license: str | None
    license_ids: str | None
    unmatched: list[str] = field(default_factory=list)
    expression: str | None = None  # the normalised SPDX expression (LICENSE_EXPRESSION)


class LicenseMatcher:
    """Matches the licenses of strings read by `reader` (a registry's loose names) against
    the reference rows."""

    def __init__(self, rows: list[dict[str, Any]], reader: LicenseReader = SPDX_READER) -> None:
        self.reader = reader
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
    def load(cls, db: Database, reader: LicenseReader | None = None) -> Self:
        """The matcher over TB_LICENSE_V2 (seeded from the SPDX list when empty; a read-only
        run that finds it empty uses the SPDX list without writing)."""
        if not db.read_only:
            ensure_reference(db)
        rows = db.read(lambda conn: [dict(r._mapping) for r in conn.execute(select(db.license))])
        if not rows:
            rows = spdx_reference_rows()
        return cls(rows) if reader is None else cls(rows, reader)

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
        normalised = self.reader.normalise(expression)
        licenses: list[dict[str, str | None]] = []
        ids: list[int] = []
        unmatched: list[str] = []
        renames: dict[str, str] = {}
        for leaf in leaves(normalised.tree) if normalised.tree is not None else []:
            req = leaf.license if isinstance(leaf, WithException) else leaf
            row = self.match(req.id)
            if row is None:
                if req.id not in unmatched:
                    unmatched.append(req.id)
            else:
                if not req.known:
                    # A name the SPDX list does not have, that the reference maps (a custom
                    # MAPPING): the expression uses the reference's id when it is one.
                    short = str(row["NAME_SHORT"])
                    if short.lower() in SPDX_LICENSES or short.startswith("LicenseRef-"):
                        renames[req.id] = short
                if row["ID"] not in ids:
                    ids.append(int(row["ID"]))
                    licenses.append({"name": row["NAME_SHORT"], "url": row.get("URL")})
            if isinstance(leaf, WithException) and not leaf.known:
                unmatched.append(leaf.exception)
        if normalised.tree is None:
            unmatched = list(normalised.unknown)
        text: str | None = None
        if normalised.tree is not None and all(u in renames for u in normalised.unknown):
            text = _rename(normalised.tree, renames).render()
        result = Standardised(
            dumps(licenses) if licenses else None,
            json.dumps(ids, separators=(",", ":")) if ids else None,
            unmatched,
            text,
        )
        self._cache[expression] = result
        return result


def _rename(node: Node, renames: dict[str, str]) -> Node:
    if not renames:
        return node
    if isinstance(node, LicenseReq):
        return LicenseReq(renames[node.id]) if node.id in renames else node
    if isinstance(node, WithException):
        license_req = _rename(node.license, renames)
        assert isinstance(license_req, LicenseReq)
        return WithException(license_req, node.exception, node.known)
    return Operation(node.operator, tuple(_rename(item, renames) for item in node.items))


@dataclass
class BackfillReport:
    rows: int = 0
    matched: int = 0
    unmatched: int = 0
    no_license: int = 0
    common_unmatched: list[tuple[str, int]] = field(default_factory=list)


def backfill(
    versions: VersionTable, matcher: LicenseMatcher, recompute_all: bool = False
) -> BackfillReport:
    """Fill STANDARD_LICENSE, LICENSE_IDS and LICENSE_EXPRESSION of a registry's VERSION rows
    (through their owner) from the stored LICENSE; no network."""
    report = BackfillReport()
    misses: Counter[str] = Counter()
    updates = []
    for key, version, license_text in versions.license_rows(recompute_all):
        report.rows += 1
        result = matcher.standardise(license_text)
        if license_text is None:
            report.no_license += 1
        elif result.unmatched or result.expression is None:
            report.unmatched += 1
            misses[license_text] += 1
        else:
            report.matched += 1
        updates.append(
            {
                "key": key,
                "version": version,
                "STANDARD_LICENSE": result.standard_license,
                "LICENSE_IDS": result.license_ids,
                "LICENSE_EXPRESSION": result.expression,
            }
        )
    versions.set_licenses(updates)
    report.common_unmatched = misses.most_common(10)
    return report


# --- License policy (cargo-deny's semantics) --------------------------------------------------
