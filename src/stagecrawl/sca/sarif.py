"""An AuditReport as SARIF 2.1.0, as code-scanning dashboards read it.

Hand-written dicts rather than an object model (sarif-om): the format is a small fixed mapping
of fields, and the tests validate the output against the published 2.1.0 JSON schema, which is
the check that matters.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from stagecrawl import __version__
from stagecrawl.sca.audit import AuditReport, Hit, StoredAdvisory
from stagecrawl.sca.cvss_rating import cvss_rating

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _message(hit: Hit) -> str:
    advisory = hit.advisory
    kind = f"{advisory.informational} " if advisory.informational else ""
    patched = advisory.affected.patched()
    upgrade = f"; upgrade to {' or '.join(patched)}" if patched else "; no fixed version"
    summary = f": {advisory.summary}" if advisory.summary else ""
    return (
        f"{hit.package.name} {hit.package.version} is affected by {kind}advisory "
        f"{advisory.osv_id}{summary}{upgrade}"
    )


def _level(report: AuditReport, hit: Hit) -> str:
    return "error" if report.denied(hit) else "warning"


def _rule(advisory: StoredAdvisory, level: str) -> dict[str, Any]:
    rating = cvss_rating(advisory.severity)
    tags = ["security", advisory.informational or "vulnerability", *advisory.aliases]
    properties: dict[str, Any] = {"tags": tags}
    if rating is not None:
        properties["security-severity"] = f"{rating[0]:.1f}"
    text = advisory.summary or advisory.osv_id
    rule: dict[str, Any] = {
        "id": advisory.osv_id,
        "shortDescription": {"text": text},
        "fullDescription": {"text": advisory.details or text},
        "helpUri": advisory.url,
        "help": {"text": f"{text}\n{advisory.url}"},
        "defaultConfiguration": {"level": level},
        "properties": properties,
    }
    return rule


def git_root(path: Path) -> Path | None:
    """The repository a file is in: the nearest folder above it with a `.git`."""
    for folder in path.resolve().parents:
        if (folder / ".git").exists():
            return folder
    return None


def artifact_uri(path: Path, root: Path | None) -> str:
    """`path` relative to `root` (else to its repository's root, else to the working
    directory), as a code-scanning upload maps it; a file outside that root is named alone."""
    base = root or git_root(path) or Path.cwd()
    try:
        return path.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        return path.name


def _locations(report: AuditReport, hit: Hit, root: Path | None) -> list[dict[str, Any]]:
    """Every place the package was found, each a physical location: a lock file at the line
    of its entry; a repo@tag source, the lock file at that repository's top; a version named on
    the command line (or collected), the ecosystem's manifest at the root (docs/sca.md)."""
    package = hit.package
    logical = {"fullyQualifiedName": f"{package.name}@{package.version}", "kind": "package"}
    ecosystem = report.ecosystem
    files = []
    seen: set[tuple[str, int | None]] = set()
    for source in package.sources:
        line = package.lines.get(source)
        if source in ("argument", "collected"):
            uri = ecosystem.manifest_name or ecosystem.lockfile_name or "."
        elif "@" in source and not Path(source).exists():
            uri = ecosystem.lockfile_name or source  # repo@tag: its lock file, at the top
        else:
            uri = artifact_uri(Path(source), root)
        if (uri, line) in seen:
            continue
        seen.add((uri, line))
        physical: dict[str, Any] = {"artifactLocation": {"uri": uri}}
        if line:
            physical["region"] = {"startLine": line}
        files.append({"physicalLocation": physical, "logicalLocations": [logical]})
    return files


def _notifications(report: AuditReport) -> list[dict[str, Any]]:
    """Problems and gate failures (errors); the inputs not audited and the advisories not fully
    evaluated (errors where they fail the gate, warnings otherwise); notes."""

    def notification(level: str, text: str) -> dict[str, Any]:
        return {"level": level, "message": {"text": text}}

    result = [notification("error", t) for t in [*report.problems, *report.gate_failures]]
    for item in report.unaudited:
        level = "error" if item.fails or report.strict else "warning"
        result.append(notification(level, f"not audited: {item.text()}"))
    level = "error" if report.strict else "warning"
    result += [notification(level, e.text()) for e in report.unevaluated]
    result += [notification("note", text) for text in report.notes]
    return result


def audit_sarif(report: AuditReport, root: Path | None = None) -> dict[str, Any]:
    """SARIF 2.1.0 as code-scanning dashboards read it: one rule per advisory, one result per
    (package version, advisory), `security-severity` from the CVSS base score, every result
    with a physical location (lock files relative to `root`); an ignored advisory is a result
    with an accepted suppression carrying the ignore's reason."""
    rules: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    results = []
    ignored = {id(hit): ignore for hit, ignore in report.ignored}
    for hit in report.hits + [h for h, _ in report.ignored]:
        advisory = hit.advisory
        level = _level(report, hit)
        if advisory.osv_id not in index:
            index[advisory.osv_id] = len(rules)
            rules.append(_rule(advisory, level))
        fingerprint = hashlib.sha256(
            f"{hit.package.name}@{hit.package.version}:{advisory.osv_id}".encode()
        ).hexdigest()
        result: dict[str, Any] = {
            "ruleId": advisory.osv_id,
            "ruleIndex": index[advisory.osv_id],
            "level": level,
            "message": {"text": _message(hit)},
            "locations": _locations(report, hit, root),
            "partialFingerprints": {"stagecrawlPackageAdvisory/v1": fingerprint},
        }
        ignore = ignored.get(id(hit))
        if ignore is not None:
            until = f" (until {ignore.until})" if ignore.until else ""
            result["suppressions"] = [
                {
                    "kind": "external",
                    "status": "accepted",
                    "justification": (ignore.reason or "ignored in the config") + until,
                }
            ]
        results.append(result)
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "stagecrawl", "version": __version__, "rules": rules}},
                "results": results,
                "invocations": [
                    {
                        "executionSuccessful": not (
                            report.problems or any(u.fails for u in report.unaudited)
                        ),
                        "toolExecutionNotifications": _notifications(report),
                    }
                ],
            }
        ],
    }
