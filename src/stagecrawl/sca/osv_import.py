"""Storing OSV advisories in a registry's VULN tables (docs/schema.md).

RAW holds every advisory for every package of the ecosystem it names, whatever the scope, so an
audit can answer for any package; V1 (the CVE table) holds the CVE advisories of the packages
in scope, without withdrawn ones and without informational ones (unmaintained, unsound,
notice…) unless they carry a CVSS score; HIT holds the collected versions each advisory hits.
Every table is keyed on the advisory's own OSV id, so two advisories sharing a CVE both keep
their ranges. An import writes in one transaction, rows sent as executemany batches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Table, bindparam, delete, select
from sqlalchemy.engine import Connection

from stagecrawl.sca.ecosystem import Ecosystem, OrderedVersion, VulnTables, parse_time, utcnow
from stagecrawl.sca.osv_model import Advisory, Affected, merge_twins, parse_advisory
from stagecrawl.sca.osv_read import ReadReport
from stagecrawl.storage.bulk import upsert
from stagecrawl.storage.db import Database, dumps

log = logging.getLogger("stagecrawl.osv")

MAPPED_TYPE = "RE"
BATCH = 2000


@dataclass(frozen=True)
class RegistryState:
    """What a registry has collected, as an import needs it: the package keys it knows (its
    PRODUCT table) and each key's collected versions."""

    known: set[str]
    collected: Mapping[str, Sequence[str]]


@dataclass
class ImportReport:
    read: ReadReport = field(default_factory=ReadReport)
    advisories: int = 0
    duplicates_merged: int = 0
    pairs: int = 0  # (advisory, crate) pairs read
    in_scope: int = 0  # pairs whose crate is in scope for the CVE table
    raw_written: int = 0
    unchanged: int = 0
    v1_rows: int = 0
    withdrawn: int = 0
    informational: int = 0
    hits: int = 0
    # "ID: what is wrong": a record skipped whole (it could not be imported at all)
    problems: list[str] = field(default_factory=list)
    # "ID: where: what": a part of an imported record that could not be read (a range with
    # an upstream bound no ecosystem order reads, PYSEC-2019-125's `fixed 2019-09-12`): the
    # record is kept whole in RAW and an audit of that package says it could not evaluate it
    warnings: list[str] = field(default_factory=list)


