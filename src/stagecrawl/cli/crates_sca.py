"""`stagecrawl crates vulns | audit | licenses …`: parse options, call one crates SCA
pipeline function (stagecrawl.crates.sca), render its report, exit."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from stagecrawl.cli.common import (
    EXIT_PARTIAL,
    AiLicenseUrl,
    AiRate,
    CacheDir,
    Contact,
    Db,
    Format,
    FormatOption,
    IndexUrl,
    console,
    emit,
    guarded,
    run,
    settings_from,
    show,
)
from stagecrawl.crates.audit import AuditReport
from stagecrawl.crates.osv import DEFAULT_OSV_URL
from stagecrawl.crates.sca import (
    AuditRequest,
    audit_crates,
    backfill_licenses,
    check_licenses,
    import_osv,
)
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.errors import InputError
from stagecrawl.sca.cyclonedx import audit_cyclonedx
from stagecrawl.sca.ecosystem import utcnow
from stagecrawl.sca.policy import LicenseCheck
from stagecrawl.sca.reference import import_reference
from stagecrawl.sca.report_json import audit_json
from stagecrawl.sca.sarif import audit_sarif
from stagecrawl.storage.db import Database


def register(app: typer.Typer) -> None:
    """Add vulns, audit and the licenses group to the `crates` app."""
    app.command("vulns")(vulns_command)
    app.command("audit")(audit_command)
    licenses_app = typer.Typer(help="License standardisation.", no_args_is_help=True)
    licenses_app.command("backfill")(licenses_backfill)
    licenses_app.command("check")(licenses_check)
    app.add_typer(licenses_app, name="licenses")


def vulns_command(
    source: Annotated[
        str,
        typer.Option("--source", help="URL or local path of the OSV dump (zip, folder, .json)."),
    ] = DEFAULT_OSV_URL,
    scope: Annotated[
        str, typer.Option("--scope", help="collected: crates in PRODUCT; all: every crate.")
    ] = "collected",
    max_archive_mb: Annotated[int, typer.Option("--max-archive-mb", min=1)] = 512,
    max_entry_kb: Annotated[int, typer.Option("--max-entry-kb", min=1)] = 4096,
    fmt: FormatOption = Format.table,
    db: Db = None,
    contact: Contact = None,
) -> None:
    """Import OSV advisories for crates.io into the VULN tables and match collected versions."""
    options = locals()
    s = guarded(lambda: settings_from(options))

    async def body(stop: GracefulStop) -> int:
        report = await import_osv(
            s, source, scope, max_archive_mb * 1024 * 1024, max_entry_kb * 1024, stop
        )

        def tables() -> None:
            show(
                "vulns",
                {
                    "advisories read": report.advisories,
                    "GHSA duplicates merged into RUSTSEC": report.duplicates_merged,
                    "entries skipped (too large)": report.read.skipped_too_large,
                    "entries skipped (not OSV JSON)": report.read.skipped_invalid,
                    "malformed (skipped, reported)": len(report.problems),
                    "informational (unmaintained, unsound…)": report.informational,
                    "advisory × crate pairs (RAW)": report.pairs,
                    f"pairs in scope for V1 ({scope})": report.in_scope,
                    "RAW rows written": report.raw_written,
                    "unchanged (not newer)": report.unchanged,
                    "V1 rows (CVE)": report.v1_rows,
                    "withdrawn": report.withdrawn,
                    "collected versions hit": report.hits,
                },
            )
            if report.problems:
                console.print(
                    f"[bold red]{len(report.problems)} malformed advisory parts skipped:[/] "
                    + escape("; ".join(report.problems)),
                    highlight=False,
                    soft_wrap=True,
                )

        emit(fmt, public(report), tables)
        return EXIT_PARTIAL if report.problems else 0

    run(body, s.grace_period)


def public(report: object) -> dict[str, object]:
    """A report dataclass as JSON-ready data (nested dataclasses included)."""
    assert is_dataclass(report) and not isinstance(report, type)
    return asdict(report)


AUDIT_FORMATS = ("table", "json", "sarif", "cyclonedx")


def audit_command(
    targets: Annotated[
        list[str] | None,
        typer.Argument(help="NAME@VERSION (or NAME: its collected versions).", show_default=False),
    ] = None,
    lockfile: Annotated[
        list[Path] | None, typer.Option("--lockfile", help="A Cargo.lock (v1–v4); repeatable.")
    ] = None,
    repo: Annotated[
        str | None, typer.Option("--repo", help="Git URL or path: audit its tags' locks.")
    ] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="A tag of --repo.")] = None,
    tags_matching: Annotated[
        str | None, typer.Option("--tags-matching", help="Glob over --repo's tags.")
    ] = None,
    all_tags: Annotated[bool, typer.Option("--all-tags", help="Every tag of --repo.")] = False,
    output: Annotated[
        str, typer.Option("--format", help="table, json, sarif or cyclonedx (to stdout).")
    ] = "table",
    deny: Annotated[
        list[str] | None,
        typer.Option("--deny", help="Fail on informational advisories too: warnings, or a kind."),
    ] = None,
    cache_dir: CacheDir = None,
    index_url: IndexUrl = None,
    db: Db = None,
) -> None:
    """Which stored advisories hit crate versions — any version, collected or not (run
    `crates vulns` first). Exit 1 when a vulnerability hits. Read-only."""
    options = locals()
    s = guarded(lambda: settings_from(options))

    async def body(stop: GracefulStop) -> int:
        if output not in AUDIT_FORMATS:
            raise InputError(f"--format must be one of {', '.join(AUDIT_FORMATS)}")
        request = AuditRequest(
            targets=targets or [],
            lockfiles=lockfile or [],
            repo=repo,
            tags=tuple(tag or []),
            tags_matching=tags_matching,
            all_tags=all_tags,
            deny=tuple(deny or []),
        )
        report = await audit_crates(s, request, stop)
        if output == "table":
            _print_audit(report)
        else:
            if output == "json":
                document = audit_json(report)
            elif output == "sarif":
                document = audit_sarif(report)
            else:
                document = audit_cyclonedx(report, str(uuid.uuid4()), utcnow())
            sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
            sys.stdout.flush()
        return report.exit_code

    run(body, s.grace_period)


def _print_rows(title: str, columns: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    """A table in a terminal; in a pipe or a file, tab-separated whole lines: nothing is cut
    to a terminal width."""
    if console.is_terminal:
        table = Table(title=title, title_justify="left")
        for column in columns:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*(escape(cell) for cell in row))
        console.print(table)
        return
    console.print("\t".join(columns), highlight=False, soft_wrap=True)
    for row in rows:
        console.print(escape("\t".join(row)), highlight=False, soft_wrap=True)


def _print_audit(report: AuditReport) -> None:
    as_of = report.advisories_modified or "?"
    console.print(
        f"{len(report.packages)} packages against {report.advisories_stored} stored advisories"
        f" (newest change {as_of})",
        highlight=False,
    )
    for problem in report.problems:
        console.print(f"[bold red]not audited:[/] {escape(problem)}", soft_wrap=True)
    if not report.hits:
        console.print("no advisory hits the audited versions", highlight=False)
        return
    columns = ("crate", "version", "advisory", "aliases", "kind", "patched", "summary")
    rows = [
        (
            h.package.name,
            h.package.version,
            h.advisory.osv_id,
            " ".join(h.advisory.aliases),
            h.advisory.informational or "vulnerability",
            " or ".join(h.advisory.affected.patched()) or "none",
            h.advisory.summary or "",
        )
        for h in report.hits
    ]
    _print_rows("advisories hitting the audited versions", columns, rows)
    console.print(
        f"{len(report.vulnerabilities)} vulnerabilities, {len(report.warnings)} warnings"
        " (informational)",
        highlight=False,
    )


def licenses_backfill(
    recompute_all: Annotated[
        bool, typer.Option("--all", help="Recompute every row, not only those lacking them.")
    ] = False,
    fmt: FormatOption = Format.table,
    db: Db = None,
    ai_license_url: AiLicenseUrl = None,
    ai_rate: AiRate = None,
    contact: Contact = None,
) -> None:
    """Fill STANDARD_LICENSE, LICENSE_IDS and LICENSE_EXPRESSION from the stored LICENSE (no
    network); with --ai-license-url, also ask the classifier for every LICENSE_AI still NULL."""
    options = locals()
    s = guarded(lambda: settings_from(options))

    async def body(stop: GracefulStop) -> int:
        report, ai_report = await backfill_licenses(s, recompute_all, stop)
        document = public(report)
        if ai_report is not None:
            document["ai"] = public(ai_report)

        def tables() -> None:
            rows: dict[str, object] = {
                "rows": report.rows,
                "matched": report.matched,
                "unmatched": report.unmatched,
                "no license (license-file)": report.no_license,
            }
            for text, count in report.common_unmatched:
                rows[f"  unmatched: {text}"] = count
            if ai_report is not None:
                rows["AI: rows without LICENSE_AI"] = ai_report.rows
                rows["AI: distinct texts asked"] = ai_report.texts
                rows["AI: rows filled"] = ai_report.filled
                rows["AI: rows still failing"] = ai_report.failed
            show("licenses backfill", rows)

        emit(fmt, document, tables)
        return EXIT_PARTIAL if ai_report is not None and ai_report.failed else 0

    run(body, s.grace_period)


def licenses_check(
    allow: Annotated[
        list[str] | None, typer.Option("--allow", help="Allowed SPDX ids (comma-separated).")
    ] = None,
    deny: Annotated[
        list[str] | None, typer.Option("--deny", help="Denied SPDX ids; deny wins over allow.")
    ] = None,
    exception: Annotated[
        list[str] | None,
        typer.Option("--exception", help="CRATE=LICENSE: allowed for that crate only."),
    ] = None,
    fmt: FormatOption = Format.table,
    db: Db = None,
) -> None:
    """Every collected version whose license the policy cannot satisfy (cargo-deny's
    semantics); exit 1 when any. Read-only."""
    options = locals()
    s = guarded(lambda: settings_from(options))

    def body() -> int:
        result = check_licenses(s, allow or [], deny or [], exception or [])
        document = {
            "versions_checked": result.rows,
            "violations": [
                {
                    "crate": v.package,
                    "version": v.version,
                    "license": v.license,
                    "expression": v.expression,
                    "reason": v.reason,
                }
                for v in result.violations
            ],
        }
        emit(fmt, document, lambda: _print_violations(result))
        return 1 if result.violations else 0

    raise typer.Exit(guarded(body))


def _print_violations(result: LicenseCheck) -> None:
    columns = ("crate", "version", "license", "reason")
    rows = [
        (v.package, v.version, v.expression or v.license or "", v.reason) for v in result.violations
    ]
    if rows:
        _print_rows("licenses the policy does not accept", columns, rows)
    console.print(
        f"{result.rows} versions checked, {len(result.violations)} not accepted", highlight=False
    )


def licenses_import(
    file: Annotated[Path, typer.Argument(help="CSV or JSON: ID, NAME_SHORT, NAME, MAPPING, URL.")],
    db: Db = None,
) -> None:
    """Load a license reference into TB_LICENSE_V2 (upsert by ID)."""
    options = locals()
    s = guarded(lambda: settings_from(options))

    def body() -> int:
        count = import_reference(Database(s.db), file)
        console.print(f"imported {count} license rows")
        return 0

    raise typer.Exit(guarded(body))
