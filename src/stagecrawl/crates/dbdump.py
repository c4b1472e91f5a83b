"""Loading crates.io's daily database dump (`db-dump.tar.gz`) into PRODUCT and VERSION.

The archive is read as a stream, entry by entry, never extracted; CSV rows are streamed and
written in batched upserts, so memory stays bounded whatever the registry's size. The tar's
entry order is not guaranteed, so the archive is read in passes (a URL is first downloaded to
a temporary file): crate-level tables, then dependencies (spilled to a temporary SQLite file
keyed by version id), then versions. crates.io asks bulk users to take this path, not the API.
"""

from __future__ import annotations

import asyncio
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
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Connection

from stagecrawl.components import download_fetcher, open_database
from stagecrawl.crates.licenses import CRATES_READER
from stagecrawl.crates.rows import CRATES_IO_PAGE
from stagecrawl.crates.semver import SEMVER
from stagecrawl.crates.tables import LANGUAGE, REPOSITORY, products, versions
from stagecrawl.engine.fetcher import require_contact
from stagecrawl.engine.progress import ProgressReporter
from stagecrawl.engine.shutdown import GracefulStop, Interrupted, current_stop
from stagecrawl.errors import InputError
from stagecrawl.jsoncodec import loads
from stagecrawl.queue.table import utcnow
from stagecrawl.sca.ecosystem import parse_time
from stagecrawl.sca.matcher import LicenseMatcher
from stagecrawl.settings import Settings, check_http_url
from stagecrawl.storage.db import Database, dumps
from stagecrawl.storage.owners import LatestVersion, VersionOrder

log = logging.getLogger("stagecrawl.dbdump")
DEP_KINDS = {"0": "normal", "1": "build", "2": "dev"}
BATCH = 5000
# VERSION rows go in executemany batches of WRITE_BATCH, committed every COMMIT_ROWS: big
# transactions spare commits (an fsync each), small batches keep the rows in memory few.
WRITE_BATCH = 2000
COMMIT_ROWS = 20_000
STOP_POLL = 2000  # rows read between two looks at the stop
DEP_CACHE = 10_000  # encoded dependencies kept (raw fields -> JSON)
FEATURES_CACHE = 10_000
VERSION_KEYS = 16_384
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


def _time(value: str | None) -> Any:
    if not value:
        return None
    return parse_time(value.replace(" ", "T", 1) if "T" not in value else value)


_MISSING: list[Any] = [None]


class Rows:
    """The rows of one CSV table as lists, with the header's column positions: indexing a
    list is what a million-row load can afford (DictReader builds a dict per row)."""

    def __init__(self, table: str, header: list[str], reader: Iterator[list[str]]) -> None:
        self.table = table
        self.header = header
        self.width = len(header)
        self._reader = reader
        self._index = {name: n for n, name in enumerate(header)}

    def index(self, name: str) -> int | None:
        """The column's position, or None when this dump has no such column."""
        return self._index.get(name)

    def __iter__(self) -> Iterator[list[str]]:
        width = self.width
        # A load runs in a thread for minutes: it looks at the stop every STOP_POLL rows (a
        # stopped load keeps what it committed; the upserts make a rerun redo it harmlessly).
        stop = current_stop()
        countdown = STOP_POLL
        for row in self._reader:
            countdown -= 1
            if not countdown:
                countdown = STOP_POLL
                if stop is not None and stop.stopped():
                    raise Interrupted(f"dump load stopped while reading {self.table}.csv")
            if len(row) < width:
                if not row:
                    continue  # a blank line, which DictReader skipped too
                # A short row's missing fields read as None, as DictReader's restval did.
                row = row + _MISSING * (width - len(row))
            yield row


def iter_csv(path: Path, wanted: set[str]) -> Iterator[Rows]:
    """The rows of each wanted `data/<table>.csv`, in archive order."""
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
            reader = csv.reader(codecs.iterdecode(handle, "utf-8"))
            header = next(reader, None)
            if header is None:
                continue
            yield Rows(table, header, reader)


def _field(row: list[str], index: int | None) -> str | None:
    return row[index] if index is not None else None


