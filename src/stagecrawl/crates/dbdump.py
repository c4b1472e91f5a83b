"""Loading crates.io's daily database dump (`db-dump.tar.gz`) into PRODUCT and VERSION.

The archive is read as a stream, entry by entry, never extracted; CSV rows are streamed and
written in batched upserts, so memory stays bounded whatever the registry's size. The tar's
entry order is not guaranteed, so the archive is read in passes (a URL is first downloaded to
a temporary file): crate-level tables, then dependencies (spilled to a temporary SQLite file
keyed by version id), then versions. crates.io asks bulk users to take this path, not the API.
"""

from __future__ import annotations

import codecs
import csv
import json
import logging
import sqlite3
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stagecrawl.crates.api import parse_time
from stagecrawl.crates.licenses import LicenseMatcher
from stagecrawl.crates.queue import utcnow
from stagecrawl.crates.semver import sort_key
from stagecrawl.crates.worker import CRATES_IO_PAGE, LANGUAGE, REPOSITORY
from stagecrawl.errors import InputError
from stagecrawl.storage.db import Database, dumps, upsert

log = logging.getLogger("stagecrawl.dbdump")
DEFAULT_DUMP_URL = "https://static.crates.io/db-dump.tar.gz"
DEP_KINDS = {"0": "normal", "1": "build", "2": "dev"}
BATCH = 5000
csv.field_size_limit(sys.maxsize)


def _bool(value: str | None) -> bool:
    return (value or "").lower() in ("t", "true", "1")


def _text(value: str | None) -> str | None:
    return value if value else None


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


def _checksum(row: dict[str, str]) -> str | None:
    """Hex `checksum` (older dumps) or binary `tar_sha256` exported as `\\x…` (2026 on)."""
    if row.get("checksum"):
        return row["checksum"]
    raw = row.get("tar_sha256") or ""
    return raw[2:] if raw.startswith("\\x") else (raw or None)


def _time(value: str | None) -> Any:
    if not value:
        return None
    return parse_time(value.replace(" ", "T", 1) if "T" not in value else value)


def iter_csv(path: Path, wanted: set[str]) -> Iterator[tuple[str, Iterator[dict[str, str]]]]:
    """(table name, row iterator) for each wanted `data/<table>.csv`, in archive order."""
    with tarfile.open(path, mode="r|gz") as archive:
        for member in archive:
            name = member.name.rsplit("/", 1)[-1]
            if (
                not member.isfile()
                or "/data/" not in f"/{member.name}"
                or not name.endswith(".csv")
            ):
                continue
            table = name[: -len(".csv")]
            if table not in wanted:
                continue
            handle = archive.extractfile(member)  # a stream over the member, not a file on disk
            if handle is None:
                continue
            # Lines decoded one by one: TextIOWrapper would ask the tar stream to seek.
            yield table, csv.DictReader(codecs.iterdecode(handle, "utf-8"))


@dataclass
class CrateInfo:
    name: str
    description: str | None
    homepage: str | None
    documentation: str | None
    repository: str | None
    downloads: int | None = None
    keywords: list[str] = field(default_factory=list)
    categories: list[str] = field(default_factory=list)
    versions: int = 0
    best: dict[int, str] = field(default_factory=dict)  # rank -> best version in that rank

    @property
    def scm(self) -> str | None:
        return dumps(
            {
                "repository": self.repository,
                "homepage": self.homepage,
                "documentation": self.documentation,
            }
        )


@dataclass
class DumpReport:
    crates: int = 0
    versions: int = 0
    dependencies: int = 0
    seconds: float = 0.0


def load_dump(
    db: Database, path: Path, progress: Callable[[str, int], None] | None = None
) -> DumpReport:
    try:
        return _load(db, path, progress)
    except (tarfile.TarError, EOFError, OSError, UnicodeDecodeError, KeyError) as exc:
        raise InputError(f"{path} is not a readable crates.io dump: {exc}") from None


