"""An AuditReport as SARIF 2.1.0, as code-scanning dashboards read it.

Hand-written dicts rather than an object model (sarif-om): the format is a small fixed mapping
of fields, and the tests validate the output against the published 2.1.0 JSON schema, which is
the check that matters.
"""

from __future__ import annotations

import hashlib
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


def _locations(report: AuditReport, hit: Hit) -> list[dict[str, Any]]:
    package = hit.package
    logical = {"fullyQualifiedName": f"{package.name}@{package.version}", "kind": "package"}
    files = []
    for source in package.sources:
        if source in ("argument", "collected"):
            continue
        # A repo@tag source is that tag's lock file, at the top of the repository.
        lock = report.ecosystem.lockfile_name
        uri = lock if lock and "@" in source and not source.endswith(lock) else source
        physical: dict[str, Any] = {"artifactLocation": {"uri": uri.replace("\\", "/")}}
        line = package.lines.get(source)
        if line:
            physical["region"] = {"startLine": line}
        files.append({"physicalLocation": physical, "logicalLocations": [logical]})
    return files or [{"logicalLocations": [logical]}]


def audit_sarif(report: AuditReport) -> dict[str, Any]:
    """SARIF 2.1.0 as code-scanning dashboards read it: one rule per advisory, one result per
    (package version, advisory), `security-severity` from the CVSS base score."""
    rules: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    results = []
    for hit in report.hits:
        advisory = hit.advisory
        level = _level(report, hit)
        if advisory.osv_id not in index:
            index[advisory.osv_id] = len(rules)
            rules.append(_rule(advisory, level))
        fingerprint = hashlib.sha256(
            f"{hit.package.name}@{hit.package.version}:{advisory.osv_id}".encode()
        ).hexdigest()
        results.append(
            {
                "ruleId": advisory.osv_id,
                "ruleIndex": index[advisory.osv_id],
                "level": level,
                "message": {"text": _message(hit)},
                "locations": _locations(report, hit),
                "partialFingerprints": {"stagecrawlPackageAdvisory/v1": fingerprint},
            }
        )
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "stagecrawl", "version": __version__, "rules": rules}},
                "results": results,
                "invocations": [
                    {
                        "executionSuccessful": not report.problems,
                        "toolExecutionNotifications": [
                            {"level": "error", "message": {"text": problem}}
                            for problem in report.problems
                        ],
                    }
                ],
            }
        ],
    }