@dataclass(slots=True)  # one per crate, all held through the load
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
    latest: LatestVersion | None = None  # the latest-version rule, fed as versions stream
    _scm: Any = None  # the SCM JSON once made (every version row of the crate carries it)

    @property
    def scm(self) -> str | None:
        if self._scm is None:
            self._scm = (
                dumps(
                    {
                        "repository": self.repository,
                        "homepage": self.homepage,
                        "documentation": self.documentation,
                    }
                ),
            )
        return self._scm[0]  # type: ignore[no-any-return]


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


def _column(rows: Rows, name: str) -> int:
    """The position of a column the table cannot do without (KeyError: not a dump)."""
    index = rows.index(name)
    if index is None:
        raise KeyError(f"{rows.table}.csv has no {name} column")
    return index


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
    for rows in iter_csv(path, wanted):
        table = rows.table
        if table == "crates":
            i_id, i_name = _column(rows, "id"), _column(rows, "name")
            i_description, i_homepage = rows.index("description"), rows.index("homepage")
            i_docs, i_repo = rows.index("documentation"), rows.index("repository")
            i_downloads = rows.index("downloads")
            for row in rows:
                crates[row[i_id]] = CrateInfo(
                    row[i_name],
                    _text(_field(row, i_description)),
                    _text(_field(row, i_homepage)),
                    _text(_field(row, i_docs)),
                    _text(_field(row, i_repo)),
                    _int(_field(row, i_downloads)),
                )
        elif table == "keywords":
            i_id, i_keyword = _column(rows, "id"), _column(rows, "keyword")
            for row in rows:
                keywords[row[i_id]] = row[i_keyword]
        elif table == "categories":
            i_id, i_slug, i_category = (
                _column(rows, "id"),
                rows.index("slug"),
                rows.index("category"),
            )
            for row in rows:
                categories[row[i_id]] = _field(row, i_slug) or _field(row, i_category) or row[i_id]
        elif table in ("crates_keywords", "crates_categories"):
            i_crate = _column(rows, "crate_id")
            i_other = _column(rows, "keyword_id" if table == "crates_keywords" else "category_id")
            pairs = crate_keywords if table == "crates_keywords" else crate_categories
            for row in rows:
                pairs.append((row[i_crate], row[i_other]))
        elif table == "crate_downloads":
            i_crate, i_downloads = _column(rows, "crate_id"), _column(rows, "downloads")
            for row in rows:
                downloads[row[i_crate]] = int(row[i_downloads] or 0)
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
    # Consecutive versions of a crate mostly repeat their dependencies: the encoded form of a
    # dependency is kept for its raw fields (a bounded cache, so memory stays flat).
    encoded: dict[tuple[str | None, ...], tuple[str, str]] = {}
    for rows in iter_csv(path, {"dependencies"}):
        i_version, i_crate = _column(rows, "version_id"), _column(rows, "crate_id")
        i_rename, i_req = rows.index("explicit_name"), rows.index("req")
        i_kind, i_optional = rows.index("kind"), rows.index("optional")
        i_default, i_features = rows.index("default_features"), rows.index("features")
        i_target = rows.index("target")
        for row in rows:
            crate_id = row[i_crate]
            target = crates.get(crate_id)
            if target is None:
                continue
            key = (
                crate_id,
                _field(row, i_rename),
                _field(row, i_req),
                _field(row, i_kind),
                _field(row, i_optional),
                _field(row, i_default),
                _field(row, i_features),
                _field(row, i_target),
            )
            found = encoded.get(key)
            if found is None:
                if len(encoded) >= DEP_CACHE:
                    encoded.clear()
                found = encoded[key] = _encode_dependency(target.name, key)
            batch.append((int(row[i_version]), *found))
            count += 1
            if len(batch) >= BATCH:
                deps.executemany("INSERT INTO dep VALUES (?, ?, ?)", batch)
                batch.clear()
    deps.executemany("INSERT INTO dep VALUES (?, ?, ?)", batch)
    deps.commit()
    return count


