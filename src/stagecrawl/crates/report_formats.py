"""Pure renderers of an AuditReport: JSON, SARIF 2.1.0 and CycloneDX 1.6, each a dict that the
command prints as one JSON document.

Hand-written dicts rather than an object model (sarif-om, cyclonedx-python-lib): each format
is a small fixed mapping of fields, and the tests validate the output against each format's
published JSON schema, which is the check that matters.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from cvss import CVSS2, CVSS3, CVSS4
from cvss.exceptions import CVSSError

from stagecrawl import __version__
from stagecrawl.crates.audit import AuditReport, Hit, StoredAdvisory

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
CYCLONEDX_SCHEMA = "http://cyclonedx.org/schema/bom-1.6.schema.json"


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.strftime("%Y-%m-%dT%H:%M:%SZ")


def cvss_rating(vector: str | None) -> tuple[float, str, str] | None:
    """(base score, severity in lower case, CycloneDX method) of a CVSS vector, or None."""
    if not vector:
        return None
    try:
        if vector.startswith("CVSS:4."):
            v4 = CVSS4(vector)
            return float(v4.base_score), str(v4.severity).lower(), "CVSSv4"
        if vector.startswith("CVSS:3."):
            v3 = CVSS3(vector)
            method = "CVSSv31" if vector.startswith("CVSS:3.1") else "CVSSv3"
            return float(v3.base_score), str(v3.severities()[0]).lower(), method
        v2 = CVSS2(vector)
        return float(v2.base_score), str(v2.severities()[0]).lower(), "CVSSv2"
    except (CVSSError, ValueError, KeyError):
        return None


def hit_json(hit: Hit) -> dict[str, Any]:
    advisory = hit.advisory
    return {
        "crate": hit.package.name,
        "version": hit.package.version,
        "id": advisory.osv_id,
        "aliases": list(advisory.aliases),
        "informational": advisory.informational,
        "summary": advisory.summary,
        "severity": advisory.severity,
        "ranges": advisory.affected.range_texts(),
        "patched": advisory.affected.patched(),
        "functions": advisory.affected.functions,
        "url": advisory.url,
        "found_in": list(hit.package.sources),
    }


def audit_json(report: AuditReport) -> dict[str, Any]:
    return {
        "database": {
            "advisories": report.advisories_stored,
            "newest_modified": _time(report.advisories_modified),
        },
        "packages": len(report.packages),
        "packages_not_from_crates_io": report.skipped,
        "vulnerabilities": len(report.vulnerabilities),
        "warnings": len(report.warnings),
        "hits": [hit_json(h) for h in report.hits],
        "problems": report.problems,
        "exit_code": report.exit_code,
    }


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


def _locations(hit: Hit) -> list[dict[str, Any]]:
    package = hit.package
    logical = {"fullyQualifiedName": f"{package.name}@{package.version}", "kind": "package"}
    files = []
    for source in package.sources:
        if source in ("argument", "collected"):
            continue
        # A repo@tag source is that tag's Cargo.lock, at the top of the repository.
        uri = "Cargo.lock" if "@" in source and not source.endswith("Cargo.lock") else source
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
                "locations": _locations(hit),
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


def _licenses(report: AuditReport, key: tuple[str, str]) -> list[dict[str, Any]]:
    expression, raw = report.licenses.get(key, (None, None))
    if expression:
        return [{"expression": expression}]
    if raw:
        return [{"license": {"name": raw}}]
    return []


def _reference(alias: str) -> dict[str, Any]:
    if alias.startswith("CVE-"):
        source = {"name": "NVD", "url": f"https://nvd.nist.gov/vuln/detail/{alias}"}
    elif alias.startswith("GHSA-"):
        source = {"name": "GitHub", "url": f"https://github.com/advisories/{alias}"}
    elif alias.startswith("RUSTSEC-"):
        source = {"name": "RustSec", "url": f"https://rustsec.org/advisories/{alias}.html"}
    else:
        source = {"name": "OSV", "url": f"https://osv.dev/vulnerability/{alias}"}
    return {"id": alias, "source": source}


def audit_cyclonedx(report: AuditReport, serial: str, timestamp: datetime) -> dict[str, Any]:
    """A CycloneDX 1.6 BOM of the audited packages (purl `pkg:cargo/NAME@VERSION`, licenses
    as SPDX expressions where collected) with the advisories that affect them. `serial` is a
    UUID; the caller passes it and the time so the renderer stays pure."""
    components = []
    for package in report.packages:
        component: dict[str, Any] = {
            "type": "library",
            "bom-ref": package.purl,
            "name": package.name,
            "version": package.version,
            "purl": package.purl,
        }
        licenses = _licenses(report, package.key)
        if licenses:
            component["licenses"] = licenses
        components.append(component)
    by_advisory: dict[str, list[Hit]] = {}
    for hit in report.hits:
        by_advisory.setdefault(hit.advisory.osv_id, []).append(hit)
    vulnerabilities = []
    for osv_id, hits in by_advisory.items():
        advisory = hits[0].advisory
        source_name = "RustSec" if osv_id.startswith("RUSTSEC-") else "OSV"
        entry: dict[str, Any] = {
            "bom-ref": f"advisory:{osv_id}",
            "id": osv_id,
            "source": {"name": source_name, "url": advisory.url},
            "advisories": [{"url": advisory.url}],
            "affects": [
                {
                    "ref": h.package.purl,
                    "versions": [{"version": h.package.version, "status": "affected"}],
                }
                for h in hits
            ],
        }
        if advisory.aliases:
            entry["references"] = [_reference(a) for a in advisory.aliases]
        rating = cvss_rating(advisory.severity)
        if rating is not None and advisory.severity is not None:
            score, severity, method = rating
            entry["ratings"] = [
                {
                    "source": {"name": source_name, "url": advisory.url},
                    "score": score,
                    "severity": severity,
                    "method": method,
                    "vector": advisory.severity,
                }
            ]
        if advisory.summary:
            entry["description"] = advisory.summary
        if advisory.details:
            entry["detail"] = advisory.details
        patched = advisory.affected.patched()
        if patched:
            entry["recommendation"] = f"Upgrade to {' or '.join(patched)}"
        if advisory.published is not None:
            entry["published"] = _time(advisory.published)
        if advisory.modified is not None:
            entry["updated"] = _time(advisory.modified)
        if advisory.informational:
            entry["properties"] = [
                {"name": "stagecrawl:informational", "value": advisory.informational}
            ]
        vulnerabilities.append(entry)
    return {
        "$schema": CYCLONEDX_SCHEMA,
        "bomFormat": "CycloneDX",
        "specVersion": "1.6",
        "serialNumber": f"urn:uuid:{serial}",
        "version": 1,
        "metadata": {
            "timestamp": _time(timestamp),
            "tools": {
                "components": [
                    {"type": "application", "name": "stagecrawl", "version": __version__}
                ]
            },
        },
        "components": components,
        "vulnerabilities": vulnerabilities,
    }
