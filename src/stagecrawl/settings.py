"""One settings object per run: every knob, its flag, its environment variable and its default.

Resolution order for each setting: the command-line flag, then the environment variable, then
the default (Scrapy's settings table is the model). The `Settings` class below IS the table:
each field is one setting, declared once with its type, its one default, its bounds and its
help. Everything else is generated from it: the CLI's options (cli/common.py), the table in
`docs/operations.md` (a test keeps them equal), the checks at the boundary, and the engine
parts built from a resolved object (stagecrawl/components.py, each registry's plug-in). It is a
frozen dataclass so that mypy knows every attribute: `settings.api_rat` is a type error.

This module imports nothing heavy (no HTTP client, no database driver): every command resolves
its settings before it starts, and `stagecrawl --help` must stay fast.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar, get_type_hints

from stagecrawl import secrets
from stagecrawl.errors import ConfigError
from stagecrawl.secrets import mask_url

T = TypeVar("T")


@dataclass(frozen=True)
class Setting:
    """One row of the table (generated from a field of `Settings`)."""

    name: str
    default: Any
    kind: type  # str, int or float
    env: str | None
    flag: str | None
    help: str
    # "url", "redis-url", "db-url", "budgets" (the form of a text value)
    check: str = ""
    secret: bool = False
    minimum: float | None = None  # numbers: the least allowed value
    above: bool = False  # numbers: `minimum` itself is not allowed (a rate of 0)
    maximum: float | None = None  # numbers: the documented upper bound

    def allowed(self) -> str:
        """The bounds as the documentation prints them."""
        if self.minimum is None and self.maximum is None:
            return {
                "url": "http(s) URL",
                "redis-url": "redis://, rediss://, unix:// URL",
                "db-url": "sqlite, mysql, mariadb, postgresql URL",
                "budgets": "N/DURATION,… or none",
            }.get(self.check, "")
        low = "" if self.minimum is None else f"{'>' if self.above else '≥'} {self.minimum:g}"
        high = "" if self.maximum is None else f"≤ {self.maximum:g}"
        return ", ".join(part for part in (low, high) if part)


def _s(
    default: T,
    help: str,
    *,
    env: str | None = "",
    flag: str | None = "",
    check: str = "",
    secret: bool = False,
    minimum: float | None = None,
    above: bool = False,
    maximum: float | None = None,
) -> T:
    """A field of the table: its default, and the rest of its row as field metadata (the name
    and the type come from the field itself)."""
    row = {
        "env": env,
        "flag": flag,
        "help": help,
        "check": check,
        "secret": secret,
        "minimum": minimum,
        "above": above,
        "maximum": maximum,
    }
    made: T = field(default=default, metadata={"setting": row})
    return made


def rate_setting(default: float, help: str, *, flag: str | None = "") -> float:
    """A lane's requests per second: above 0 and at most MAX_RATE (the bound every lane's rate
    shares, declared here once)."""
    return _s(default, help, flag=flag, minimum=0, above=True, maximum=MAX_RATE)


@dataclass(frozen=True, kw_only=True)
class Section:
    """A registry's own settings, declared by the registry (its lanes: where, how fast, with
    which token), beside the core's: the same table, each field a row (`_s`), named
    `KEY.field` in the table and in `Settings.get`, with the environment variable
    `STAGECRAWL_<ENV_PREFIX><FIELD>` and the flag `--field` on the registry's commands."""

    KEY: ClassVar[str] = ""
    ENV_PREFIX: ClassVar[str] = ""
    # Fields that are no lane's and that every command of the registry offers as a flag
    # (Go's --private): the lane filter of a command's flags leaves the others out.
    EVERY_COMMAND: ClassVar[tuple[str, ...]] = ()


S = TypeVar("S", bound=Section)
# A row of a registry's section is declared with the same function.
setting = _s

# Upper bounds: what one process can hold and a registry can take. Above them a value is a
# typo (`--concurrency 10000000` used to allocate 3.3 GB and make no progress).
MAX_RATE = 1_000_000.0  # requests per second on one lane (benchmarks lift limits to it)
MAX_CONCURRENCY = 1024  # units in flight (each holds a unit's data or a connection)
DAY = 86_400.0