def import_advisories(
    db: Database,
    ecosystem: Ecosystem,
    tables: VulnTables,
    records: Iterable[dict[str, Any]],
    scope: str,
    report: ImportReport,
    registry_state: Callable[[Connection], RegistryState],
) -> None:
    """Store the advisories of `records` (see the module doc for what each table holds).
    RAW rows are replaced only when the advisory's `modified` is newer; V1 and HIT rows are
    brought to what the advisories say now (inserting and deleting only what differs), so
    versions collected since the last import are matched too. `scope` is `collected` (V1 for
    the registry's known packages) or `all`. `registry_state` reads, on the import's reading
    connection, the registry's known package keys and each one's collected versions (HIT)."""
    twins = merge_twins(records, ecosystem.primary_prefix)
    source, report.duplicates_merged = twins.records, twins.merged
    advisories: list[Advisory] = []
    for record in source:
        report.advisories += 1
        advisory = parse_advisory(record, ecosystem, report.problems, report.warnings)
        if advisory is not None:
            advisories.append(advisory)
    report.advisories += report.duplicates_merged
    for problem in report.problems:
        log.warning("OSV: %s (skipped)", problem)
    for warning in report.warnings:
        log.warning("OSV: %s (kept in RAW; audits say it could not be evaluated)", warning)

    raw, v1, hit = tables.raw, tables.v1, tables.hit
    # stored keys compared as the registry keys them (case-folded, or as they are for Go)
    key_of = ecosystem.product_key
    Keys2 = tuple[str, str]
    Stored = tuple[Any, Any, bool]  # MODIFIED, ALIASES, withdrawn
    Keys3 = tuple[str, str, str]

    def read_stored(
        conn: Connection,
    ) -> tuple[dict[Keys2, Stored], dict[Keys3, tuple[Any, Any]], dict[Keys3, Any], RegistryState]:
        stored = {
            (r.OSV_ID, key_of(str(r.PRODUCT_KEY))): (
                r.MODIFIED,
                r.ALIASES,
                r.WITHDRAWN is not None,
            )
            for r in conn.execute(
                select(
                    raw.c.OSV_ID, raw.c.PRODUCT_KEY, raw.c.MODIFIED, raw.c.ALIASES, raw.c.WITHDRAWN
                )
            )
        }
        v1_now = {
            (key_of(str(r.PRODUCT_KEY)), r.VULN_ID, r.OSV_ID): (r.VULN_RANGE, r.MODIFIED)
            for r in conn.execute(
                select(v1.c.PRODUCT_KEY, v1.c.VULN_ID, v1.c.OSV_ID, v1.c.VULN_RANGE, v1.c.MODIFIED)
            )
        }
        hits_now = {
            (key_of(str(r.PRODUCT_KEY)), r.VERSION, r.OSV_ID): r.VULN_ID
            for r in conn.execute(
                select(hit.c.PRODUCT_KEY, hit.c.VERSION, hit.c.OSV_ID, hit.c.VULN_ID)
            )
        }
        state = registry_state(conn)
        return stored, v1_now, hits_now, state

    stored, v1_now, hits_now, state = db.read(read_stored)
    known = {key_of(key) for key in state.known}
    # Each collected version parsed once, not once per advisory that names its package.
    parsed_versions: dict[str, list[tuple[str, OrderedVersion | None]]] = {
        key_of(key): [(v, ecosystem.parsed(v)) for v in versions]
        for key, versions in state.collected.items()
    }

    now = utcnow()
    raw_rows: list[dict[str, Any]] = []
    v1_wanted: dict[tuple[str, str, str], dict[str, Any]] = {}
    hits_wanted: dict[tuple[str, str, str], dict[str, Any]] = {}
    ids = {a.osv_id for a in advisories}
    for advisory in advisories:
        if advisory.informational:
            report.informational += 1
        vid = advisory.vuln_id
        shared: dict[str, Any] | None = None  # the advisory's own RAW columns, made once
        for affected in advisory.packages:
            report.pairs += 1
            key = (advisory.osv_id, affected.product_key)
            previous = stored.get(key)
            modified = advisory.modified
            # Newer, or merged otherwise: a twin that joined (aliases) or a withdrawal that a
            # live twin undoes can leave `modified` as it was.
            if (
                previous is None
                or (modified is not None and (previous[0] is None or previous[0] < modified))
                or previous[1] != dumps(advisory.aliases)
                or previous[2] != (advisory.withdrawn is not None)
            ):
                if shared is None:
                    shared = _raw_columns(advisory)
                raw_rows.append(_raw_row(shared, affected, now))
                report.withdrawn += advisory.withdrawn is not None
            else:
                report.unchanged += 1
            in_scope = scope == "all" or affected.product_key in known
            report.in_scope += in_scope
            if in_scope and advisory.in_cve_table():
                v1_wanted[(affected.product_key, vid, advisory.osv_id)] = {
                    "PRODUCT_KEY": affected.product_key,
                    "VULN_ID": vid,
                    "OSV_ID": advisory.osv_id,
                    "VULN_RANGE": affected.range_text(),
                    "MAPPED_TYPE": MAPPED_TYPE,
                    "MODIFIED": modified,
                    "LAST_UPDATED": now,
                }
            if advisory.withdrawn is not None:
                continue
            for version, parsed in parsed_versions.get(affected.product_key, []):
                if affected.hits_parsed(version, parsed):
                    hits_wanted[(affected.product_key, version, advisory.osv_id)] = {
                        "PRODUCT_KEY": affected.product_key,
                        "VERSION": version,
                        "OSV_ID": advisory.osv_id,
                        "VULN_ID": vid,
                        "LAST_UPDATED": now,
                    }
    report.raw_written = len(raw_rows)
    report.v1_rows = len(v1_wanted)
    report.hits = len(hits_wanted)
    # Rows of advisories this source names that no longer hold (withdrawn, fixed ranges,
    # merged twins) go; rows of advisories the source does not name are left alone.
    folded = {a for a in twins.folded if a not in ids}
    v1_gone = [k for k in v1_now if (k[2] in ids or k[2] in folded) and k not in v1_wanted]
    v1_new = [
        row for k, row in v1_wanted.items() if v1_now.get(k) != (row["VULN_RANGE"], row["MODIFIED"])
    ]
    hits_gone = [k for k in hits_now if (k[2] in ids or k[2] in folded) and k not in hits_wanted]
    hits_new = [row for k, row in hits_wanted.items() if hits_now.get(k) != row["VULN_ID"]]
    raw_gone = [k for k in stored if k[0] in folded]

    def write(conn: Connection) -> None:
        _delete_many(conn, raw, ("OSV_ID", "PRODUCT_KEY"), raw_gone)
        _delete_many(conn, v1, ("PRODUCT_KEY", "VULN_ID", "OSV_ID"), v1_gone)
        _delete_many(conn, hit, ("PRODUCT_KEY", "VERSION", "OSV_ID"), hits_gone)
        _upsert_many(conn, raw, raw_rows)
        _upsert_many(conn, v1, v1_new)
        _upsert_many(conn, hit, hits_new)

    # One transaction, redone whole if the server is lost under it (within the outage bound).
    db.transaction(write)


def _upsert_many(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    """Rows (dicts with the same keys) in executemany batches of the compiled upsert."""
    for start in range(0, len(rows), BATCH):
        upsert(conn, table, rows[start : start + BATCH])


def _delete_many(
    conn: Connection, table: Table, columns: tuple[str, ...], keys: Sequence[tuple[Any, ...]]
) -> None:
    if not keys:
        return
    statement = delete(table).where(*(table.c[c] == bindparam(f"k_{c}") for c in columns))
    rows = [{f"k_{c}": value for c, value in zip(columns, key, strict=True)} for key in keys]
    for start in range(0, len(rows), BATCH):
        conn.execute(statement, rows[start : start + BATCH])


def _raw_columns(advisory: Advisory) -> dict[str, Any]:
    """The RAW columns that are the advisory's, the same for every crate it names (its JSON
    is serialised once, not once per crate)."""
    record = advisory.record
    return {
        "OSV_ID": advisory.osv_id,
        "VULN_ID": advisory.vuln_id,
        "ALIASES": dumps(advisory.aliases),
        "SUMMARY": advisory.summary,
        "SEVERITY": dumps(record.get("severity") or []),
        "PUBLISHED": parse_time(record.get("published")),
        "MODIFIED": advisory.modified,
        "WITHDRAWN": advisory.withdrawn,
        "INFORMATIONAL": advisory.informational,
        "MAPPED_TYPE": MAPPED_TYPE,
        "OSV_JSON": dumps(record),
    }


def _raw_row(shared: dict[str, Any], affected: Affected, now: datetime) -> dict[str, Any]:
    return {
        **shared,
        "PRODUCT_KEY": affected.product_key,
        "VULN_RANGE": affected.range_text(),
        "LAST_UPDATED": now,
    }
