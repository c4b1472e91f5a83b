"""`stagecrawl crates vulns | audit | licenses …`: parse options, call one crates SCA
pipeline function (stagecrawl.crates.sca), render its report, exit."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

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
from stagecrawl.cli.sca_render import OutputOption, check_format, check_output, deliver, table_text
from stagecrawl.components import open_database
from stagecrawl.crates.sources import DEFAULT_OSV_URL

if TYPE_CHECKING:  # the SCA pipelines and renderers (SQLAlchemy, aiohttp, the engine) are
    # imported where a command runs them: `crates --help` builds every command's signature
    from stagecrawl.crates.audit import AuditReport
    from stagecrawl.engine.shutdown import GracefulStop
    from stagecrawl.sca.policy import LicenseCheck

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="Gate config: stagecrawl.toml, deny.toml or .cargo/audit.toml [default:"
        " stagecrawl.toml upward from here, else deny.toml / .cargo/audit.toml]",
    ),
]
Targets = Annotated[
    list[str] | None,
    typer.Argument(help="NAME@VERSION (or NAME: its collected versions).", show_default=False),
]
Lockfiles = Annotated[
    list[Path] | None, typer.Option("--lockfile", help="A Cargo.lock (v1–v4); repeatable.")
]
Repo = Annotated[str | None, typer.Option("--repo", help="Git URL or path: its tags' Cargo.lock.")]
Tags = Annotated[list[str] | None, typer.Option("--tag", help="A tag of --repo.")]
TagsMatching = Annotated[
    str | None, typer.Option("--tags-matching", help="Glob over --repo's tags.")
]
AllTags = Annotated[bool, typer.Option("--all-tags", help="Every tag of --repo.")]


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
    fmt: Annotated[
        str, typer.Option("--format", help="table, json or markdown (to stdout or --output).")
    ] = "table",
    output: OutputOption = None,
    db: Db = None,
    contact: Contact = None,
) -> None:
    """Import OSV advisories for crates.io into the VULN tables and match collected versions."""
    options = locals()
    s = guarded(lambda: settings_from(options))
    from stagecrawl.crates.sca import import_osv

    async def body(stop: GracefulStop) -> int:
        check_format(fmt, SUMMARY_FORMATS)
        check_output(output)
        report = await import_osv(
            s, source, scope, max_archive_mb * 1024 * 1024, max_entry_kb * 1024, stop
        )
        rows = {
            "advisories read": report.advisories,
            "GHSA duplicates merged into RUSTSEC": report.duplicates_merged,
            "entries skipped (too large)": report.read.skipped_too_large,
            "entries skipped (not OSV JSON)": report.read.skipped_invalid,
            "malformed (skipped, reported)": len(report.problems),
            "unreadable parts (kept, warned)": len(report.warnings),
            "informational (unmaintained, unsound…)": report.informational,
            "advisory × crate pairs (RAW)": report.pairs,
            f"pairs in scope for V1 ({scope})": report.in_scope,
            "RAW rows written": report.raw_written,
            "unchanged (not newer)": report.unchanged,
            "V1 rows (CVE)": report.v1_rows,
            "withdrawn": report.withdrawn,
            "collected versions hit": report.hits,
        }
        # a record skipped whole fails the run; a part that cannot be read is a warning (the
        # record is kept, and an audit says it could not evaluate it fully)
        code = EXIT_PARTIAL if report.problems else 0
        said = [*report.problems, *report.warnings]
        if said:
            what = f"{len(report.problems)} records skipped, {len(report.warnings)} parts kept"
            console.print(
                f"[bold {'red' if report.problems else 'yellow'}]{len(said)} malformed advisory"
                f" parts ({what}):[/] " + escape("; ".join(said)),
                highlight=False,
                soft_wrap=True,
            )
        deliver(summary_text(fmt, "vulns", rows, public(report)), output, code)
        return code

    run(body, s.grace_period)


SUMMARY_FORMATS = ("table", "json", "markdown")


def summary_text(
    fmt: str, title: str, rows: Mapping[str, object], document: Mapping[str, object]
) -> str:
    """A command's summary (name → value) as the chosen format's text."""
    if fmt == "json":
        return json_text(document)
    pairs = [(name, str(value)) for name, value in rows.items()]
    if fmt == "markdown":
        from stagecrawl.sca.markdown import markdown_table

        return f"## {title}\n\n" + markdown_table(("", "count"), pairs)
    return table_text(("", "count"), pairs)


def json_text(document: object) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False, default=str) + "\n"


def public(report: object) -> dict[str, object]:
    """A report dataclass as JSON-ready data (nested dataclasses included)."""
    assert is_dataclass(report) and not isinstance(report, type)
    return asdict(report)


AUDIT_FORMATS = ("table", "json", "sarif", "cyclonedx", "markdown")


def audit_command(
    targets: Targets = None,
    lockfile: Lockfiles = None,
    repo: Repo = None,
    tag: Tags = None,
    tags_matching: TagsMatching = None,
    all_tags: AllTags = False,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="table, json, sarif, cyclonedx or markdown (to stdout or --output).",
        ),
    ] = "table",
    output: OutputOption = None,
    sarif_root: Annotated[
        Path | None,
        typer.Option(
            "--sarif-root",
            help="SARIF paths relative to this folder [default: the lock file's repository].",
        ),
    ] = None,
    config: ConfigOption = None,
    deny: Annotated[
        list[str] | None,
        typer.Option(
            "--deny",
            help="Fail on informational findings too: warnings (all), unmaintained, unsound,"
            " notice, yanked. Replaces the config's list.",
        ),
    ] = None,
    ignore: Annotated[
        list[str] | None,
        typer.Option("--ignore", help="An advisory id (or alias) not to fail on; repeatable."),
    ] = None,
    severity_threshold: Annotated[
        str | None,
        typer.Option(
            "--severity-threshold",
            help="Set aside hits rated below this CVSS score or level (low, medium, high…).",
        ),
    ] = None,
    max_advisory_age: Annotated[
        str | None,
        typer.Option(
            "--max-advisory-age", help="Fail when the newest advisory change is older (days)."
        ),
    ] = None,
    cache_dir: CacheDir = None,
    index_url: IndexUrl = None,
    db: Db = None,
) -> None:
    """Which stored advisories hit crate versions — any version, collected or not (run
    `crates vulns` first). Exit 1 when a finding fails the gate, 2 on bad input or config.
    Read-only."""
    options = locals()
    s = guarded(lambda: settings_from(options))
    from stagecrawl.crates.sca import AuditRequest, audit_crates

    async def body(stop: GracefulStop) -> int:
        check_format(fmt, AUDIT_FORMATS)
        check_output(output)
        request = AuditRequest(
            targets=targets or [],
            lockfiles=lockfile or [],
            repo=repo,
            tags=tuple(tag or []),
            tags_matching=tags_matching,
            all_tags=all_tags,
            deny=tuple(deny or []),
            ignore=tuple(ignore or []),
            severity_threshold=severity_threshold,
            max_advisory_age=max_advisory_age,
        )
        report = await audit_crates(s, request, stop, config)
        for note in report.notes:
            console.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
        deliver(audit_text(report, fmt, sarif_root), output, report.exit_code)
        return report.exit_code

    run(body, s.grace_period)


def audit_text(
    report: AuditReport, fmt: str, sarif_root: Path | None = None, desc: bool = False
) -> str:
    """The report in `fmt` (every registry's audit); `desc` adds the advisories' details
    (pip-audit's --desc) to the table, json and markdown."""
    from stagecrawl.sca.cyclonedx import audit_cyclonedx
    from stagecrawl.sca.ecosystem import utcnow
    from stagecrawl.sca.markdown import (
        audit_columns,
        audit_footer,
        audit_header,
        audit_markdown,
        audit_rows,
        gate_lines,
        unaudited_columns,
        unaudited_rows,
        unevaluated_columns,
        unevaluated_rows,
    )
    from stagecrawl.sca.report_json import audit_json
    from stagecrawl.sca.sarif import audit_sarif

    if fmt == "json":
        return json_text(audit_json(report, desc))
    if fmt == "sarif":
        return json_text(audit_sarif(report, sarif_root))
    if fmt == "cyclonedx":
        return json_text(audit_cyclonedx(report, str(uuid.uuid4()), utcnow()))
    if fmt == "markdown":
        return audit_markdown(report, desc)
    lines = [audit_header(report) + "\n"]
    lines += [f"not audited: {problem}\n" for problem in report.problems]
    if report.hits:
        lines.append(table_text(audit_columns(report, desc), audit_rows(report, desc)))
    else:
        lines.append("no advisory hits the audited versions\n")
    if report.unaudited:
        lines.append("not audited:\n")
        lines.append(table_text(unaudited_columns(report), unaudited_rows(report)))
    if report.unevaluated:
        lines.append("advisories not fully evaluated:\n")
        lines.append(table_text(unevaluated_columns(report), unevaluated_rows(report)))
    lines += [line + "\n" for line in gate_lines(report)]
    lines.append(audit_footer(report) + "\n")
    return "".join(lines)


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
    from stagecrawl.crates.sca import backfill_licenses

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


LICENSE_FORMATS = ("table", "json", "markdown")


def licenses_check(
    targets: Targets = None,
    lockfile: Lockfiles = None,
    repo: Repo = None,
    tag: Tags = None,
    tags_matching: TagsMatching = None,
    all_tags: AllTags = False,
    allow: Annotated[
        list[str] | None,
        typer.Option(
            "--allow",
            help="Allowed licenses (comma-separated SPDX ids, 'ID WITH EXCEPTION' too).",
        ),
    ] = None,
    deny: Annotated[
        list[str] | None, typer.Option("--deny", help="Denied SPDX ids; deny wins over allow.")
    ] = None,
    exception: Annotated[
        list[str] | None,
        typer.Option(
            "--exception", help="CRATE=LICENSE or CRATE@VERSION=LICENSE: for that crate only."
        ),
    ] = None,
    fmt: Annotated[
        str, typer.Option("--format", help="table, json or markdown (to stdout or --output).")
    ] = "table",
    output: OutputOption = None,
    config: ConfigOption = None,
    cache_dir: CacheDir = None,
    index_url: IndexUrl = None,
    db: Db = None,
) -> None:
    """Licenses the policy does not accept (cargo-deny's semantics): of a project's resolved
    crates (--lockfile, --repo with its tags, NAME@VERSION; a version not collected fails as
    unknown), or of every collected version. Exit 1 when any. Read-only."""
    options = locals()
    s = guarded(lambda: settings_from(options))
    from stagecrawl.crates.sca import Inputs, check_licenses

    async def body(stop: GracefulStop) -> int:
        check_format(fmt, LICENSE_FORMATS)
        check_output(output)
        inputs = Inputs(
            targets=targets or [],
            lockfiles=lockfile or [],
            repo=repo,
            tags=tuple(tag or []),
            tags_matching=tags_matching,
            all_tags=all_tags,
        )
        result = await check_licenses(
            s, allow or [], deny or [], exception or [], inputs, stop, config
        )
        for note in result.notes:
            console.print(f"[yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
        deliver(license_text(result, fmt), output, result.exit_code)
        return result.exit_code

    run(body, s.grace_period)


def license_text(result: LicenseCheck, fmt: str) -> str:
    from stagecrawl.sca.markdown import (
        LICENSE_COLUMNS,
        license_footer,
        license_markdown,
        license_rows,
    )

    if fmt == "json":
        return json_text(
            {
                "versions_checked": result.rows,
                "violations": [
                    {
                        "crate": v.package,
                        "version": v.version,
                        "license": v.license,
                        "expression": v.expression,
                        "reason": v.reason,
                        "found_in": list(v.found_in),
                    }
                    for v in result.violations
                ],
                "problems": result.problems,
                "notes": result.notes,
                "exit_code": result.exit_code,
            }
        )
    if fmt == "markdown":
        return license_markdown(result, "crate")
    text = "".join(f"not checked: {problem}\n" for problem in result.problems)
    if result.violations:
        text += table_text(("crate", *LICENSE_COLUMNS[1:]), license_rows(result))
    return text + license_footer(result) + "\n"


def licenses_import(
    file: Annotated[Path, typer.Argument(help="CSV or JSON: ID, NAME_SHORT, NAME, MAPPING, URL.")],
    db: Db = None,
) -> None:
    """Load a license reference into TB_LICENSE_V2 (upsert by ID)."""
    options = locals()
    s = guarded(lambda: settings_from(options))
    from stagecrawl.sca.reference import import_reference

    def body() -> int:
        count = import_reference(open_database(s), file)
        console.print(f"imported {count} license rows")
        return 0

    raise typer.Exit(guarded(body))
