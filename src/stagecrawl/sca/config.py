"""The gate policy of the SCA commands, from a config file and the command line.

Read with the standard library's `tomllib`, from:
- `stagecrawl.toml` (found upward from the working directory, or `--config FILE`): the native
  format, documented in docs/sca.md; osv-scanner's `[[IgnoredVulns]]` (`id`, `reason`,
  `ignoreUntil`) is read in it too;
- `.cargo/audit.toml` (cargo-audit): `[advisories] ignore`, `informational_warnings` are not
  gates, `severity_threshold`, `[output] deny`;
- `deny.toml` (cargo-deny): `[advisories] ignore` (ids or `{ id, reason }`), `unmaintained` /
  `unsound` (any scope but "none" denies), `yanked = "deny"`, `maximum-db-staleness`
  (`P90D`); `[licenses] allow`, `exceptions`, `clarify`.

A file that cannot be read as the format says is a ConfigError of one line naming the file,
the line and the key. Flags override the file (the caller merges them).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from stagecrawl.errors import ConfigError

NATIVE_NAME = "stagecrawl.toml"
DENY_KINDS = ("unmaintained", "unsound", "notice", "yanked")
SEVERITY_LEVELS = ("none", "low", "medium", "high", "critical")


@dataclass(frozen=True)
class Ignore:
    """An advisory not to fail on: by its id or any alias, with why and until when."""

    id: str
    reason: str | None = None
    until: date | None = None  # the last day it is ignored; None: no expiry
    source: str = ""  # file:line, for messages

    def expired(self, today: date) -> bool:
        return self.until is not None and today > self.until


@dataclass(frozen=True)
class PackageRule:
    """A per-package license rule: extra licenses allowed (exception) or a license
    expression that replaces the registry's (clarify). `version` is a version requirement
    in the registry's syntax (None: every version)."""

    name: str
    version: str | None
    licenses: tuple[str, ...] = ()  # exceptions: allowed licensees
    expression: str | None = None  # clarify: the expression to use
    source: str = ""


@dataclass(frozen=True)
class GateConfig:
    """Everything that decides whether a gate passes. None / empty: not set."""

    ignores: tuple[Ignore, ...] = ()
    severity_threshold: float | str | None = None  # CVSS base score, or a level name
    deny_kinds: frozenset[str] = frozenset()
    max_advisory_age: timedelta | None = None
    # pip-audit's --strict: an input not audited (not from the registry, not a pin) or an
    # advisory not fully evaluated fails the gate instead of being a warning
    strict: bool = False
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    exceptions: tuple[PackageRule, ...] = ()
    clarify: tuple[PackageRule, ...] = ()
    files: tuple[str, ...] = ()  # the files read, in order
    notes: tuple[str, ...] = ()  # keys read but not applied, said once

    def merged(self, other: GateConfig) -> GateConfig:
        """`other` over `self`: set values of `other` win; lists of ignores and rules add."""
        return GateConfig(
            ignores=self.ignores + other.ignores,
            severity_threshold=(
                other.severity_threshold
                if other.severity_threshold is not None
                else self.severity_threshold
            ),
            deny_kinds=self.deny_kinds | other.deny_kinds,
            max_advisory_age=other.max_advisory_age or self.max_advisory_age,
            strict=other.strict or self.strict,
            allow=other.allow or self.allow,
            deny=other.deny or self.deny,
            exceptions=self.exceptions + other.exceptions,
            clarify=self.clarify + other.clarify,
            files=self.files + other.files,
            notes=self.notes + other.notes,
        )


class _File:
    """One TOML file being read: its text (for line numbers) and its data."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read: {exc}") from None
        try:
            self.data = tomllib.loads(self.text)
        except (tomllib.TOMLDecodeError, RecursionError) as exc:  # Recursion: nested too deeply
            raise ConfigError(f"{path}: not TOML: {exc}") from None

    def line_of(self, table: str, key: str) -> int | None:
        """The line where `key` is set in `[table]` (or `[[table]]`), or the table's header."""
        current = ""
        header_line: int | None = None
        pattern = re.compile(rf"^\s*[\"']?{re.escape(key)}[\"']?\s*=")
        for number, line in enumerate(self.text.splitlines(), start=1):
            stripped = line.strip()
            header = re.match(r"^\[\[?\s*([^\]]+?)\s*\]\]?", stripped)
            if header:
                current = header.group(1).replace('"', "").replace("'", "")
                if current == table and header_line is None:
                    header_line = number
                continue
            if current == table and pattern.match(line):
                return number
            if not table and current == "" and pattern.match(line):
                return number
        return header_line

    def error(self, table: str, key: str, message: str) -> ConfigError:
        line = self.line_of(table, key.split(".")[0].split("[")[0])
        where = f"{self.path}:{line}" if line else str(self.path)
        dotted = f"{table}.{key}" if table else key
        return ConfigError(f"{where}: {dotted}: {message}")

    def where(self, table: str, key: str, value: str | None = None) -> str:
        """file:line of `key` in `table` — of the line naming `value` in it, when given
        (one entry of a list)."""
        line = self.line_of(table, key)
        if line is not None and value is not None:
            lines = self.text.splitlines()
            for number in range(line, len(lines) + 1):
                if f'"{value}"' in lines[number - 1] or f"'{value}'" in lines[number - 1]:
                    line = number
                    break
        return f"{self.path}:{line}" if line else str(self.path)