@dataclass(frozen=True, kw_only=True)
class Settings:
    """The resolved values of one run: `settings.api_rate`, `settings.db`, …"""

    db: str = _s(
        "sqlite:///stagecrawl.db",
        "database URL (sqlite, mysql+pymysql, postgresql+psycopg)",
        check="db-url",
        secret=True,
    )
    contact: str | None = _s(
        None, "email or URL sent in the User-Agent; required against crates.io, PyPI and Wikidata"
    )
    concurrency: int = _s(
        8,
        "units (crates, projects, modules; requests) processed at once",
        minimum=1,
        maximum=MAX_CONCURRENCY,
    )
    redis_url: str | None = _s(
        None, "Redis for one rate limit shared by every worker", check="redis-url", secret=True
    )
    lease_seconds: float = _s(
        900.0,
        "collect: how long a claim holds without a heartbeat",
        minimum=0,
        above=True,
        maximum=DAY,
    )
    heartbeat_seconds: float = _s(
        5.0,
        "collect: seconds between a worker's heartbeats; silent for 3 of them, it counts as"
        " dead and any live worker takes its leases back",
        flag=None,
        minimum=0,
        above=True,
        maximum=3600,
    )
    claim_ahead: int = _s(
        0,
        "collect: units a worker holds claimed beyond those in progress (0 = the concurrency)",
        flag=None,
        minimum=0,
        maximum=MAX_CONCURRENCY,
    )
    grace_period: float = _s(
        10.0,
        "seconds in-flight work may take to finish after SIGINT/SIGTERM",
        minimum=0,
        maximum=3600,
    )
    commit_batch: int = _s(
        32,
        "collect: units written in one transaction at most (group commit)",
        flag=None,
        minimum=1,
        maximum=10_000,
    )
    commit_bytes: int = _s(
        4_000_000,
        "collect: text of the collected rows waiting for their commit, in bytes at most (a"
        " slow database holds claiming back before memory grows)",
        flag=None,
        minimum=64_000,
        maximum=1_000_000_000,
    )
    commit_linger: float = _s(
        0.05,
        "seconds a partial batch may wait for more results before it is written (never"
        " while nothing else is in flight)",
        flag=None,
        minimum=0,
        maximum=3600,
    )
    outage_seconds: float = _s(
        180.0,
        "how long a lost database or Redis connection is retried (nothing new claimed meanwhile)"
        " before the worker gives back what it can and stops: one line, exit 1",
        flag=None,
        minimum=0,
        above=True,
        maximum=DAY,
    )
    sqlite_memory_mb: float = _s(
        4.0,
        "SQLite: memory the process's connections may use together, MiB, past which their page"
        " caches reuse pages (PRAGMA soft_heap_limit; 0: no bound): each connection's cache"
        " filled as the database grew, so a crawl's peak RSS grew with its length",
        flag=None,
        minimum=0,
        maximum=4096,
    )
    malloc_arenas: int = _s(
        1,
        "glibc malloc arenas the process may use (0: glibc's own bound, 8 a core): each thread"
        " that allocates gets an arena that keeps what it frees, so a crawl's peak RSS grew"
        " with its length; ignored where malloc is not glibc's",
        flag=None,
        minimum=0,
        maximum=64,
    )
    timeout: float = _s(
        15.0,
        "connect and per-read timeout, seconds",
        flag=None,
        minimum=0,
        above=True,
        maximum=3600,
    )
    deadline: float = _s(
        60.0,
        "one whole HTTP exchange (connect + headers + body), seconds",
        flag=None,
        minimum=0,
        above=True,
        maximum=DAY,
    )
    download_deadline: float = _s(
        3600.0,
        "one whole download (OSV archive, database dump), seconds",
        flag=None,
        minimum=0,
        above=True,
        maximum=7 * DAY,
    )
    retries: int = _s(
        3,
        "retries of a transient failure after the first attempt",
        flag=None,
        minimum=0,
        maximum=100,
    )
    max_retry_after: float = _s(
        600.0,
        "longest a request waits on 429s and cooldowns; a longer Retry-After fails at once",
        flag=None,
        minimum=0,
        maximum=DAY,
    )
    max_body_mb: float = _s(
        64.0,
        "largest response body after decompression, MiB",
        flag=None,
        minimum=0,
        above=True,
        maximum=4096,
    )
    ai_license_url: str | None = _s(
        None, "optional AI license classifier (POST); off when unset", check="url"
    )
    ai_rate: float = rate_setting(2.0, "AI classifier lane: requests per second")
    cache_dir: str = _s(
        ".stagecrawl-cache",
        "lock: bare clones of repositories, and private homes of the tools it runs",
        env="STAGECRAWL_CACHE",
    )
    sparql_url: str = _s(
        "https://query.wikidata.org/sparql", "aircraft: Wikidata SPARQL endpoint", check="url"
    )
    entities_url: str = _s(
        "https://www.wikidata.org/w/api.php", "aircraft: Wikidata entity API", check="url"
    )
    sparql_rate: float = rate_setting(1.0, "aircraft: SPARQL lane, requests per second")
    entities_rate: float = rate_setting(5.0, "aircraft: entity API lane, requests per second")
    aircraft_concurrency: int = _s(
        2,
        "aircraft: requests at once (Wikimedia asks for only a few)",
        flag="--concurrency",
        minimum=1,
        maximum=MAX_CONCURRENCY,
    )
    download_rate: float = rate_setting(
        1.0, "OSV and dump download lane: requests per second", flag=None
    )
    # Where each value came from: name -> "flag" | "env" | "default" (not a setting).
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    # Each registry's own section (its lanes' URLs, rates, tokens …), by its key.
    sections: Mapping[str, Section] = field(default_factory=dict, compare=False, repr=False)

    def get(self, name: str) -> Any:
        """A setting by its name in the table (`concurrency`, `crates.index_url`)."""
        if name not in BY_NAME:
            raise AttributeError(name)
        key, dot, attribute = name.partition(".")
        if dot:
            return getattr(self.sections[key], attribute)
        return getattr(self, name)

    def section(self, kind: type[S]) -> S:
        """A registry's resolved section (its defaults when it was not resolved here)."""
        found = self.sections.get(kind.KEY)
        if found is None:
            return kind()
        assert isinstance(found, kind)
        return found

    @classmethod
    def resolve(
        cls, flags: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
    ) -> Settings:
        """Flags (None = not given), then the environment, then the defaults; every value
        is checked here, at the boundary, and a bad one is a ConfigError naming its source.
        `flags` are keyed by the table's names (a section's as `crates.index_url`); every
        registered section is resolved."""
        flags = flags or {}
        unknown = sorted(set(flags) - set(BY_NAME))
        if unknown:
            raise TypeError(f"not settings: {', '.join(unknown)}")  # a bug in a caller
        env = os.environ if environ is None else environ
        sources: dict[str, str] = {}
        values = _resolve_rows(SETTINGS, flags, env, sources)
        sections: dict[str, Section] = {}
        for kind in _SECTIONS.values():
            rows = _section_rows(kind)
            resolved = _resolve_rows(rows, flags, env, sources)
            sections[kind.KEY] = kind(**{k.partition(".")[2]: v for k, v in resolved.items()})
        return cls(**values, sources=sources, sections=sections)