def _load(db: Database, path: Path, progress: Callable[[str, int], None] | None) -> DumpReport:
    started = time.monotonic()
    report = DumpReport()
    crates = _crate_tables(path)
    if not crates:
        raise InputError(f"{path}: no data/crates.csv in the archive (not a crates.io dump?)")
    with tempfile.TemporaryDirectory(prefix="stagecrawl-dump-") as tmp:
        deps = sqlite3.connect(Path(tmp) / "deps.sqlite")
        deps.execute("CREATE TABLE dep (version_id INTEGER, sort_key TEXT, body TEXT)")
        report.dependencies = _spill_dependencies(path, crates, deps)
        deps.execute("CREATE INDEX ix_dep ON dep (version_id)")
        report.versions = _load_versions(db, path, crates, deps, progress)
        deps.close()
    report.crates = _load_products(db, crates)
    report.seconds = time.monotonic() - started
    return report


def _crate_tables(path: Path) -> dict[str, CrateInfo]:
    crates: dict[str, CrateInfo] = {}
    keywords: dict[str, str] = {}
    categories: dict[str, str] = {}
    crate_keywords: list[tuple[str, str]] = []
    crate_categories: list[tuple[str, str]] = []
    downloads: dict[str, int] = {}
    wanted = {
        "crates",
        "keywords",
        "categories",
        "crates_keywords",
        "crates_categories",
        "crate_downloads",
    }
    for table, rows in iter_csv(path, wanted):
        for row in rows:
            if table == "crates":
                crates[row["id"]] = CrateInfo(
                    row["name"],
                    _text(row.get("description")),
                    _text(row.get("homepage")),
                    _text(row.get("documentation")),
                    _text(row.get("repository")),
                    _int(row.get("downloads")),
                )
            elif table == "keywords":
                keywords[row["id"]] = row["keyword"]
            elif table == "categories":
                categories[row["id"]] = row.get("slug") or row.get("category") or row["id"]
            elif table == "crates_keywords":
                crate_keywords.append((row["crate_id"], row["keyword_id"]))
            elif table == "crates_categories":
                crate_categories.append((row["crate_id"], row["category_id"]))
            elif table == "crate_downloads":
                downloads[row["crate_id"]] = int(row["downloads"] or 0)
    for crate_id, keyword_id in crate_keywords:
        if crate_id in crates and keyword_id in keywords:
            crates[crate_id].keywords.append(keywords[keyword_id])
    for crate_id, category_id in crate_categories:
        if crate_id in crates and category_id in categories:
            crates[crate_id].categories.append(categories[category_id])
    for crate_id, count in downloads.items():
        if crate_id in crates:
            crates[crate_id].downloads = count
    return crates


def _spill_dependencies(path: Path, crates: dict[str, CrateInfo], deps: sqlite3.Connection) -> int:
    count = 0
    batch: list[tuple[int, str, str]] = []
    for _table, rows in iter_csv(path, {"dependencies"}):
        for row in rows:
            target = crates.get(row["crate_id"])
            if target is None:
                continue
            rename = _text(row.get("explicit_name"))
            features = row.get("features") or "{}"
            body = {
                "name": target.name,
                "rename": rename,
                "req": row.get("req"),
                "kind": DEP_KINDS.get(row.get("kind") or "0", "normal"),
                "optional": _bool(row.get("optional")),
                "default_features": _bool(row.get("default_features") or "t"),
                "features": _pg_array(features),
                "target": _text(row.get("target")),
            }
            # Stored already in the canonical compact form of JSON columns, so versions are
            # assembled by joining strings, not by decoding and encoding every dependency.
            sort_key = "\0".join((target.name, str(body["kind"]), str(body["req"])))
            batch.append((int(row["version_id"]), sort_key, dumps(body) or "{}"))
            count += 1
            if len(batch) >= BATCH:
                deps.executemany("INSERT INTO dep VALUES (?, ?, ?)", batch)
                batch.clear()
    deps.executemany("INSERT INTO dep VALUES (?, ?, ?)", batch)
    deps.commit()
    return count


def _pg_array(value: str) -> list[str]:
    """PostgreSQL array text `{a,b}` (how the dump writes text[] columns) as a list."""
    value = value.strip()
    if value.startswith("[") and value.endswith("]"):
        return [str(v) for v in json.loads(value)]
    if not value.startswith("{") or value in ("{}", ""):
        return []
    return [item.strip('"') for item in next(csv.reader([value[1:-1]]))]


def _rank(version: str, yanked: bool) -> int:
    if yanked:
        return 2
    return 1 if "-" in version.split("+", 1)[0] else 0