def _table(file: _File, name: str) -> dict[str, Any]:
    value = file.data.get(name, {})
    if not isinstance(value, dict):
        raise file.error("", name, "must be a table")
    return value


def _strings(file: _File, table: str, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise file.error(table, key, "must be a list of strings")
    return tuple(value)


def _unknown(file: _File, table: str, values: dict[str, Any], known: set[str]) -> None:
    for key in values:
        if key not in known:
            raise file.error(table, key, f"unknown key (known: {', '.join(sorted(known))})")


def _until(file: _File, table: str, key: str, value: Any) -> date | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        moment = value if value.tzinfo is None else value.astimezone(UTC).replace(tzinfo=None)
        return moment.date()
    if isinstance(value, date):
        return value
    if isinstance(value, str):
        try:
            return date.fromisoformat(value[:10])
        except ValueError:
            pass
    raise file.error(table, key, f"{value!r} is not a date (YYYY-MM-DD)")


def _ignore_entry(file: _File, table: str, entry: Any, native: bool) -> Ignore:
    if isinstance(entry, str):
        if native:
            raise file.error(table, "ignore", f"{entry!r}: give {{ id, reason }} (and until)")
        return Ignore(entry, source=file.where(table, "ignore", entry))
    if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
        raise file.error(table, "ignore", "each entry is { id = …, reason = … }")
    known = {"id", "reason", "until"} if native else {"id", "reason"}
    _unknown(file, f"{table}.ignore", entry, known) if native else None
    reason = entry.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise file.error(table, "ignore", f"{entry['id']}: reason must be a string")
    if native and not (reason or "").strip():
        raise file.error(table, "ignore", f"{entry['id']}: say why (reason = …)")
    until = _until(file, table, "ignore", entry.get("until"))
    return Ignore(entry["id"], reason, until, file.where(table, "ignore", entry["id"]))


_SCORE = re.compile(r"^\d+(\.\d+)?$")
_ISO_DURATION = re.compile(r"^P(?:(\d+)W)?(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?$")


def parse_threshold(value: Any) -> float | str | None:
    """A CVSS base score (0–10) or a level name, or None when `value` is neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float) and 0 <= value <= 10:
        return float(value)
    if isinstance(value, str):
        if value.lower() in SEVERITY_LEVELS:
            return value.lower()
        if _SCORE.match(value) and 0 <= float(value) <= 10:
            return float(value)
    return None


def parse_duration(value: Any) -> timedelta | None:
    """Days as a number, `30d`, or an ISO 8601 duration (`P90D`, as cargo-deny writes it);
    None when `value` is none of these."""
    try:
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return timedelta(days=value)
        if isinstance(value, str):
            text = value.strip()
            if re.fullmatch(r"\d+d?", text):
                return timedelta(days=int(text.rstrip("d")))
            match = _ISO_DURATION.match(text)
            if match and text not in ("P", "PT"):
                weeks, days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
                return timedelta(
                    weeks=weeks, days=days, hours=hours, minutes=minutes, seconds=seconds
                )
    except OverflowError:  # past timedelta's 999,999,999 days: no duration either
        return None
    return None


def _threshold(file: _File, table: str, key: str, value: Any) -> float | str:
    threshold = parse_threshold(value)
    if threshold is None:
        levels = ", ".join(SEVERITY_LEVELS)
        raise file.error(table, key, f"{value!r} is not a CVSS score (0–10) or one of {levels}")
    return threshold


def _duration(file: _File, table: str, key: str, value: Any) -> timedelta:
    duration = parse_duration(value)
    if duration is None:
        raise file.error(table, key, f"{value!r} is not a number of days, '30d' or 'P30D'")
    return duration


def _deny_kinds(file: _File, table: str, key: str, value: Any) -> frozenset[str]:
    kinds = _strings(file, table, key, value)
    unknown = [k for k in kinds if k not in (*DENY_KINDS, "warnings")]
    if unknown:
        raise file.error(table, key, f"{unknown[0]!r} is not one of {', '.join(DENY_KINDS)}")
    return frozenset(DENY_KINDS if "warnings" in kinds else kinds)


def _package_rules(
    file: _File, table: str, key: str, value: Any, kind: str
) -> tuple[PackageRule, ...]:
    if not isinstance(value, list):
        raise file.error(table, key, "must be a list of tables")
    rules = []
    for entry in value:
        if not isinstance(entry, dict):
            raise file.error(table, key, "each entry is a table")
        spec = entry.get("crate") or entry.get("name") or entry.get("package")
        if not isinstance(spec, str) or not spec.strip():
            raise file.error(table, key, "each entry names its package (crate = …)")
        name, version = _package_spec(spec)
        if isinstance(entry.get("version"), str):
            version = entry["version"]
        source = file.where(table, key, spec)
        if kind == "exceptions":
            allowed = entry.get("allow")
            licenses = _strings(file, table, f"{key}.allow", allowed)
            rules.append(PackageRule(name, version, licenses=licenses, source=source))
        else:
            expression = entry.get("expression")
            if not isinstance(expression, str) or not expression.strip():
                raise file.error(table, key, f"{name}: expression must be a string")
            rules.append(PackageRule(name, version, expression=expression, source=source))
    return tuple(rules)


def _package_spec(spec: str) -> tuple[str, str | None]:
    """cargo-deny's package spec: `name`, `name@1.2.3` (exactly that version) or
    `name:REQ` (a version requirement)."""
    if "@" in spec:
        name, _, version = spec.partition("@")
        return name.strip(), "=" + version.strip()
    if ":" in spec:
        name, _, requirement = spec.partition(":")
        return name.strip(), requirement.strip()
    return spec.strip(), None


def read_native(path: Path) -> GateConfig:
    """stagecrawl.toml (see docs/sca.md)."""
    file = _File(path)
    _unknown(file, "", file.data, {"advisories", "licenses", "IgnoredVulns"})
    advisories = _table(file, "advisories")
    _unknown(
        file,
        "advisories",
        advisories,
        {"ignore", "severity-threshold", "deny", "max-advisory-age", "strict"},
    )
    ignores = []
    raw_ignores = advisories.get("ignore", [])
    if not isinstance(raw_ignores, list):
        raise file.error("advisories", "ignore", "must be a list")
    ignores += [_ignore_entry(file, "advisories", e, native=True) for e in raw_ignores]
    osv = file.data.get("IgnoredVulns", [])
    if not isinstance(osv, list):
        raise file.error("", "IgnoredVulns", "must be [[IgnoredVulns]] tables")
    for entry in osv:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise file.error("IgnoredVulns", "id", "each [[IgnoredVulns]] has an id")
        _unknown(file, "IgnoredVulns", entry, {"id", "reason", "ignoreUntil"})
        until = _until(file, "IgnoredVulns", "ignoreUntil", entry.get("ignoreUntil"))
        reason = entry.get("reason")
        ignores.append(
            Ignore(
                entry["id"],
                reason if isinstance(reason, str) else None,
                until,
                file.where("IgnoredVulns", "id", entry["id"]),
            )
        )
    config = GateConfig(ignores=tuple(ignores), files=(str(path),))
    if "severity-threshold" in advisories:
        threshold = _threshold(
            file, "advisories", "severity-threshold", advisories["severity-threshold"]
        )
        config = replace(config, severity_threshold=threshold)
    if "deny" in advisories:
        config = replace(
            config, deny_kinds=_deny_kinds(file, "advisories", "deny", advisories["deny"])
        )
    if "max-advisory-age" in advisories:
        age = _duration(file, "advisories", "max-advisory-age", advisories["max-advisory-age"])
        config = replace(config, max_advisory_age=age)
    if "strict" in advisories:
        if not isinstance(advisories["strict"], bool):
            raise file.error("advisories", "strict", "must be true or false")
        config = replace(config, strict=advisories["strict"])
    licenses = _table(file, "licenses")
    _unknown(file, "licenses", licenses, {"allow", "deny", "exceptions", "clarify"})
    return replace(config, **_license_fields(file, licenses))


def _license_fields(file: _File, licenses: dict[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if "allow" in licenses:
        fields["allow"] = _strings(file, "licenses", "allow", licenses["allow"])
    if "deny" in licenses:
        fields["deny"] = _strings(file, "licenses", "deny", licenses["deny"])
    if "exceptions" in licenses:
        fields["exceptions"] = _package_rules(
            file, "licenses", "exceptions", licenses["exceptions"], "exceptions"
        )
    if "clarify" in licenses:
        fields["clarify"] = _package_rules(
            file, "licenses", "clarify", licenses["clarify"], "clarify"
        )
    return fields


def read_cargo_audit(path: Path) -> GateConfig:
    """cargo-audit's `.cargo/audit.toml`: `[advisories] ignore` and `severity_threshold`,
    `[output] deny`. Its other keys (database, target, yanked…) are not gates here."""
    file = _File(path)
    advisories = _table(file, "advisories")
    ignores = advisories.get("ignore", [])
    if not isinstance(ignores, list):
        raise file.error("advisories", "ignore", "must be a list of advisory ids")
    config = GateConfig(
        ignores=tuple(_ignore_entry(file, "advisories", e, native=False) for e in ignores),
        files=(str(path),),
    )
    if advisories.get("severity_threshold") is not None:
        threshold = _threshold(
            file, "advisories", "severity_threshold", advisories["severity_threshold"]
        )
        config = replace(config, severity_threshold=threshold)
    output = _table(file, "output")
    if "deny" in output:
        config = replace(config, deny_kinds=_deny_kinds(file, "output", "deny", output["deny"]))
    return config


def read_cargo_deny(path: Path) -> GateConfig:
    """cargo-deny's `deny.toml`, `[advisories]` and `[licenses]` as cargo-deny ≥ 0.18 reads
    them: `licenses.deny` is deprecated there and ignored (noted); `unmaintained` and
    `unsound` deny in any scope but "none" (their default is "all"; a lock file alone does
    not say which crates are direct dependencies, so "workspace" and "transitive" are read
    as "all"); `yanked = "deny"` denies yanked versions."""
    file = _File(path)
    advisories = _table(file, "advisories")
    ignores = []
    notes = []
    raw = advisories.get("ignore", [])
    if not isinstance(raw, list):
        raise file.error("advisories", "ignore", "must be a list")
    for entry in raw:
        if isinstance(entry, str) and not re.match(r"^[A-Z]+-", entry):
            notes.append(f"{file.where('advisories', 'ignore')}: yanked-crate ignore {entry!r}")
            continue
        ignores.append(_ignore_entry(file, "advisories", entry, native=False))
    kinds = set()
    for kind in ("unmaintained", "unsound"):
        scope = advisories.get(kind, "all")
        if scope not in ("all", "workspace", "transitive", "none"):
            raise file.error(
                "advisories", kind, f"{scope!r} is not all, workspace, transitive or none"
            )
        if scope != "none":
            kinds.add(kind)
    yanked = advisories.get("yanked", "warn")
    if yanked not in ("deny", "warn", "allow"):
        raise file.error("advisories", "yanked", f"{yanked!r} is not deny, warn or allow")
    if yanked == "deny":
        kinds.add("yanked")
    config = GateConfig(ignores=tuple(ignores), deny_kinds=frozenset(kinds), files=(str(path),))
    age = advisories.get("maximum-db-staleness")
    if age is not None:
        config = replace(
            config,
            max_advisory_age=_duration(file, "advisories", "maximum-db-staleness", age),
        )
    licenses = _table(file, "licenses")
    if "deny" in licenses:
        notes.append(
            f"{file.where('licenses', 'deny')}: licenses.deny is deprecated in cargo-deny"
            " and not applied"
        )
    fields = _license_fields(file, {k: v for k, v in licenses.items() if k != "deny"})
    return replace(config, notes=tuple(notes), **fields)


def find_native(start: Path) -> Path | None:
    """stagecrawl.toml in `start` or the nearest folder above it."""
    for folder in (start, *start.parents):
        candidate = folder / NATIVE_NAME
        if candidate.is_file():
            return candidate
    return None


def read_config(path: Path) -> GateConfig:
    """A config file by its name: deny.toml, audit.toml (cargo-audit) or the native format."""
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file")
    if path.name == "deny.toml":
        return read_cargo_deny(path)
    if path.name == "audit.toml":
        return read_cargo_audit(path)
    return read_native(path)


def discover(cwd: Path, explicit: Path | None, cargo: bool = True) -> GateConfig:
    """The config of a run: `--config FILE` alone when given; else stagecrawl.toml found upward
    from `cwd`, or failing that (with `cargo`: a Rust project's audit) the project's deny.toml
    and .cargo/audit.toml (in that order, merged: what the cargo tools already read)."""
    if explicit is not None:
        return read_config(explicit)
    native = find_native(cwd)
    if native is not None:
        return read_native(native)
    config = GateConfig()
    if not cargo:
        return config
    for folder in (cwd, *cwd.parents):
        deny, audit = folder / "deny.toml", folder / ".cargo" / "audit.toml"
        if deny.is_file() or audit.is_file():
            if deny.is_file():
                config = config.merged(read_cargo_deny(deny))
            if audit.is_file():
                config = config.merged(read_cargo_audit(audit))
            break
    return config
