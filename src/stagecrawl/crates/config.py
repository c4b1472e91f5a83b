"""How the crates pipeline's engine parts (lanes, fetcher, collect settings) are built from a
run's resolved settings (stagecrawl/settings.py): one function each, no default written here."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from stagecrawl.components import build_fetcher
from stagecrawl.crates.names import validate_name
from stagecrawl.errors import ConfigError, InputError
from stagecrawl.secrets import mask_url
from stagecrawl.settings import DEFAULTS, Settings

if TYPE_CHECKING:
    from stagecrawl.crates.licenses import AiLicenseClient
    from stagecrawl.crates.worker import CollectSettings
    from stagecrawl.engine.clock import Clock
    from stagecrawl.engine.fetcher import Fetcher
    from stagecrawl.engine.ratelimit import Budget, Lanes

# crates.io's own index: lock mode resolves against it without a private CARGO_HOME source.
DEFAULT_INDEX_URL = DEFAULTS.index_url


def check_crates_settings(s: Settings) -> None:
    """What the settings table cannot check alone: a token beside credentials in the same
    lane's URL, and the contact crates.io asks crawlers for."""
    lanes = (
        ("--index-url", s.index_url, "STAGECRAWL_INDEX_TOKEN", s.index_token),
        ("--api-url", s.api_url, "STAGECRAWL_API_TOKEN", s.api_token),
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
    if any(is_crates_io(u) for u in (s.index_url, s.api_url)) and not (s.contact or "").strip():
        raise ConfigError(
            "a contact is required: crates.io's crawler policy asks every crawler to identify"
            " itself with a way to reach its operator in the User-Agent. Pass --contact"
            " EMAIL-OR-URL or set STAGECRAWL_CONTACT."
        )


def crates_lanes(s: Settings) -> Lanes:
    """The index and API lanes (and the AI classifier's, when one is configured)."""
    from stagecrawl.engine.ratelimit import Lane, Lanes, Rate

    lanes = Lanes(
        [
            Lane(
                "index",
                s.index_url,
                Rate(s.index_rate, s.index_burst),
                parse_budgets(s.index_budget),
                token=s.index_token,
            ),
            Lane(
                "api",
                s.api_url,
                Rate(s.api_rate, s.api_burst),
                parse_budgets(s.api_budget),
                token=s.api_token,
            ),
        ]
    )
    if s.ai_license_url:
        lanes.add(Lane("ai", s.ai_license_url, Rate(s.ai_rate)))
    return lanes


def crates_fetcher(s: Settings, clock: Clock | None = None) -> Fetcher:
    """The crates pipeline's fetcher: checked settings, its lanes, the limiter they name."""
    check_crates_settings(s)
    return build_fetcher(s, crates_lanes(s), clock=clock)


def collect_settings(
    s: Settings, limit: int | None = None, skip_existing: bool = True
) -> CollectSettings:
    from stagecrawl.crates.worker import CollectSettings

    return CollectSettings(
        concurrency=s.concurrency,
        skip_existing=skip_existing,
        limit=limit,
        lease_seconds=s.lease_seconds,
        grace_period=s.grace_period,
        commit_batch=s.commit_batch,
        commit_linger=s.commit_linger,
        heartbeat_interval=s.heartbeat_seconds,
        claim_crates=s.claim_ahead,
    )


def ai_client(s: Settings, fetcher: Fetcher) -> AiLicenseClient | None:
    """The AI license classifier on the fetcher's `ai` lane, when one is configured."""
    if not s.ai_license_url:
        return None
    from stagecrawl.crates.licenses import AiLicenseClient

    return AiLicenseClient(fetcher, s.ai_license_url)


def parse_budgets(text: str) -> tuple[Budget, ...]:
    """`600/600s,5000/1h`; `none` (or nothing) for no budget."""
    from stagecrawl.engine.ratelimit import Budget

    if not text.strip() or text.strip().lower() == "none":
        return ()
    try:
        return tuple(Budget.parse(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def is_crates_io(url: str) -> bool:
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