def _load_versions(
    db: Database,
    path: Path,
    crates: dict[str, CrateInfo],
    deps: sqlite3.Connection,
    progress: Callable[[str, int], None] | None,
) -> int:
    matcher = LicenseMatcher.load(db)
    now = utcnow()
    loaded = 0
    batch: list[tuple[str, dict[str, Any]]] = []
    scm_cache: dict[str, str | None] = {}

    def flush() -> None:
        ids = [vid for vid, _ in batch]
        found: dict[str, list[str]] = {}
        for start in range(0, len(ids), 900):
            chunk = ids[start : start + 900]
            marks = ",".join("?" * len(chunk))
            for version_id, body in deps.execute(
                f"SELECT version_id, body FROM dep WHERE version_id IN ({marks})"
                " ORDER BY version_id, sort_key, body",
                chunk,
            ):
                found.setdefault(str(version_id), []).append(body)
        rows = []
        for vid, row in batch:
            row["DEPENDENCIES"] = "[" + ",".join(found.get(vid, [])) + "]"
            rows.append(row)
        with db.engine.begin() as conn:
            upsert(conn, db.version, rows)
        batch.clear()

    for _table, reader in iter_csv(path, {"versions"}):
        for record in reader:
            crate = crates.get(record["crate_id"])
            if crate is None:
                continue
            num, yanked = record["num"], _bool(record.get("yanked"))
            crate.versions += 1
            rank = _rank(num, yanked)
            best = crate.best.get(rank)
            if best is None or sort_key(num) > sort_key(best):
                crate.best[rank] = num
            license_text = _text(record.get("license"))
            standard = matcher.standardise(license_text)
            features = record.get("features") or "{}"
            batch.append(
                (
                    record["id"],
                    {
                        "LANGUAGE": LANGUAGE,
                        "REPOSITORY": REPOSITORY,
                        "PRODUCT_KEY": crate.name.lower(),
                        "VERSION": num,
                        "NAME": crate.name,
                        "DESCRIPTION": _text(record.get("description")) or crate.description,
                        "LICENSE": license_text,
                        "STANDARD_LICENSE": standard.standard_license,
                        "LICENSE_IDS": standard.license_ids,
                        "LICENSE_EXPRESSION": standard.expression,
                        "LICENSE_AI": None,
                        "FEATURES": dumps(json.loads(features)),
                        "CHECKSUM": _checksum(record),
                        "YANKED": yanked,
                        "RUST_VERSION": _text(record.get("rust_version")),
                        "LINKS": _text(record.get("links")),
                        "URL": f"{CRATES_IO_PAGE}{crate.name}/{num}",
                        "SCM": scm_cache.setdefault(record["crate_id"], crate.scm),
                        "DOWNLOADS": _int(record.get("downloads")),
                        "RELEASE_DATE": _time(record.get("created_at")),
                        "PROCESSED": 1,
                        "LAST_UPDATED": now,
                    },
                )
            )
            if len(batch) >= BATCH:
                loaded += len(batch)
                flush()
                if progress is not None:
                    progress("versions", loaded)
    if batch:
        loaded += len(batch)
        flush()
    return loaded


def _load_products(db: Database, crates: dict[str, CrateInfo]) -> int:
    now = utcnow()
    rows = []
    for crate in crates.values():
        latest = next((crate.best[r] for r in (0, 1, 2) if r in crate.best), None)
        rows.append(
            {
                "LANGUAGE": LANGUAGE,
                "REPOSITORY": REPOSITORY,
                "PRODUCT_KEY": crate.name.lower(),
                "NAME": crate.name,
                "DESCRIPTION": crate.description,
                "LATEST_VERSION": latest,
                "COMP_STATUS": "ACTIVE" if 0 in crate.best or 1 in crate.best else "YANKED",
                "URL": CRATES_IO_PAGE + crate.name,
                "SCM": crate.scm,
                "KEYWORDS": dumps(sorted(set(crate.keywords))),
                "CATEGORIES": dumps(sorted(set(crate.categories))),
                "DOWNLOADS": crate.downloads,
                "VERSION_COUNT": crate.versions,
                "LAST_UPDATED": now,
            }
        )
    for start in range(0, len(rows), BATCH):
        with db.engine.begin() as conn:
            upsert(conn, db.product, rows[start : start + BATCH])
    return len(rows)