_SECTIONS: dict[str, type[Section]] = {}


def register_section(kind: type[S]) -> type[S]:
    """Declare a registry's section (its declaration module does, once)."""
    known = _SECTIONS.get(kind.KEY)
    if known is not None and known is not kind:
        raise ValueError(f"settings section {kind.KEY} is declared twice")
    _SECTIONS[kind.KEY] = kind
    rows = _section_rows(kind)
    global SETTINGS_ALL
    SETTINGS_ALL = (*SETTINGS_ALL, *(r for r in rows if r.name not in BY_NAME))
    BY_NAME.update({r.name: r for r in rows})
    return kind


def sections() -> list[type[Section]]:
    return list(_SECTIONS.values())


def _resolve_rows(
    rows: tuple[Setting, ...],
    flags: Mapping[str, Any],
    env: Mapping[str, str],
    sources: dict[str, str],
) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for setting in rows:
        given = flags.get(setting.name)
        if given is not None:
            value, source, where = given, setting.flag or setting.name, "flag"
        elif setting.env and env.get(setting.env, "") != "":
            source, where = setting.env, "env"
            if setting.secret:
                _register(setting, env[setting.env])  # before parsing quotes it
            value = _parse(setting, env[setting.env])
        else:
            value, source, where = setting.default, setting.name, "default"
        if value is not None:
            _register(setting, value)
            _check(setting, value, source)
        values[setting.name] = value
        sources[setting.name] = where
    return values


