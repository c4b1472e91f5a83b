"""Reading OSV records: a zip (`all.zip` of an OSV ecosystem dump, read in memory entry by
entry, never extracted), a folder of JSON files, or one JSON file, with a size limit on each
entry (the archive's own limit is the download's)."""

from __future__ import annotations

import io
import json
import logging
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stagecrawl.errors import InputError
from stagecrawl.jsoncodec import loads

log = logging.getLogger("stagecrawl.osv")

MAX_ARCHIVE_BYTES = 512 * 1024 * 1024
MAX_ENTRY_BYTES = 4 * 1024 * 1024


@dataclass
class ReadReport:
    entries: int = 0
    skipped_too_large: int = 0
    skipped_invalid: int = 0


def read_advisories(
    data: bytes | Path, report: ReadReport, max_entry: int = MAX_ENTRY_BYTES
) -> Iterator[dict[str, Any]]:
    """OSV records from a zip (bytes or path), a folder of JSON files, or one JSON file."""
    if isinstance(data, Path) and data.is_dir():
        for path in sorted(data.glob("*.json")):
            yield from _one(path.read_bytes(), path.name, report, max_entry)
        return
    if isinstance(data, Path) and data.suffix.lower() == ".json":
        yield from _one(data.read_bytes(), data.name, report, max_entry)
        return
    try:
        archive = zipfile.ZipFile(io.BytesIO(data) if isinstance(data, bytes) else data)
    except (zipfile.BadZipFile, OSError) as exc:
        raise InputError(f"the OSV source is not a zip archive: {exc}") from None
    with archive:
        for info in archive.infolist():
            if info.is_dir() or not info.filename.endswith(".json"):
                continue
            if info.file_size > max_entry:
                report.skipped_too_large += 1
                log.warning(
                    "skipping %s: %d bytes is over the entry limit", info.filename, info.file_size
                )
                continue
            with archive.open(info) as handle:
                body = handle.read(max_entry + 1)  # the header's size could lie
            yield from _one(body, info.filename, report, max_entry)


def _one(body: bytes, name: str, report: ReadReport, max_entry: int) -> Iterator[dict[str, Any]]:
    if len(body) > max_entry:
        report.skipped_too_large += 1
        return
    try:
        record = loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):  # Recursion: too deep
        report.skipped_invalid += 1
        log.warning("skipping %s: not JSON", name)
        return
    if not isinstance(record, dict) or not isinstance(record.get("id"), str):
        report.skipped_invalid += 1
        log.warning("skipping %s: not an OSV record (no id)", name)
        return
    report.entries += 1
    yield record
