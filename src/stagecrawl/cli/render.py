"""The reports of every registry's commands, rendered once: tables for people on stdout, one
JSON document with `--format json` (markdown, SARIF and CycloneDX where the command offers
them), failure reasons as whole lines on stderr. Each speaks the registry's words."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from stagecrawl.cli.common import (
    Format,
    console,
    emit,
    print_table,
    print_waiting,
    show,
)
from stagecrawl.cli.sca_render import table_text
from stagecrawl.kernel.declaration import RegistryDecl

if TYPE_CHECKING:
    from stagecrawl.kernel.lock import LockReport
    from stagecrawl.kernel.phases import CollectReport
    from stagecrawl.kernel.refresh import RefreshRunReport
    from stagecrawl.sca.ai import AiBackfillReport
    from stagecrawl.sca.audit import AuditReport
    from stagecrawl.sca.matcher import BackfillReport
    from stagecrawl.sca.osv_import import ImportReport
    from stagecrawl.sca.policy import LicenseCheck

MAX_REASON_LINES = 20  # per kind; `stagecrawl status` lists every event on a ladder


def line(kind: str, text: str, colour: str = "yellow") -> None:
    """One whole line on stderr (never a wrapped table cell), never read as markup."""
    console.print(f"[{colour}]{kind}:[/] {escape(text)}", highlight=False, soft_wrap=True)


def print_notes(notes: list[str]) -> None:
    for note in notes:
        line("note", note)


def render_collect(
    decl: RegistryDecl, report: CollectReport, fmt: Format, waiting: bool = True
) -> None:
    from stagecrawl.queue.events import COLLECTED, NOT_FOUND, SKIPPED

    w = decl.words

    def tables() -> None:
        seed = report.seed
        if seed is not None and (seed.units or seed.not_found or seed.failed):
            rows: dict[str, object] = {
                f"{w.units} found": len(seed.units),
                "versions seen": sum(seed.units.values()),
                "new events": seed.counts.new,
                "merged events": seed.counts.merged,
                "requeued (resync)": seed.counts.requeued,
                f"not in {w.index}": ", ".join(sorted(seed.not_found)) or 0,
                "on the seed ladder (failed)": len(seed.failed),
            }
            if seed.interrupted:
                rows["returned to the seed queue"] = seed.released
                if seed.given_back:
                    rows["  why"] = seed.given_back
            show("seed", rows)
        summary = report.collect
        rows = {}
        if summary is not None:
            rows = {
                f"{w.units} written": summary.units,
                "collected": summary.outcomes[COLLECTED],
                "skipped (already in VERSION)": summary.outcomes[SKIPPED],
                "not found": summary.outcomes[NOT_FOUND],
                "yanked (collected, flagged)": summary.yanked,
                **{key.replace("_", " "): n for key, n in sorted(summary.counts.items())},
                "failed (on the retry ladder)": summary.failed,
            }
            if summary.waiting_events:
                rows["not attempted (waiting for a pause)"] = summary.waiting_events
            if summary.lost_leases:
                rows[f"{w.units} lost to another worker"] = summary.lost_leases
            if summary.interrupted:
                rows["returned to the queue"] = summary.released
                if summary.given_back:
                    rows["  why"] = summary.given_back
        problems = _problems(report)
        if problems:
            rows[w.problems_row] = sum(map(len, problems.values()))
        for lane, count in sorted(report.requests.items()):
            rows[f"requests ({lane} lane)"] = count
        rows["429s seen"] = sum(report.rate_limited.values())
        if report.ai_calls is not None:
            rows["AI license calls"] = report.ai_calls
            rows["AI license failures (redo: licenses backfill)"] = report.ai_warnings
        if summary is not None:
            rows["wall time"] = f"{summary.wall_seconds:.1f}s"
        show("collect" if summary is not None else "seed traffic", rows)

    emit(fmt, report.as_json(), tables)
    print_reasons(decl, report, waiting)


def _problems(report: CollectReport) -> dict[str, list[str]]:
    problems: dict[str, list[str]] = {}
    if report.seed is not None:
        problems.update(report.seed.problems)
    if report.collect is not None:
        problems.update(report.collect.problems)
    return problems


def print_reasons(decl: RegistryDecl, report: CollectReport, waiting: bool = True) -> None:
    """Why something failed, one whole line per package on stderr, in either format: what a
    user reads first when the exit code is not 0; then the waiting line, unless the caller
    prints its own (`waiting=False`: refresh says what waits in all)."""
    w = decl.words
    lines: list[tuple[str, str]] = []
    seed = report.seed
    if seed is not None:
        lines += [
            ("failed", f"{name}: {reason} (on the seed ladder: the next crawl or collect retries)")
            for name, reason in sorted(seed.failed.items())
        ][:MAX_REASON_LINES]
        if len(seed.failed) > MAX_REASON_LINES:
            lines.append(("failed", f"… and {len(seed.failed) - MAX_REASON_LINES} more seeds"))
    summary = report.collect
    if summary is not None:
        lines += [
            ("failed", f"{name}: {reason} (on the retry ladder)")
            for name, reason in sorted(summary.failures.items())
        ][:MAX_REASON_LINES]
        if len(summary.failures) > MAX_REASON_LINES:
            left = len(summary.failures) - MAX_REASON_LINES
            lines.append(("failed", f"… and {left} more (stagecrawl status lists them)"))
    for name, problems in sorted(_problems(report).items())[:MAX_REASON_LINES]:
        more = f" (+{len(problems) - 10} more)" if len(problems) > 10 else ""
        lines.append(("skipped", f"{name}: {w.problems_line}: {'; '.join(problems[:10])}{more}"))
    for kind, text in lines:
        line(kind, text, "bold red" if kind == "failed" else "yellow")
    if waiting:  # work not attempted: one line, off the retry ladder
        print_waiting(report.waiting, sum(report.requests.values()))


def render_refresh(decl: RegistryDecl, report: RefreshRunReport, fmt: Format) -> None:
    checked, collected = report.refresh, report.collected
    w = decl.words

    def tables() -> None:
        rows: dict[str, object] = {
            f"{w.units} checked": checked.checked,
            "not modified (304)": checked.unchanged["not_modified"],
        }
        for how, n in sorted(checked.unchanged.items()):
            if how != "not_modified":
                rows[how.replace("_", " ")] = n
        rows |= {
            "changed": ", ".join(checked.changed) or 0,
            "new events": checked.new_events,
            "yanked flags changed": checked.yanked_changes,
            f"gone from {w.index}": ", ".join(checked.gone) or 0,
            "failed": len(checked.failed),
        }
        if checked.not_asked.reasons:
            rows["not asked (waiting for a pause)"] = len(checked.not_asked.reasons)
        if checked.problems:
            rows[w.problems_row] = sum(map(len, checked.problems.values()))
        if checked.interrupted:
            rows["not checked (interrupted)"] = checked.not_checked
        show("refresh", rows)
        if collected is not None:
            render_collect(decl, collected, Format.table, waiting=False)

    emit(fmt, report.as_json(), tables)
    for name, reason in sorted(checked.failed.items()):
        line("failed", f"{name}: {reason}", "bold red")
    for name, problems in sorted(checked.problems.items()):
        line("skipped", f"{name}: {w.problems_line}: {'; '.join(problems[:10])}")
    if collected is not None and fmt is Format.json:
        print_reasons(decl, collected, waiting=False)
    # one line for what waits in all: the packages not asked and the events not attempted
    print_waiting(report.waiting, sum(report.requests.values()))


def render_lock(decl: RegistryDecl, report: LockReport, fmt: Format) -> None:
    w = decl.words

    def tables() -> None:
        table = Table(title="lock", title_justify="left")
        columns = ("input", "lock", "packages", f"{w.units}", "new events", "problem")
        for column in columns:
            table.add_column(column, justify="left" if column in ("input", "problem") else "right")
        for r in report.inputs:
            problem = r.error or (
                f"not in {w.index}: {', '.join(r.not_found)}" if r.not_found else ""
            )
            if not problem and r.unpinned:
                problem = f"{len(r.unpinned)} unpinned (not guessed)"
            cells = (
                r.label,
                r.kind,
                str(r.packages),
                str(len(r.units)),
                str(r.new_events),
                problem,
            )
            table.add_row(*(escape(cell) for cell in cells))
        print_table(table)
        document = report.as_json()
        show(
            "lock totals",
            {
                "inputs": len(report.inputs),
                f"unique {w.units}": document[f"unique_{w.units}"],
                "new events": document["new_events"],
                "inputs failed": sum(1 for r in report.inputs if r.error),
            },
        )

    emit(fmt, report.as_json(), tables)
    for r in report.inputs:
        if r.error:
            line("failed", r.error, "bold red")
        for name, reason in sorted(r.index_failed.items())[:MAX_REASON_LINES]:
            line(
                "index failed",
                f"{r.label}: {name}: {reason} (its pinned versions are registered; collect asks"
                f" {w.index} again)",
            )
        for what, reason in sorted(r.rejected.items())[:MAX_REASON_LINES]:
            line("rejected", f"{r.label}: {what}: {reason} (never registered)")
        for text in r.unpinned[:MAX_REASON_LINES]:
            line("unpinned", f"{r.label}: {text} (not registered: no resolver)")


def public(report: object) -> dict[str, object]:
    """A report dataclass as JSON-ready data (nested dataclasses included)."""
    assert is_dataclass(report) and not isinstance(report, type)
    return asdict(report)


def json_text(document: object) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False, default=str) + "\n"


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


def vulns_text(decl: RegistryDecl, report: ImportReport, fmt: str, scope: str) -> str:
    w = decl.words
    from stagecrawl.kernel.registry import load as load_registry

    primary = load_registry(decl).ecosystem.primary_prefix.rstrip("-")
    rows = {
        "advisories read": report.advisories,
        f"GHSA duplicates merged into {primary}": report.duplicates_merged,
        "entries skipped (too large)": report.read.skipped_too_large,
        "entries skipped (not OSV JSON)": report.read.skipped_invalid,
        "malformed (skipped, reported)": len(report.problems),
        "unreadable parts (kept, warned)": len(report.warnings),
        "informational (unmaintained, unsound…)": report.informational,
        f"advisory × {w.unit} pairs (RAW)": report.pairs,
        f"pairs in scope for V1 ({scope})": report.in_scope,
        "RAW rows written": report.raw_written,
        "unchanged (not newer)": report.unchanged,
        "V1 rows (CVE)": report.v1_rows,
        "withdrawn": report.withdrawn,
        "collected versions hit": report.hits,
    }
    # a record skipped whole fails the import; a part that cannot be read is a warning (the
    # record is kept, and an audit says it could not evaluate it fully): one line says both
    said = [*report.problems, *report.warnings]
    if said:
        what = f"{len(report.problems)} records skipped, {len(report.warnings)} parts kept"
        shown = "; ".join(said[:MAX_REASON_LINES])
        more = f" (+{len(said) - MAX_REASON_LINES} more)" if len(said) > MAX_REASON_LINES else ""
        colour = "bold red" if report.problems else "yellow"
        line(f"{len(said)} malformed advisory parts ({what})", shown + more, colour)
    return summary_text(fmt, "vulns", rows, public(report))


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
    lines += [text + "\n" for text in gate_lines(report)]
    lines.append(audit_footer(report) + "\n")
    return "".join(lines)


def license_text(decl: RegistryDecl, result: LicenseCheck, fmt: str) -> str:
    from stagecrawl.sca.markdown import (
        LICENSE_COLUMNS,
        license_footer,
        license_markdown,
        license_rows,
    )

    unit = decl.words.unit
    if fmt == "json":
        return json_text(
            {
                "versions_checked": result.rows,
                "violations": [
                    {
                        unit: v.package,
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
        return license_markdown(result, unit)
    text = "".join(f"not checked: {problem}\n" for problem in result.problems)
    if result.violations:
        text += table_text((unit, *LICENSE_COLUMNS[1:]), license_rows(result))
    return text + license_footer(result) + "\n"


def render_backfill(
    report: BackfillReport, ai_report: AiBackfillReport | None, fmt: Format
) -> None:
    document: dict[str, Any] = public(report)
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