def _encode_dependency(name: str, fields: tuple[str | None, ...]) -> tuple[str, str]:
    """(sort key, canonical JSON) of one dependency from its raw dump fields."""
    _crate_id, rename, req, kind, optional, default_features, features, target = fields
    body = {
        "name": name,
        "rename": _text(rename),
        "req": req,
        "kind": DEP_KINDS.get(kind or "0", "normal"),
        "optional": _bool(optional),
        "default_features": _bool(default_features or "t"),
        "features": _pg_array(features or "{}"),
        "target": _text(target),
    }
    # Stored already in the canonical compact form of JSON columns, so versions are
    # assembled by joining strings, not by decoding and encoding every dependency.
    sort_key = "\0".join((name, str(body["kind"]), str(body["req"])))
    return sort_key, dumps(body) or "{}"


def _pg_array(value: str) -> list[str]:
    """PostgreSQL array text `{a,b}` (how the dump writes text[] columns) as a list."""
    value = value.strip()
    if value.startswith("[") and value.endswith("]"):
        return [str(v) for v in json.loads(value)]
    if not value.startswith("{") or value in ("{}", ""):
        return []
    return [item.strip('"') for item in next(csv.reader([value[1:-1]]))]


# VERSION's columns in the order the loader builds its rows (BulkUpsert takes tuples).
VERSION_ROW = (
    "LANGUAGE",
    "REPOSITORY",
    "PRODUCT_KEY",
    "VERSION",
    "NAME",
    "DESCRIPTION",
    "LICENSE",
    "STANDARD_LICENSE",
    "LICENSE_IDS",
    "LICENSE_EXPRESSION",
    "LICENSE_AI",
    "FEATURES",
    "CHECKSUM",
    "YANKED",
    "RUST_VERSION",
    "LINKS",
    "URL",
    "SCM",
    "DOWNLOADS",
    "RELEASE_DATE",
    "PROCESSED",
    "LAST_UPDATED",
    "DEPENDENCIES",  # last: filled in when the batch is written
)
PRODUCT_ROW = (
    "LANGUAGE",
    "REPOSITORY",
    "PRODUCT_KEY",
    "NAME",
    "DESCRIPTION",
    "LATEST_VERSION",
    "COMP_STATUS",
    "URL",
    "SCM",
    "KEYWORDS",
    "CATEGORIES",
    "DOWNLOADS",
    "VERSION_COUNT",
    "LAST_UPDATED",
)


def _load_versions(
    db: Database,
    path: Path,
    crates: dict[str, CrateInfo],
    deps: sqlite3.Connection,
    progress: Callable[[str, int], None] | None,
) -> int:
    # One connection for the whole pass; its transaction is committed every COMMIT_ROWS.
    with db.engine.connect() as conn:
        return _write_versions(db, conn, path, crates, deps, progress)