def _rows(cls: type, key: str = "", env_prefix: str = "") -> tuple[Setting, ...]:
    """The rows of a settings class (the core's, or a section's: named `key.field`)."""
    hints = get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        row = f.metadata.get("setting")
        if row is None:
            continue
        hint = hints[f.name]
        kinds = [k for k in getattr(hint, "__args__", (hint,)) if k is not type(None)]
        assert len(kinds) == 1 and kinds[0] in (str, int, float), (f.name, hint)
        assert not isinstance(hint, types.GenericAlias)
        env = f"STAGECRAWL_{env_prefix}{f.name.upper()}" if row["env"] == "" else row["env"]
        flag = "--" + f.name.replace("_", "-") if row["flag"] == "" else row["flag"]
        rows.append(
            Setting(
                f"{key}.{f.name}" if key else f.name,
                f.default,
                kinds[0],
                env,
                flag,
                row["help"],
                row["check"],
                row["secret"],
                row["minimum"],
                row["above"],
                row["maximum"],
            )
        )
    return tuple(rows)


def _section_rows(kind: type[Section]) -> tuple[Setting, ...]:
    return _rows(kind, kind.KEY, kind.ENV_PREFIX)


SETTINGS: tuple[Setting, ...] = _rows(Settings)  # the core's rows
# The core's and every registered section's rows (`register_section` adds a section's).
SETTINGS_ALL: tuple[Setting, ...] = SETTINGS
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
# The table's defaults, typed: the engine's own dataclasses take their defaults from here, so
# that each default is written once.
DEFAULTS = Settings()


def _register(setting: Setting, value: object) -> None:
    """Secrets are registered for masking the moment they are read: before the check, whose
    error may quote the value (a URL's password in user-info or a query parameter, a mirror's
    basic-auth password in --index-url, a token)."""
    if setting.secret and not setting.check:
        secrets.register(str(value))  # a token
    elif setting.secret or setting.check == "url":
        secrets.register_url(str(value))


def _parse(setting: Setting, raw: str) -> Any:
    try:
        return setting.kind(raw)
    except ValueError:
        kind = {int: "a whole number", float: "a number"}.get(setting.kind, setting.kind.__name__)
        raise ConfigError(f"{setting.env} must be {kind}, got {raw!r}") from None


_BUDGET_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "": 1.0}


def parse_budget(text: str) -> tuple[int, float]:
    """`600/600s`, `600/10m`, `5000/1h` (a bare number of seconds works too) → (limit, seconds).
    The one reading of a budget: the engine's `Budget.parse` uses it, and it lives here so the
    settings never import the engine (the engine takes its defaults from the settings)."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not match:
        raise ValueError(f"a budget is LIMIT/WINDOW such as 600/600s or 600/10m, not {text!r}")
    limit, amount, unit = match.groups()
    seconds = float(amount) * _BUDGET_UNITS[unit]
    if int(limit) < 1 or not seconds > 0:
        raise ValueError("a budget needs a limit ≥ 1 and a window > 0")
    return int(limit), seconds


def _check(setting: Setting, value: Any, source: str) -> None:
    if setting.kind in (int, float):
        _check_number(setting, value, source)
    if setting.kind is str and any(ord(c) < 32 or ord(c) == 127 for c in str(value)):
        # A CR left by Windows line ends in an environment file, a newline: in a header
        # (the contact, a token) every request failed, in --db a file `stagecrawl.db\r` was
        # made. A secret's value is never shown.
        shown = "" if setting.secret else f", got {value!r}"
        raise ConfigError(f"{source} must be one line of text without control characters{shown}")
    check = setting.check
    if check == "url":
        check_http_url(str(value), source)
    elif check == "redis-url":
        _check_redis_url(str(value), source)
    elif check == "db-url":
        _check_db_url(str(value), source)
    elif check == "budgets":
        text = str(value).strip()
        for part in [] if text.lower() == "none" else text.split(","):
            if part.strip():
                try:
                    parse_budget(part)
                except ValueError as exc:
                    raise ConfigError(f"{source}: {exc}") from None


def _check_number(setting: Setting, value: Any, source: str) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or math.isnan(value)
        or math.isinf(value)
    ):
        raise ConfigError(f"{source} must be a finite number, got {value!r}")
    if setting.kind is int and not isinstance(value, int):
        raise ConfigError(f"{source} must be a whole number, got {value!r}")
    low, high = setting.minimum, setting.maximum
    if low is not None:
        if setting.above and not value > low:
            raise ConfigError(f"{source} must be greater than {low:g}, got {value!r}")
        if not setting.above and value < low:
            word = "must not be negative" if low == 0 else f"must be at least {low:g}"
            raise ConfigError(f"{source} {word}, got {value!r}")
    if high is not None and value > high:
        raise ConfigError(f"{source} must be at most {high:g}, got {value!r}")


def _port_ok(netloc_parts: Any) -> bool:
    try:
        netloc_parts.port  # noqa: B018 -- a port that is not a number (or > 65535) raises
    except ValueError:
        return False
    return True


def check_http_url(value: str, source: str) -> None:
    """An http(s) URL with a host and a numeric port, else a ConfigError (password masked)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname) and _port_ok(parts)
    except ValueError:  # an unbalanced [ in the host
        ok = False
    if not ok:
        raise ConfigError(f"{source} must be an http(s) URL, got {mask_url(value)!r}")


