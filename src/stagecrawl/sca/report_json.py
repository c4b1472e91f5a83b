"""An AuditReport as one JSON document (docs/sca.md documents its fields)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from stagecrawl.sca.audit import AuditReport, Hit, Unaudited, Unevaluated


def time_text(value: datetime | None) -> str | None:
    return None if value is None else value.strftime("%Y-%m-%dT%H:%M:%SZ")


def hit_json(hit: Hit, package_word: str = "package", desc: bool = False) -> dict[str, Any]:
    """One hit; `desc` adds the advisory's `details` (pip-audit's --desc)."""
    advisory = hit.advisory
    document = {
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
    if desc:
        document["details"] = advisory.details
    return document


def unaudited_json(item: Unaudited, package_word: str = "package") -> dict[str, Any]:
    return {
        package_word: item.name,
        "version": item.version,
        "found_in": item.source,
        "reason": item.reason,
        "fails_without_strict": item.fails,
    }


def unevaluated_json(item: Unevaluated, package_word: str = "package") -> dict[str, Any]:
    return {
        package_word: item.package.name,
        "version": item.package.version,
        "id": item.osv_id,
        "reasons": list(item.reasons),
        "found_in": list(item.package.sources),
    }


def audit_json(report: AuditReport, desc: bool = False) -> dict[str, Any]:
    """The report as one JSON document; `desc` adds each advisory's details to its hits."""
    word = report.ecosystem.package_word
    return {
        "database": {
            "advisories": report.advisories_stored,
            "newest_modified": time_text(report.advisories_modified),
        },
        "packages": len(report.packages),
        f"packages_not_from_{report.ecosystem.registry_key or 'registry'}": report.skipped,
        "vulnerabilities": len(report.vulnerabilities),
        "warnings": len(report.warnings),
        "hits": [hit_json(h, word, desc) for h in report.hits],
        "problems": report.problems,
        "not_audited": [unaudited_json(u, word) for u in report.unaudited],
        "not_fully_evaluated": [unevaluated_json(e, word) for e in report.unevaluated],
        "strict": report.strict,
        "ignored": [
            {
                **hit_json(hit, word, desc),
                "reason": ignore.reason,
                "until": None if ignore.until is None else ignore.until.isoformat(),
            }
            for hit, ignore in report.ignored
        ],
        "below_threshold": [hit_json(h, word, desc) for h in report.below_threshold],
        "yanked": [{word: p.name, "version": p.version} for p in report.yanked],
        "gate_failures": report.gate_failures + report.strict_failures,
        "notes": report.notes,
        "exit_code": report.exit_code,
    }
