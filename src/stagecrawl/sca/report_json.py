"""An AuditReport as one JSON document (docs/sca.md documents its fields)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from stagecrawl.sca.audit import AuditReport, Hit


def time_text(value: datetime | None) -> str | None:
    return None if value is None else value.strftime("%Y-%m-%dT%H:%M:%SZ")


def hit_json(hit: Hit, package_word: str = "package") -> dict[str, Any]:
    advisory = hit.advisory
    return {
        package_word: hit.package.name,
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
            "newest_modified": time_text(report.advisories_modified),
        },
        "packages": len(report.packages),
        f"packages_not_from_{report.ecosystem.registry_key or 'registry'}": report.skipped,
        "vulnerabilities": len(report.vulnerabilities),
        "warnings": len(report.warnings),
        "hits": [hit_json(h, report.ecosystem.package_word) for h in report.hits],
        "problems": report.problems,
        "not_audited": [{"what": what, "why": why} for what, why in report.unaudited],
        "ignored": [
            {
                **hit_json(hit, report.ecosystem.package_word),
                "reason": ignore.reason,
                "until": None if ignore.until is None else ignore.until.isoformat(),
            }
            for hit, ignore in report.ignored
        ],
        "below_threshold": [
            hit_json(h, report.ecosystem.package_word) for h in report.below_threshold
        ],
        "yanked": [
            {report.ecosystem.package_word: p.name, "version": p.version} for p in report.yanked
        ],
        "gate_failures": report.gate_failures,
        "notes": report.notes,
        "exit_code": report.exit_code,
    }
