"""Settings of the crates pipeline and how they become engine parts (lanes, limiter, fetcher)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from stagecrawl.crates.names import validate_name
from stagecrawl.engine.clock import Clock
from stagecrawl.engine.fetcher import Fetcher, FetchSettings, require_contact
from stagecrawl.engine.ratelimit import Budget, Lane, Lanes, Limiter, LocalLimiter, Rate
from stagecrawl.engine.redis_limiter import RedisLimiter
from stagecrawl.errors import ConfigError, InputError
from stagecrawl.secrets import mask_url
from stagecrawl.settings import Settings

DEFAULT_INDEX_URL = "https://index.crates.io/"
DEFAULT_API_URL = "https://crates.io/"
# crates.io's firewall: about 600 API requests per 10 minutes per IP, then a 5-minute block.
DEFAULT_API_BUDGETS = (Budget(600, 600.0),)


@dataclass
class CratesConfig:
    """Defaults follow crates.io's data-access policy: the API at 1 request/s and 600 per
    10 minutes, the sparse index (which asks for no limit) at 10 requests/s; burst 1 on both."""

    index_url: str = DEFAULT_INDEX_URL
    api_url: str = DEFAULT_API_URL
    api_rate: float = 1.0
    index_rate: float = 10.0
    api_burst: int = 1
    index_burst: int = 1
    api_budgets: tuple[Budget, ...] = DEFAULT_API_BUDGETS
    index_budgets: tuple[Budget, ...] = ()
    contact: str | None = None
    timeout: float = 15.0
    deadline: float = 60.0
    retries: int = 3
    max_retry_after: float = 600.0
    redis_url: str | None = None
    max_body_bytes: int = 64 * 1024 * 1024
    index_token: str | None = field(default=None, repr=False)
    api_token: str | None = field(default=None, repr=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> CratesConfig:
        """The crates knobs of a run's resolved settings (flags, then environment, then
        defaults: see stagecrawl/settings.py)."""
        s = settings
        config = cls(
            index_url=s.index_url,
            api_url=s.api_url,
            api_rate=s.api_rate,
            index_rate=s.index_rate,
            api_burst=s.api_burst,
            index_burst=s.index_burst,
            api_budgets=parse_budgets(s.api_budget, DEFAULT_API_BUDGETS),
            index_budgets=parse_budgets(s.index_budget, ()),
            contact=s.contact,
            timeout=s.timeout,
            deadline=s.deadline,
            retries=s.retries,
            max_retry_after=s.max_retry_after,
            redis_url=s.redis_url,
            max_body_bytes=int(s.max_body_mb * 2**20),
            index_token=s.index_token,
            api_token=s.api_token,
        )
        config.validate()
        return config

    def validate(self) -> None:
        lanes = (
            ("--index-url", self.index_url, "STAGECRAWL_INDEX_TOKEN", self.index_token),
            ("--api-url", self.api_url, "STAGECRAWL_API_TOKEN", self.api_token),
        )
        for label, url, token_name, token in lanes:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ConfigError(f"{label} must be an http(s) URL, got {mask_url(url)!r}")
            if token and (parts.username or parts.password):
                # Both would be an Authorization header: say so, rather than let every
                # request fail.
                raise ConfigError(
                    f"{label} carries credentials ({mask_url(url)}) and {token_name} is set:"
                    " use one of them"
                )
        if not (self.api_rate > 0 and self.index_rate > 0):
            raise ConfigError("rates must be positive")
        if self.api_burst < 1 or self.index_burst < 1:
            raise ConfigError("bursts must be at least 1")
        if any(_is_crates_io(u) for u in (self.index_url, self.api_url)):
            require_contact(
                FetchSettings(contact=self.contact),
                "crates.io's crawler policy asks every crawler to identify itself with a way to"
                " reach its operator in the User-Agent",
            )

    def lanes(self) -> Lanes:
        return Lanes(
            [
                Lane(
                    "index",
                    self.index_url,
                    Rate(self.index_rate, self.index_burst),
                    self.index_budgets,
                    token=self.index_token,
                ),
                Lane(
                    "api",
                    self.api_url,
                    Rate(self.api_rate, self.api_burst),
                    self.api_budgets,
                    token=self.api_token,
                ),
            ]
        )

    def limiter(self, clock: Clock | None = None) -> Limiter:
        if self.redis_url:
            return RedisLimiter(self.redis_url, clock, safe_url=mask_url(self.redis_url))
        return LocalLimiter(clock)

    def fetch_settings(self) -> FetchSettings:
        return FetchSettings(
            timeout=self.timeout,
            deadline=self.deadline,
            retries=self.retries,
            max_retry_after=self.max_retry_after,
            max_body_bytes=self.max_body_bytes,
            contact=self.contact,
        )

    def make_fetcher(self, clock: Clock | None = None) -> Fetcher:
        self.validate()
        return Fetcher(
            self.fetch_settings(), self.lanes(), limiter=self.limiter(clock), clock=clock
        )


def parse_budgets(text: str | None, default: tuple[Budget, ...]) -> tuple[Budget, ...]:
    """`600/600s,5000/1h`; `none` for no budget; empty or None for the default."""
    if text is None or not text.strip():
        return default
    if text.strip().lower() == "none":
        return ()
    try:
        return tuple(Budget.parse(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


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
