"""Settings of the crates pipeline and how they become engine parts."""

from __future__ import annotations

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
        settings = FetchSettings(
            timeout=self.timeout,
            retries=self.retries,
            max_retry_after=self.max_retry_after,
            contact=self.contact,
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
