"""The ecosystem-neutral SCA core: license expressions and policy, the license reference and
matcher, the AI classifier client, OSV (model, ranges, reader, import), audit, and the report
writers (JSON, SARIF, CycloneDX). Imports no registry package: a registry plugs in its
`Ecosystem` (name, purl type, version order) and its `VulnTables` (stagecrawl.sca.ecosystem).

Modules, by job:
- spdx: the SPDX list, expression trees, `LicenseReader` (lax reading, a registry's loose names)
- reference: TB_LICENSE_V2 (seeded from the SPDX list, or imported)
- matcher: `LicenseMatcher`, `backfill` of a VERSION table's license columns
- policy: `Policy`, `evaluate`, `check_rows` (cargo-deny's semantics)
- ai: `AiLicenseClient`, `backfill_ai`
- ecosystem: `Ecosystem`, `VulnTables`
- osv_ranges, osv_model, osv_read, osv_import: OSV ranges, advisories, reading, storing
- audit: `Package`, `audit`, `AuditReport`
- report_json, sarif, cyclonedx, cvss_rating: the writers
"""
