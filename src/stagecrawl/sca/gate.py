"""The audit gate: what of an audit fails the run, from the config file and the flags.

- an ignore (by advisory id or any alias) takes the hits of that advisory out of the failing
  findings and lists them as ignored with the reason; an ignore past its `until` date no
  longer ignores and fails the gate, saying so; an ignore that matches no hit is reported;
- a severity threshold (a CVSS base score, or a level: none, low, medium, high, critical)
  sets aside hits whose advisory has a CVSS rating below it (cargo-audit's rule: an advisory
  without a rating is never below it);
- the informational kinds named in `deny` (unmaintained, unsound, notice, yanked) fail;
- a maximum advisory-data age fails the gate when the newest stored advisory change is older
  (an import that stopped running must not pass for "all clear");
- `strict` (pip-audit's `--strict`): an input that was not audited (a pin not from the
  registry: git, URL, path, editable) or an advisory that could not be fully evaluated fails
  the gate instead of being a warning.
"""

from __future__ import annotations

from datetime import date, datetime

from stagecrawl.sca.audit import AuditReport, Hit
from stagecrawl.sca.config import SEVERITY_LEVELS, GateConfig, Ignore
from stagecrawl.sca.cvss_rating import cvss_rating


def below(threshold: float | str, vector: str | None) -> bool:
    rating = cvss_rating(vector)
    if rating is None:
        return False
    score, level, _ = rating
    if isinstance(threshold, str):
        known = level if level in SEVERITY_LEVELS else "none"
        return SEVERITY_LEVELS.index(known) < SEVERITY_LEVELS.index(threshold)
    return score < threshold


def apply_gate(report: AuditReport, config: GateConfig, now: datetime) -> None:
    """Apply `config` to `report` in place: ignored and below-threshold hits leave
    `report.hits` for `report.ignored` / `report.below_threshold`; the deny kinds join
    `report.deny`; expired ignores and stale data go to `report.gate_failures`, unused
    ignores and the config's notes to `report.notes`."""
    today: date = now.date()
    active: list[Ignore] = []
    for ignore in config.ignores:
        if ignore.expired(today):
            why = f" ({ignore.reason})" if ignore.reason else ""
            report.gate_failures.append(
                f"the ignore of {ignore.id}{why} expired on {ignore.until} ({ignore.source})"
            )
        else:
            active.append(ignore)
    used: set[int] = set()
    kept: list[Hit] = []
    for hit in report.hits:
        names = {hit.advisory.osv_id, *hit.advisory.aliases}
        match = next((i for i, ignore in enumerate(active) if ignore.id in names), None)
        if match is not None:
            used.add(match)
            report.ignored.append((hit, active[match]))
        elif config.severity_threshold is not None and below(
            config.severity_threshold, hit.advisory.severity
        ):
            report.below_threshold.append(hit)
        else:
            kept.append(hit)
    report.hits = kept
    for position, ignore in enumerate(active):
        if position not in used:
            report.notes.append(
                f"the ignore of {ignore.id} matches no advisory of the audited versions"
                f" ({ignore.source})"
            )
    report.deny = report.deny | config.deny_kinds
    report.strict = report.strict or config.strict
    if config.max_advisory_age is not None:
        newest = report.advisories_modified
        if newest is None or now - newest > config.max_advisory_age:
            age = "of unknown age" if newest is None else f"{(now - newest).days} days old"
            report.gate_failures.append(
                f"the advisory data is {age} (newest change {newest}); the maximum is"
                f" {config.max_advisory_age.days} days: import it again"
            )
    report.notes += list(config.notes)
