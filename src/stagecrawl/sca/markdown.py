"""Reports as Markdown (a pull-request comment) and the rows every tabular format shares."""

from __future__ import annotations

from collections.abc import Sequence

from stagecrawl.sca.audit import AuditReport
from stagecrawl.sca.policy import LicenseCheck

AUDIT_COLUMNS = ("advisory", "version", "id", "aliases", "kind", "patched", "summary")


def audit_columns(report: AuditReport) -> tuple[str, ...]:
    return (report.ecosystem.package_word, *AUDIT_COLUMNS[1:])


def audit_rows(report: AuditReport) -> list[tuple[str, ...]]:
    return [
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


def audit_header(report: AuditReport) -> str:
    as_of = report.advisories_modified or "?"
    return (
        f"{len(report.packages)} packages against {report.advisories_stored} stored advisories"
        f" (newest change {as_of})"
    )


def gate_lines(report: AuditReport) -> list[str]:
    """What the gate did, one line each: failures first (they decide the exit code)."""
    lines = [f"gate failed: {failure}" for failure in report.gate_failures]
    for hit, ignore in report.ignored:
        until = f", until {ignore.until}" if ignore.until else ""
        why = ignore.reason or "no reason given"
        lines.append(
            f"ignored: {hit.advisory.osv_id} in {hit.package.name} {hit.package.version}"
            f" ({why}{until})"
        )
    lines += [
        f"below the severity threshold: {h.advisory.osv_id} in {h.package.name} {h.package.version}"
        for h in report.below_threshold
    ]
    verdict = "denied" if report.yanked_denied else "warning"
    lines += [f"yanked ({verdict}): {p.name} {p.version}" for p in report.yanked]
    return lines


def audit_footer(report: AuditReport) -> str:
    return (
        f"{len(report.vulnerabilities)} vulnerabilities, {len(report.warnings)} warnings"
        " (informational)"
    )


LICENSE_COLUMNS = ("package", "version", "license", "reason")


def license_rows(check: LicenseCheck) -> list[tuple[str, ...]]:
    return [
        (v.package, v.version, v.expression or v.license or "", v.reason) for v in check.violations
    ]


def license_footer(check: LicenseCheck) -> str:
    return f"{check.rows} versions checked, {len(check.violations)} not accepted"


def _cell(text: str) -> str:
    # A pipe ends a cell and a newline ends the row: both escaped, nothing cut.
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", "<br>")


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = [
        "| " + " | ".join(_cell(c) for c in columns) + " |",
        "|" + "|".join("---" for _ in columns) + "|",
    ]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def audit_markdown(report: AuditReport) -> str:
    parts = [f"## Advisories\n\n{audit_header(report)}\n"]
    for problem in report.problems:
        parts.append(f"- **not audited:** {_cell(problem)}")
    if report.problems:
        parts.append("")
    if report.hits:
        columns = audit_columns(report)
        rows = [
            (*row[:2], f"[{row[2]}]({h.advisory.url})", *row[3:])
            for row, h in zip(audit_rows(report), report.hits, strict=True)
        ]
        parts.append(markdown_table(columns, rows))
    else:
        parts.append("No advisory hits the audited versions.\n")
    gate = gate_lines(report)
    if gate:
        parts.append("\n".join(f"- {_cell(line)}" for line in gate) + "\n")
    parts.append(f"**{audit_footer(report)}**\n")
    return "\n".join(parts)


def license_markdown(check: LicenseCheck, package_word: str = "package") -> str:
    parts = ["## Licenses\n"]
    if check.problems:
        parts.append("\n".join(f"- **not checked:** {_cell(p)}" for p in check.problems) + "\n")
    if check.violations:
        parts.append(markdown_table((package_word, *LICENSE_COLUMNS[1:]), license_rows(check)))
    else:
        parts.append("Every license is accepted by the policy.\n")
    parts.append(f"**{license_footer(check)}**\n")
    return "\n".join(parts)
