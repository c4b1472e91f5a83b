"""One settings object per run: every knob, its flag, its environment variable and its default.

Resolution order for each setting: the command-line flag, then the environment variable, then
the default (Scrapy's settings table is the model). The table below is the single source: the
CLI declares its options from it, `docs/operations.md` prints it (a test keeps them equal), and
the pipelines build their engine parts (lanes, limiter, fetcher, loop) from the resolved values.
Secrets (passwords in URLs, tokens) are registered for masking the moment they are read.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from stagecrawl import secrets
from stagecrawl.errors import ConfigError
from stagecrawl.secrets import mask_url


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    kind: type  # str, int, float or bool
    env: str | None
    flag: str | None
    help: str
    # "positive", "at-least-1", "url", "redis-url", "non-negative", "budgets"
    check: str = ""
    secret: bool = False


def _s(
    name: str,
    default: Any,
    kind: type,
    help: str,
    *,
    env: str | None = "",
    flag: str | None = "",
    check: str = "",
    secret: bool = False,
) -> Setting:
    env_name = f"STAGECRAWL_{name.upper()}" if env == "" else env
    flag_name = "--" + name.replace("_", "-") if flag == "" else flag
    return Setting(name, default, kind, env_name, flag_name, help, check, secret)


SETTINGS: tuple[Setting, ...] = (
    _s(
        "db",
        "sqlite:///stagecrawl.db",
        str,
        "database URL (sqlite, mysql+pymysql, postgresql+psycopg)",
    ),
    _s(
        "contact",
        None,
        str,
        "email or URL sent in the User-Agent; required against crates.io and Wikidata",
    ),
    _s(
        "index_url",
        "https://index.crates.io/",
        str,
        "sparse index root (a mirror works)",
        check="url",
    ),
    _s("api_url", "https://crates.io/", str, "crates.io API root", check="url"),
    _s("index_rate", 10.0, float, "index lane: requests per second", check="positive"),
    _s("api_rate", 1.0, float, "API lane: requests per second", check="positive"),
    _s("index_burst", 1, int, "index lane: requests allowed back to back", check="at-least-1"),
    _s("api_burst", 1, int, "API lane: requests allowed back to back", check="at-least-1"),
    _s(
        "index_budget",
        "none",
        str,
        "index lane: windows such as 5000/1h (comma-separated), or none",
        check="budgets",
    ),
    _s(
        "api_budget",
        "600/600s",
        str,
        "API lane: windows (crates.io: about 600 per 10 minutes), or none",
        check="budgets",
    ),
    _s("concurrency", 8, int, "units (crates, requests) processed at once", check="at-least-1"),
    _s(
        "redis_url",
        None,
        str,
        "Redis for one rate limit shared by every worker",
        check="redis-url",
        secret=True,
    ),
    _s(
        "lease_seconds",
        900.0,
        float,
        "collect: how long a claim holds without a heartbeat",
        check="positive",
    ),
    _s(
        "grace_period",
        10.0,
        float,
        "seconds in-flight work may take to finish after SIGINT/SIGTERM",
        check="non-negative",
    ),
    _s(
        "commit_batch",
        32,
        int,
        "collect: crates written in one transaction at most (group commit)",
        flag=None,
        check="at-least-1",
    ),
    _s(
        "commit_linger",
        0.0,
        float,
        "collect: seconds a partial batch may wait for more crates before it is written",
        flag=None,
        check="non-negative",
    ),
    _s(
        "timeout", 15.0, float, "connect and per-read timeout, seconds", flag=None, check="positive"
    ),
    _s(
        "deadline",
        60.0,
        float,
        "one whole HTTP exchange (connect + headers + body), seconds",
        flag=None,
        check="positive",
    ),
    _s(
        "retries",
        3,
        int,
        "retries of a transient failure after the first attempt",
        flag=None,
        check="non-negative",
    ),
    _s(
        "max_retry_after",
        600.0,
        float,
        "longest a request waits on 429s and cooldowns; a longer Retry-After fails at once",
        flag=None,
        check="non-negative",
    ),
    _s(
        "max_body_mb",
        64.0,
        float,
        "largest response body after decompression, MiB",
        flag=None,
        check="positive",
    ),
    _s(
        "index_token",
        None,
        str,
        "bearer token for a private index (index lane only)",
        flag=None,
        secret=True,
    ),
    _s(
        "api_token",
        None,
        str,
        "bearer token for a private API (API lane only)",
        flag=None,
        secret=True,
    ),
    _s(
        "ai_license_url",
        None,
        str,
        "optional AI license classifier (POST); off when unset",
        check="url",
    ),
    _s("ai_rate", 2.0, float, "AI classifier lane: requests per second", check="positive"),
    _s(
        "cache_dir",
        ".stagecrawl-cache",
        str,
        "lock: bare clones and the private CARGO_HOME",
        env="STAGECRAWL_CACHE",
    ),
    _s(
        "sparql_url",
        "https://query.wikidata.org/sparql",
        str,
        "aircraft: Wikidata SPARQL endpoint",
        check="url",
    ),
    _s(
        "entities_url",
        "https://www.wikidata.org/w/api.php",
        str,
        "aircraft: Wikidata entity API",
        check="url",
    ),
    _s("sparql_rate", 1.0, float, "aircraft: SPARQL lane, requests per second", check="positive"),
    _s(
        "entities_rate",
        5.0,
        float,
        "aircraft: entity API lane, requests per second",
        check="positive",
    ),
    _s(
        "download_rate",
        1.0,
        float,
        "OSV and dump download lane: requests per second",
        flag=None,
        check="positive",
    ),
)
BY_NAME = {s.name: s for s in SETTINGS}


class Settings:
    """The resolved values of one run: `settings.api_rate`, `settings.db`, …"""

    def __init__(self, values: Mapping[str, Any], sources: Mapping[str, str]) -> None:
        self._values = dict(values)
        self.sources = dict(sources)  # name -> "flag" | "env" | "default"

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def get(self, name: str) -> Any:
        return self._values[name]

    @classmethod
    def resolve(
        cls, flags: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
    ) -> Settings:
        """Flags (None = not given), then the environment, then the defaults; every value
        is checked here, at the boundary, and a bad one is a ConfigError naming its source."""
        flags = flags or {}
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for setting in SETTINGS:
            given = flags.get(setting.name)
            if given is not None:
                value, source = given, setting.flag or setting.name
                where = "flag"
            elif setting.env and env.get(setting.env, "") != "":
                value, source = _parse(setting, env[setting.env]), setting.env
                where = "env"
            else:
                value, source, where = setting.default, setting.name, "default"
            if value is not None:
                if setting.secret and "url" not in setting.check:
                    secrets.register(str(value))  # a token
                elif setting.secret or setting.check == "url":
                    # Registered before the check, whose error quotes the value: a URL's
                    # password (user-info or a query parameter) is masked there too, and so is
                    # a mirror's basic-auth password in --index-url.
                    secrets.register_url(str(value))
                _check(setting, value, source)
            values[setting.name] = value
            sources[setting.name] = where
        if values["db"]:
            secrets.register_url(values["db"])
        return cls(values, sources)


def _parse(setting: Setting, raw: str) -> Any:
    try:
        if setting.kind is bool:
            return raw.strip().lower() in ("1", "true", "yes", "on")
        return setting.kind(raw)
    except ValueError:
        kind = {int: "a whole number", float: "a number"}.get(setting.kind, setting.kind.__name__)
        raise ConfigError(f"{setting.env} must be {kind}, got {raw!r}") from None


def _check(setting: Setting, value: Any, source: str) -> None:
    check = setting.check
    if check in ("positive", "at-least-1", "non-negative") and (
        not isinstance(value, (int, float)) or math.isnan(value) or math.isinf(value)
    ):
        raise ConfigError(f"{source} must be a finite number, got {value!r}")
    if check == "positive" and not value > 0:
        raise ConfigError(f"{source} must be greater than 0, got {value!r}")
    if check == "at-least-1" and value < 1:
        raise ConfigError(f"{source} must be at least 1, got {value!r}")
    if check == "non-negative" and value < 0:
        raise ConfigError(f"{source} must not be negative, got {value!r}")
    if check == "url":
        try:
            parts = urlsplit(str(value))
            ok = parts.scheme in ("http", "https") and bool(parts.hostname)
            parts.port  # noqa: B018 -- a port that is not a number raises here
        except ValueError:
            ok = False
        if not ok:
            raise ConfigError(f"{source} must be an http(s) URL, got {value!r}")
    if check == "redis-url" and urlsplit(str(value)).scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(
            f"{source} must be a redis://, rediss:// or unix:// URL, got {mask_url(str(value))!r}"
        )
    if check == "budgets":
        from stagecrawl.engine.ratelimit import Budget  # the engine's own reading of it

        text = str(value).strip()
        for part in [] if text.lower() == "none" else text.split(","):
            if part.strip():
                try:
                    Budget.parse(part)
                except ValueError as exc:
                    raise ConfigError(f"{source}: {exc}") from None


def settings_table() -> str:
    """The Markdown table of every setting, for docs/operations.md."""
    lines = ["| setting | flag | env | default | meaning |", "|---|---|---|---|---|"]
    for s in SETTINGS:
        default = "none" if s.default is None else f"`{s.default}`"
        flag = f"`{s.flag}`" if s.flag else ""
        env = f"`{s.env}`" if s.env else ""
        lines.append(f"| {s.name} | {flag} | {env} | {default} | {s.help} |")
    return "\n".join(lines) + "\n"
