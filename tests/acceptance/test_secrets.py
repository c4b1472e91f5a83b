"""Secrets never printed: database and Redis passwords (user-info and query parameters) and
the index/API tokens, in every message, log line, table and JSON document, whether the command
works or fails."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from stagecrawl.testing.origin import TestOrigin
from tests.acceptance.conftest import Mirror, redis_server, stagecrawl
from tests.crates.conftest import _drop_tables
from tests.services import POSTGRES_URL

DB_PASSWORD = "Db-pa55-w0rd-51"
DB_QUERY_PASSWORD = "Db-query-pa55-52"
REDIS_PASSWORD = "Red1s-pa55-53"
WRONG_REDIS_PASSWORD = "Wr0ng-red1s-54"
MIRROR_PASSWORD = "M1rror-pa55-55"
INDEX_TOKEN = "Idx-t0ken-7f3a-56"
API_TOKEN = "Api-t0ken-9c2e-57"
SECRETS = (
    DB_PASSWORD,
    DB_QUERY_PASSWORD,
    REDIS_PASSWORD,
    WRONG_REDIS_PASSWORD,
    MIRROR_PASSWORD,
    INDEX_TOKEN,
    API_TOKEN,
)
TOKENS = {"STAGECRAWL_INDEX_TOKEN": INDEX_TOKEN, "STAGECRAWL_API_TOKEN": API_TOKEN}
NOWHERE = ["--index-url", "http://127.0.0.1:9/", "--api-url", "http://127.0.0.1:9/"]


def with_password(url: str, password: str) -> str:
    """The PostgreSQL test URL with a password (the test server trusts 127.0.0.1, so the
    password is accepted whatever it is: the command works and must still not print it)."""
    scheme, rest = url.split("://", 1)
    user, host = rest.split("@", 1)
    return f"{scheme}://{user}:{password}@{host}"


@pytest.fixture
def postgres() -> Iterator[str]:
    _drop_tables(POSTGRES_URL)
    yield POSTGRES_URL
    _drop_tables(POSTGRES_URL)


def test_no_secret_in_any_output(mirror: Mirror, postgres: str, tmp_path: Path) -> None:
    runs: list[tuple[str, subprocess.CompletedProcess[str]]] = []

    def run(label: str, *args: str, code: int, tokens: bool = True) -> str:
        done = stagecrawl(*args, env=TOKENS if tokens else None)
        runs.append((label, done))
        assert done.returncode == code, (label, done.stderr)
        assert "Traceback" not in done.stderr, label
        return done.stdout + done.stderr

    db_userinfo = with_password(postgres, DB_PASSWORD)
    db_query = f"{postgres}?password={DB_QUERY_PASSWORD}"
    with (
        redis_server("--requirepass", REDIS_PASSWORD) as (port, _server),
        TestOrigin(mirror.root / "index") as elsewhere,
    ):
        redis_url = f"redis://:{REDIS_PASSWORD}@127.0.0.1:{port}/0"
        # A redirect to another host: the token is sent to the index, never beyond it.
        mirror.index.rule("/se/rd/serde", redirect_to=elsewhere.url)
        crawl = ["crates", "crawl", "serde", "tokio", *mirror.urls(), "--api-rate", "50"]
        out = run("crawl -v json", "-v", *crawl, "--db", db_userinfo, "--redis-url", redis_url,
                  "--format", "json", code=0)  # fmt: skip
        assert '"collected": 5' in out
        assert all(
            r.headers.get("Authorization") == f"Bearer {INDEX_TOKEN}"
            for r in mirror.index.log
            if r.path != "/config.json"
        )
        assert mirror.api.log and all(
            r.headers.get("Authorization") == f"Bearer {API_TOKEN}" for r in mirror.api.log
        )
        assert elsewhere.log and all("Authorization" not in r.headers for r in elsewhere.log)
        run("collect -v", "-v", "crates", "collect", *mirror.urls(), "--db", db_query,
            "--redis-url", redis_url, code=0)  # fmt: skip
        out = run("redis wrong password", *crawl, "--db", db_userinfo, "--redis-url",
                  f"redis://:{WRONG_REDIS_PASSWORD}@127.0.0.1:{port}/0", code=2)  # fmt: skip
        assert f"redis://:***@127.0.0.1:{port}/0" in out
    out = run("status", "status", "--db", db_userinfo, code=0)
    assert "postgres:***@" in out
    out = run("status json", "-v", "status", "--db", db_query, "--format", "json", code=0)
    assert "password=***" in out and '"versions": 5' in out
    out = run("licenses check json", "crates", "licenses", "check", "--allow", "0BSD",
              "--db", db_userinfo, "--format", "json", code=1)  # fmt: skip
    assert '"versions_checked": 5' in out
    # Failing commands: unreachable databases, Redis down, an unreachable index with tokens.
    for url in (
        f"mysql+pymysql://user:{DB_PASSWORD}@127.0.0.1:1/none",
        f"mysql+pymysql://user@127.0.0.1:1/none?password={DB_QUERY_PASSWORD}",
        f"postgresql+psycopg://user:{DB_PASSWORD}@127.0.0.1:1/none",
        f"postgresql+psycopg://user@127.0.0.1:1/none?password={DB_QUERY_PASSWORD}",
    ):
        for command in (["crates", "crawl", "serde", *NOWHERE], ["status"], ["-v", "status"]):
            out = run(f"{command} {url}", *command, "--db", url, code=2)
            assert "cannot reach database" in out and "***" in out
    out = run("redis down", "crates", "collect", *NOWHERE, "--db", db_userinfo,
              "--redis-url", f"redis://user:{REDIS_PASSWORD}@127.0.0.1:1/0", code=2)  # fmt: skip
    assert "cannot reach Redis at redis://user:***@127.0.0.1:1/0" in out
    sqlite = f"sqlite:///{tmp_path / 'x.db'}"
    mirror_down = f"http://mirror:{MIRROR_PASSWORD}@127.0.0.1:9/"  # basic auth in the URL
    out = run("index down -v", "-v", "crates", "crawl", "serde", *NOWHERE, "--index-url",
              mirror_down, "--db", sqlite, code=1, tokens=False)  # fmt: skip
    assert "cannot reach 127.0.0.1:9" in out and "http://mirror:***@127.0.0.1:9/se/rd/serde" in out
    out = run("credentials and a token", "crates", "crawl", "serde", *NOWHERE, "--index-url",
              mirror_down, "--db", sqlite, code=2)  # fmt: skip
    assert "--index-url carries credentials (http://mirror:***@127.0.0.1:9/)" in out
    # The reason was stored masked: a later status, which is not given the URL, shows it so.
    out = run("status of the seed ladder", "status", "--db", sqlite, "--format", "json", code=0)
    assert "http://mirror:***@127.0.0.1:9/se/rd/serde" in out
    out = run("bad mirror URL", "crates", "crawl", "serde", "--db", sqlite, "--index-url",
              f"http://mirror:{MIRROR_PASSWORD}@127.0.0.1:notaport/", code=2)  # fmt: skip
    assert "http://mirror:***@127.0.0.1:notaport/" in out
    for label, done in runs:
        for secret in SECRETS:
            assert secret not in done.stdout, (label, secret)
            assert secret not in done.stderr, (label, secret)
