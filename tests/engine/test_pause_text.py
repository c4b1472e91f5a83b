"""A pause is said with its date when it does not end today (UTC): `until 07:28:01 UTC` for a
pause that ends in 2099 read as this morning's."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from stagecrawl.errors import RateLimited
from stagecrawl.pauses import utc_moment
from stagecrawl.queue.reads import Holder
from stagecrawl.testing.pypi_origin import PyPIOrigin, synthetic_project
from tests.cli import stagecrawl

NOW = datetime(2026, 3, 14, 22, 15, 0)
PARIS = ZoneInfo("Europe/Paris")


@pytest.mark.parametrize(
    ("when", "said"),
    [
        (NOW + timedelta(minutes=15), "22:30:00 UTC"),
        (NOW + timedelta(hours=2), "2026-03-15 00:15:00 UTC"),  # past midnight: tomorrow
        (datetime(2099, 1, 1, 7, 28, 1), "2099-01-01 07:28:01 UTC"),
        (NOW - timedelta(days=1), "2026-03-13 22:15:00 UTC"),
        # aware times are said in UTC: 23:40 in Paris (UTC+1) is 22:40 UTC, today
        (
            datetime(2026, 3, 14, 23, 40, tzinfo=PARIS),
            "22:40:00 UTC",
        ),
    ],
)
def test_a_moment_carries_its_date_unless_it_is_today(when: datetime, said: str) -> None:
    assert utc_moment(when, NOW) == said
    assert utc_moment(when, NOW.replace(tzinfo=UTC)) == said


def test_a_rate_limit_that_ends_in_2099_says_so() -> None:
    limited = RateLimited(
        url="https://pypi.example/simple/x/",
        attempts=1,
        retry_after=2e9,
        until=datetime(2099, 1, 1, 7, 28, 1),
    )
    assert limited.pause_text == (
        "pypi.example asked for a pause until 2099-01-01 07:28:01 UTC (server Retry-After)"
    )
    assert "(until 2099-01-01 07:28:01 UTC)" in str(limited)


def test_a_lease_reclaimed_tomorrow_says_its_date() -> None:
    now = datetime.now(UTC).replace(tzinfo=None)
    holder = Holder("w1", 3, now, now, now + timedelta(days=1))
    assert f"reclaiming at {now + timedelta(days=1):%Y-%m-%d %H:%M:%S} UTC" in holder.describe(now)


@pytest.fixture
def origin() -> Iterator[PyPIOrigin]:
    server = PyPIOrigin()
    server.add_project(synthetic_project("paused", 2))
    server.start()
    yield server
    server.stop()


def test_the_waiting_line_of_a_pause_until_2099_has_its_date(
    origin: PyPIOrigin, tmp_path: Path
) -> None:
    origin.rule("*", too_many=10**9, retry_after="Thu, 01 Jan 2099 07:28:01 GMT")
    done = stagecrawl(
        "pypi",
        "seed",
        "paused",
        "--db",
        f"sqlite:///{tmp_path / 'p.db'}",
        "--index-url",
        f"{origin.url}/simple/",
        "--api-url",
        f"{origin.url}/",
        "--contact",
        "tests@example.org",
    )
    assert done.returncode == 1, done.stderr
    [line] = [line for line in done.stderr.splitlines() if "rerun after that" in line]
    assert "asked for a pause until 2099-01-01 07:28:0" in line, line
