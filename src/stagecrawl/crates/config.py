"""Settings of the crates pipeline and how they become engine parts."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from stagecrawl.crates.names import validate_name
from stagecrawl.engine.fetcher import Fetcher, FetchSettings, require_contact
from stagecrawl.engine.ratelimit import LocalLimiter, OriginLimiter, Rate, origin_of
from stagecrawl.engine.redis_limiter import RedisLimiter
from stagecrawl.errors import ConfigError, InputError

DEFAULT_INDEX_URL = "https://index.crates.io/"
DEFAULT_API_URL = "https://crates.io/"


@dataclass
class CratesConfig:
    """Defaults follow crates.io's data-access policy: the API at 1 request/s, the sparse index
    (which asks for no limit) at 10 requests/s."""

    index_url: str = DEFAULT_INDEX_URL
    api_url: str = DEFAULT_API_URL
    api_rate: float = 1.0
    index_rate: float = 10.0
    contact: str | None = None
    timeout: float = 15.0
    retries: int = 3
    max_retry_after: float = 600.0
    redis_url: str | None = None
    max_body_bytes: int = 64 * 1024 * 1024
    index_token: str | None = None
    api_token: str | None = None

    @classmethod
    def from_environment(cls, **values: object) -> CratesConfig:
        """Settings given as flags, plus the engine knobs and secrets that only come from the
        environment (tokens must never sit in a command line, a file or a log)."""
        env = os.environ

        def number(name: str, default: float) -> float:
            raw = env.get(name)
            if raw is None or raw == "":
                return default
            try:
                value = float(raw)
            except ValueError:
                raise ConfigError(f"{name} must be a number, got {raw!r}") from None
            if value < 0:
                raise ConfigError(f"{name} must not be negative")
            return value

        config = cls(**values)  # type: ignore[arg-type]
        config.timeout = number("STAGECRAWL_TIMEOUT", config.timeout)
        config.retries = int(number("STAGECRAWL_RETRIES", config.retries))
        config.max_retry_after = number("STAGECRAWL_MAX_RETRY_AFTER", config.max_retry_after)
        config.max_body_bytes = int(
            number("STAGECRAWL_MAX_BODY_MB", config.max_body_bytes / 2**20) * 2**20
        )
        config.index_token = env.get("STAGECRAWL_INDEX_TOKEN") or None
        config.api_token = env.get("STAGECRAWL_API_TOKEN") or None
        return config

    def validate(self) -> None:
        for label, url in (("--index-url", self.index_url), ("--api-url", self.api_url)):
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ConfigError(f"{label} must be an http(s) URL, got {url!r}")
        if self.api_rate <= 0 or self.index_rate <= 0:
            raise ConfigError("rates must be positive")
        if any(_is_crates_io(u) for u in (self.index_url, self.api_url)):
            require_contact(
                FetchSettings(contact=self.contact),
                "crates.io's crawler policy asks every crawler to identify itself with a way to"
                " reach its operator in the User-Agent",
            )

    def make_fetcher(self) -> Fetcher:
        self.validate()
        rates = {
            origin_of(self.api_url): Rate(self.api_rate, 1),
            origin_of(self.index_url): Rate(self.index_rate, max(1, int(self.index_rate))),
        }
        limiter: OriginLimiter = (
            RedisLimiter(self.redis_url, rates) if self.redis_url else LocalLimiter(rates)
        )
        tokens = {}
        if self.index_token:
            tokens[origin_of(self.index_url)] = self.index_token
        if self.api_token:
            tokens[origin_of(self.api_url)] = self.api_token
        settings = FetchSettings(
            timeout=self.timeout,
            retries=self.retries,
            max_retry_after=self.max_retry_after,
            max_body_bytes=self.max_body_bytes,
            contact=self.contact,
            tokens=tokens,
        )
        return Fetcher(settings, limiter=limiter)


def _is_crates_io(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return host == "crates.io" or host.endswith(".crates.io")


def read_seeds_file(path: Path) -> list[str]:
    """One crate name per line, `#` comments and blank lines ignored; any junk line is an
    error naming the file and line, and then nothing from the file is used."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read seeds file {path}: {exc}") from None
    names: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            names.append(validate_name(line))
        except InputError as exc:
            raise InputError(f"{path}:{number}: {exc}") from None
    return names


def split_env_seeds(value: str | None) -> list[str]:
    if not value:
        return []
    return [validate_name(n.strip()) for n in value.split(",") if n.strip()]