def _write_versions(
    db: Database,
    conn: Connection,
    path: Path,
    crates: dict[str, CrateInfo],
    deps: sqlite3.Connection,
    progress: Callable[[str, int], None] | None,
) -> int:
    matcher = LicenseMatcher.load(db, CRATES_READER)
    writer = versions(db).bulk(VERSION_ROW)
    # Version numbers repeat across crates (0.1.0, 1.0.0…): their sort keys are kept in a
    # bounded cache by text, not per crate, so memory does not grow with the registry.
    order = VersionOrder(
        lru_cache(maxsize=VERSION_KEYS)(SEMVER.key),
        lru_cache(maxsize=VERSION_KEYS)(SEMVER.is_prerelease),
    )
    now = utcnow()
    loaded = uncommitted = 0
    ids: list[str] = []
    batch: list[list[Any]] = []
    features_cache: dict[str, str | None] = {}

    def flush() -> None:
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
        for vid, row in zip(ids, batch, strict=True):
            row.append("[" + ",".join(found.get(vid, ())) + "]")
        writer.execute(conn, batch)  # inside the open transaction (autobegun)
        ids.clear()
        batch.clear()

    for rows in iter_csv(path, {"versions"}):
        i_id, i_crate, i_num = _column(rows, "id"), _column(rows, "crate_id"), _column(rows, "num")
        i_yanked, i_license = rows.index("yanked"), rows.index("license")
        i_features, i_description = rows.index("features"), rows.index("description")
        i_checksum, i_sha256 = rows.index("checksum"), rows.index("tar_sha256")
        i_rust, i_links = rows.index("rust_version"), rows.index("links")
        i_downloads, i_created = rows.index("downloads"), rows.index("created_at")
        for record in rows:
            crate_id = record[i_crate]
            crate = crates.get(crate_id)
            if crate is None:
                continue
            num, yanked = record[i_num], _bool(_field(record, i_yanked))
            crate.versions += 1
            if crate.latest is None:
                crate.latest = LatestVersion(order)
            crate.latest.add(num, yanked)  # the owner's one latest-version rule
            license_text = _text(_field(record, i_license))
            standard = matcher.standardise(license_text)
            features_text = _field(record, i_features) or "{}"
            features = features_cache.get(features_text)
            if features is None:
                if len(features_cache) >= FEATURES_CACHE:
                    features_cache.clear()
                features = features_cache[features_text] = dumps(loads(features_text))
            checksum = _field(record, i_checksum)
            if not checksum:
                raw = _field(record, i_sha256) or ""
                checksum = raw[2:] if raw.startswith("\\x") else (raw or None)
            ids.append(record[i_id])
            batch.append(
                [
                    LANGUAGE,
                    REPOSITORY,
                    crate.name.lower(),
                    num,
                    crate.name,
                    _text(_field(record, i_description)) or crate.description,
                    license_text,
                    standard.standard_license,
                    standard.license_ids,
                    standard.expression,
                    None,
                    features,
                    checksum,
                    yanked,
                    _text(_field(record, i_rust)),
                    _text(_field(record, i_links)),
                    f"{CRATES_IO_PAGE}{crate.name}/{num}",
                    crate.scm,
                    _int(_field(record, i_downloads)),
                    _time(_field(record, i_created)),
                    1,
                    now,
                ]
            )
            if len(batch) >= WRITE_BATCH:
                loaded += len(batch)
                uncommitted += len(batch)
                flush()
                if uncommitted >= COMMIT_ROWS:
                    conn.commit()
                    uncommitted = 0
                    if progress is not None:
                        progress("versions", loaded)
    if batch:
        loaded += len(batch)
        flush()
    conn.commit()
    return loaded


def _load_products(db: Database, crates: dict[str, CrateInfo]) -> int:
    now = utcnow()
    writer = products(db).bulk(PRODUCT_ROW)
    rows: list[tuple[Any, ...]] = []
    for crate in crates.values():
        latest = crate.latest or LatestVersion(SEMVER)
        rows.append(
            (
                LANGUAGE,
                REPOSITORY,
                crate.name.lower(),
                crate.name,
                crate.description,
                latest.latest,
                latest.status,
                CRATES_IO_PAGE + crate.name,
                crate.scm,
                dumps(sorted(set(crate.keywords))),
                dumps(sorted(set(crate.categories))),
                crate.downloads,
                crate.versions,
                now,
            )
        )
    stop = current_stop()
    for start in range(0, len(rows), BATCH):
        if stop is not None and stop.stopped():
            raise Interrupted("dump load stopped while writing PRODUCT")
        db.transaction(partial(writer.execute, rows=rows[start : start + BATCH]))
    return len(rows)


async def run_dbdump(
    s: Settings,
    stop: GracefulStop,
    source: str,
    max_bytes: int,
    progress: ProgressReporter | None = None,
) -> DumpReport:
    """`crates dbdump`: download the dump (or read a local one), then load it."""
    from stagecrawl.crates.plugin import REGISTRY, is_crates_io

    with tempfile.TemporaryDirectory(prefix="stagecrawl-dl-") as tmp:
        if source.startswith(("http://", "https://")):
            check_http_url(source, "--source")
            if is_crates_io(source):
                require_contact(s.contact, str(REGISTRY.contact_policy))
            path = Path(tmp) / "db-dump.tar.gz"
            async with download_fetcher(s, source) as fetcher:
                await stop.cancelling(fetcher.download(source, path, max_bytes, lane="download"))
        else:
            path = Path(source)
            if not path.is_file():
                raise InputError(f"dump {source} does not exist")
        database = open_database(s)

        def advance(_what: str, n: int) -> None:
            if progress is not None:
                progress.update(n, None, {})

        return await asyncio.to_thread(load_dump, database, path, advance)
