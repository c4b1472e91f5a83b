"""Reports as Markdown (a pull-request comment) and the rows every tabular format shares."""

from __future__ import annotations

from collections.abc import Sequence

from stagecrawl.sca.audit import AuditReport
from stagecrawl.sca.policy import LicenseCheck

AUDIT_COLUMNS = ("advisory", "version", "id", "aliases", "kind", "patched", "summary")
UNAUDITED_COLUMNS = ("package", "version", "found in", "not audited because")
UNEVALUATED_COLUMNS = ("package", "version", "id", "could not be read")


def audit_columns(report: AuditReport, desc: bool = False) -> tuple[str, ...]:
    """The hit table's header; `desc` adds the advisory's details (pip-audit's --desc)."""
    details = ("details",) if desc else ()
    return (report.ecosystem.package_word, *AUDIT_COLUMNS[1:], *details)


def audit_rows(report: AuditReport, desc: bool = False) -> list[tuple[str, ...]]:
    return [
        (
            h.package.name,
            h.package.version,
            h.advisory.osv_id,
            " ".join(h.advisory.aliases),
            h.advisory.informational or "vulnerability",
            " or ".join(h.advisory.affected.patched()) or "none",
            h.advisory.summary or "",
            *((" ".join((h.advisory.details or "").split()),) if desc else ()),
        )
        for h in report.hits
    ]


def unaudited_columns(report: AuditReport) -> tuple[str, ...]:
    return (report.ecosystem.package_word, *UNAUDITED_COLUMNS[1:])


def unaudited_rows(report: AuditReport) -> list[tuple[str, ...]]:
    """The inputs not audited, and why (the pins a lock takes from git, a URL, a path…)."""
    return [(u.name, u.version or "-", u.source, u.reason) for u in report.unaudited]


def unevaluated_columns(report: AuditReport) -> tuple[str, ...]:
    return (report.ecosystem.package_word, *UNEVALUATED_COLUMNS[1:])


def unevaluated_rows(report: AuditReport) -> list[tuple[str, ...]]:
    """The advisories that could not be fully evaluated for a version (a part unreadable)."""
    return [
        (e.package.name, e.package.version, e.osv_id, "; ".join(e.reasons))
        for e in report.unevaluated
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
    lines += [f"gate failed (strict): {failure}" for failure in report.strict_failures]
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
    text = (
        f"{len(report.vulnerabilities)} vulnerabilities, {len(report.warnings)} warnings"
        " (informational)"
    )
    if report.unaudited:
        text += f", {len(report.unaudited)} not audited"
    if report.unevaluated:
        text += f", {len(report.unevaluated)} advisories not fully evaluated"
    return text


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


def audit_markdown(report: AuditReport, desc: bool = False) -> str:
    """A pull-request comment: the hits (ids linked; `desc` adds the details), what was not
    audited and why, the advisories not fully evaluated, the gate's lines, the counts."""
    parts = [f"## Advisories\n\n{audit_header(report)}\n"]
    for problem in report.problems:
        parts.append(f"- **not audited:** {_cell(problem)}")
    if report.problems:
        parts.append("")
    if report.hits:
        columns = audit_columns(report, desc)
        rows = [
            (*row[:2], f"[{row[2]}]({h.advisory.url})", *row[3:])
            for row, h in zip(audit_rows(report, desc), report.hits, strict=True)
        ]
        parts.append(markdown_table(columns, rows))
    else:
        parts.append("No advisory hits the audited versions.\n")
    if report.unaudited:
        parts.append("### Not audited\n")
        parts.append(markdown_table(unaudited_columns(report), unaudited_rows(report)))
    if report.unevaluated:
        parts.append("### Advisories not fully evaluated\n")
        parts.append(markdown_table(unevaluated_columns(report), unevaluated_rows(report)))
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
