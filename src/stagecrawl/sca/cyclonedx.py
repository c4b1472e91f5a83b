"""An AuditReport as a CycloneDX 1.6 JSON BOM: the audited packages as components (purl of the
ecosystem's type, licenses as SPDX expressions where collected) and the advisories that hit
them as vulnerabilities.

Hand-written dicts rather than an object model (cyclonedx-python-lib): the tests validate the
output strictly against the published schema, which is the check that matters.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from stagecrawl import __version__
from stagecrawl.sca.audit import AuditReport, Hit
from stagecrawl.sca.cvss_rating import cvss_rating
from stagecrawl.sca.ecosystem import Ecosystem
from stagecrawl.sca.report_json import time_text

CYCLONEDX_SCHEMA = "http://cyclonedx.org/schema/bom-1.6.schema.json"


def _licenses(report: AuditReport, key: tuple[str, str]) -> list[dict[str, Any]]:
    expression, raw = report.licenses.get(key, (None, None))
    if expression:
        return [{"expression": expression}]
    if raw:
        return [{"license": {"name": raw}}]
    return []


def _reference(alias: str, ecosystem: Ecosystem) -> dict[str, Any]:
    if alias.startswith("CVE-"):
        source = {"name": "NVD", "url": f"https://nvd.nist.gov/vuln/detail/{alias}"}
    elif alias.startswith("GHSA-"):
        source = {"name": "GitHub", "url": f"https://github.com/advisories/{alias}"}
    elif ecosystem.source_name(alias) != "OSV":
        source = {"name": ecosystem.database_name, "url": ecosystem.advisory_url(alias)}
    else:
        source = {"name": "OSV", "url": f"https://osv.dev/vulnerability/{alias}"}
    return {"id": alias, "source": source}


def _said(report: AuditReport) -> dict[tuple[str, str | None], list[dict[str, str]]]:
    """The properties that say what was not audited or not fully evaluated, by (package
    key, version): a person reading the BOM sees a component was not checked, and why."""
    ecosystem = report.ecosystem
    said: dict[tuple[str, str | None], list[dict[str, str]]] = {}
    for item in report.unaudited:
        version = None if item.version is None else ecosystem.normalise_version(item.version)
        said.setdefault((ecosystem.product_key(item.name), version), []).extend(
            [
                {"name": "stagecrawl:not-audited", "value": item.reason},
                {"name": "stagecrawl:found-in", "value": item.source},
            ]
        )
    for missed in report.unevaluated:
        said.setdefault(missed.package.key, []).append(
            {
                "name": "stagecrawl:advisory-not-fully-evaluated",
                "value": f"{missed.osv_id}: {'; '.join(missed.reasons)}",
            }
        )
    return said


def audit_cyclonedx(report: AuditReport, serial: str, timestamp: datetime) -> dict[str, Any]:
    """A CycloneDX 1.6 BOM of the audited packages (purl `pkg:TYPE/NAME@VERSION`, the version
    in the ecosystem's one spelling, licenses as SPDX expressions where collected) with the
    advisories that affect them; the inputs that were not audited are components too (without
    a purl when they do not come from the registry), each saying why in its properties.
    `serial` is a UUID; the caller passes it and the time so the renderer stays pure."""
    components = []
    said = _said(report)
    for package in report.packages:
        component: dict[str, Any] = {
            "type": "library",
            "bom-ref": report.purl(package),
            "name": package.name,
            "version": package.version,
            "purl": report.purl(package),
        }
        licenses = _licenses(report, package.key)
        if licenses:
            component["licenses"] = licenses
        properties = said.pop(package.key, [])
        if properties:
            component["properties"] = properties
        components.append(component)
    taken: set[str] = set()
    for item in report.unaudited:
        version = None if item.version is None else report.ecosystem.normalise_version(item.version)
        properties = said.pop((report.ecosystem.product_key(item.name), version), [])
        if not properties:
            continue  # said on the component of that version above, or already listed
        ref = f"not-audited:{item.name}@{version or item.source}"
        if ref in taken:
            continue
        taken.add(ref)
        unaudited: dict[str, Any] = {"type": "library", "bom-ref": ref, "name": item.name}
        if version is not None:
            unaudited["version"] = version
        unaudited["properties"] = properties
        components.append(unaudited)
    root, extra, dependencies = _graph(report)
    components += extra
    by_advisory: dict[str, list[Hit]] = {}
    for hit in report.hits:
        by_advisory.setdefault(hit.advisory.osv_id, []).append(hit)
    vulnerabilities = []
    for osv_id, hits in by_advisory.items():
        advisory = hits[0].advisory
        source_name = report.ecosystem.source_name(osv_id)
        entry: dict[str, Any] = {
            "bom-ref": f"advisory:{osv_id}",
            "id": osv_id,
            "source": {"name": source_name, "url": advisory.url},
            "advisories": [{"url": advisory.url}],
            "affects": [
                {
                    "ref": report.purl(h.package),
                    "versions": [{"version": h.package.version, "status": "affected"}],
                }
                for h in hits
            ],
        }
        if advisory.aliases:
            entry["references"] = [_reference(a, report.ecosystem) for a in advisory.aliases]
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
            entry["published"] = time_text(advisory.published)
        if advisory.modified is not None:
            entry["updated"] = time_text(advisory.modified)
        if advisory.informational:
            entry["properties"] = [
                {"name": "stagecrawl:informational", "value": advisory.informational}
            ]
        vulnerabilities.append(entry)
    metadata: dict[str, Any] = {
        "timestamp": time_text(timestamp),
        "tools": {
            "components": [{"type": "application", "name": "stagecrawl", "version": __version__}]
        },
    }
    if root is not None:
        metadata["component"] = root
    bom: dict[str, Any] = {
        "$schema": CYCLONEDX_SCHEMA,
        "bomFormat": "CycloneDX",
        "specVersion": "1.6",
        "serialNumber": f"urn:uuid:{serial}",
        "version": 1,
        "metadata": metadata,
        "components": components,
    }
    if dependencies:
        bom["dependencies"] = dependencies
    bom["vulnerabilities"] = vulnerabilities
    return bom


def _graph(
    report: AuditReport,
) -> tuple[dict[str, Any] | None, list[dict[str, Any]], list[dict[str, Any]]]:
    """From the lock file's graph: the root component (the project), the components that are
    not from the registry (workspace members, path and git dependencies: no purl), and the
    `dependencies` of every node."""
    graph = report.graph
    if graph is None:
        return None, [], []
    refs: dict[tuple[str, str], str] = {}
    for package in report.packages:
        refs[(package.name, package.version)] = report.purl(package)
    local: list[dict[str, Any]] = []
    root: dict[str, Any]
    for name, version in graph.local:
        refs[(name, version)] = f"local:{name}@{version}"
    if graph.root is not None:
        name, version = graph.root
        root = {
            "type": "application",
            "bom-ref": refs[graph.root],
            "name": name,
            "version": version,
        }
        root_ref = refs[graph.root]
    else:
        root_ref = f"project:{graph.name or 'project'}"
        root = {"type": "application", "bom-ref": root_ref, "name": graph.name or "project"}
    for name, version in graph.local:
        if (name, version) != graph.root:
            local.append(
                {
                    "type": "library",
                    "bom-ref": refs[(name, version)],
                    "name": name,
                    "version": version,
                }
            )
    dependencies = []
    if graph.root is None:
        tops = [n for n in graph.local if not any(n in deps for deps in graph.edges.values())]
        dependencies.append({"ref": root_ref, "dependsOn": sorted(refs[n] for n in tops)})
    for node, ref in sorted(refs.items(), key=lambda item: item[1]):
        wanted = sorted({refs[d] for d in graph.edges.get(node, []) if d in refs})
        dependencies.append({"ref": ref, "dependsOn": wanted})
    return root, local, dependencies