def _check_redis_url(value: str, source: str) -> None:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
        scheme = parts.scheme
        ok = scheme in ("redis", "rediss", "unix") and _port_ok(parts)
        if scheme in ("redis", "rediss"):
            ok = ok and bool(parts.hostname)
            db = parts.path.strip("/")
            ok = ok and (not db or db.isdigit())
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(
            f"{source} must be a redis://, rediss:// or unix:// URL (redis://HOST[:PORT][/DB]),"
            f" got {mask_url(value)!r}"
        )


DB_SCHEMES = ("sqlite", "mysql", "mariadb", "postgresql", "postgres")


def _check_db_url(value: str, source: str) -> None:
    """The form of a database URL, before any driver is imported: a scheme the storage layer
    knows, and (for a server) a host and a numeric port. Whether it can be reached is the
    storage layer's question."""
    from urllib.parse import parse_qsl, urlsplit

    problem = ""
    try:
        parts = urlsplit(value)
        backend = parts.scheme.split("+", 1)[0]
        if "://" not in value or backend not in DB_SCHEMES:
            problem = "must look like sqlite:///PATH, mysql+pymysql://… or postgresql+psycopg://…"
        elif backend != "sqlite" and not parts.hostname:
            problem = "names no host"
        elif backend == "sqlite" and parts.path in ("", "/", "/:memory:"):
            # SQLite in memory: each pooled connection has its own, empty one, and nothing
            # is kept ('no such table' on the second connection).
            problem = "names no file (an in-memory database keeps nothing): use sqlite:///PATH"
        elif not _port_ok(parts):
            problem = "has a port that is not a number from 0 to 65535"
        else:
            keys = [k for k, _ in parse_qsl(parts.query, keep_blank_values=True)]
            if any(not key for key in keys):
                problem = "has a malformed query"
            elif parts.scheme.endswith("+pymysql"):
                # SQLAlchemy hands the query to the driver as keyword arguments: an unknown
                # one would fail at connect time as a TypeError.
                accepted = _pymysql_parameters()
                unknown = sorted(set(keys) - accepted) if accepted else []
                if unknown:
                    problem = (
                        "has query parameters the MySQL driver (PyMySQL) does not take:"
                        f" {', '.join(unknown)}"
                    )
    except ValueError:
        problem = "is malformed"
    if problem:
        raise ConfigError(f"{source} {problem}: {mask_url(value)!r}")


def _pymysql_parameters() -> set[str]:
    """The connection arguments PyMySQL accepts (read from its own signature)."""
    import inspect

    try:
        from pymysql.connections import Connection  # type: ignore[import-untyped]
    except ImportError:  # not installed: the storage layer says so when it connects
        return set()
    return set(inspect.signature(Connection.__init__).parameters) - {"self"}


def settings_table() -> str:
    """The Markdown table of every setting, for docs/operations.md."""
    lines = [
        "| setting | flag | env | default | allowed | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for s in SETTINGS_ALL:
        default = "none" if s.default is None else f"`{s.default}`"
        flag = f"`{s.flag}`" if s.flag else ""
        env = f"`{s.env}`" if s.env else ""
        lines.append(f"| {s.name} | {flag} | {env} | {default} | {s.allowed()} | {s.help} |")
    return "\n".join(lines) + "\n"
