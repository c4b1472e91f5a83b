"""Secrets never printed: database and Redis passwords (user-info and query parameters) and
the index/API tokens, in every message, log line, table and JSON document, whether the command
works or fails."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from stagecrawl.testing.origin import TestOrigin
from tests.acceptance.conftest import Mirror, redis_server, stagecrawl
from tests.services import POSTGRES_URL
from tests.services import drop_stagecrawl_tables as _drop_tables

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


PASSWORD = "S3cr3tPw-61"
DB_URLS = [
    f"crawler:{PASSWORD}@h/sca",
    f"mysql+pymysql//crawler:{PASSWORD}@127.0.0.1:1/sca",
    f"mysql+pymysql:/crawler:{PASSWORD}@127.0.0.1:1/sca",
    f"mysql+pymysql://crawler:{PASSWORD}@127.0.0.1:notaport/sca",
    f"mysql+pymysql://crawler:{PASSWORD}@[x/sca",
    f"mysql+pymysql://crawler@127.0.0.1:1/sca?password={PASSWORD}&x=1",
    f"postgresql+psycopg://:{PASSWORD}@127.0.0.1:1/x",
    f"sqlite:///crawler:{PASSWORD}@nowhere/x.db?password={PASSWORD}",
    f"mysql+pymysql://crawler@127.0.0.1:1/sca?password={PASSWORD}",
]
REDIS_URLS = [
    f":{PASSWORD}@127.0.0.1:1/3",
    f"redis://:{PASSWORD}@[x",
    f"redis//:{PASSWORD}@127.0.0.1:1",
    f"redis://:{PASSWORD}@127.0.0.1:notaport/0",
    f"redis://u@127.0.0.1:1/0?password={PASSWORD}",
]
HTTP_URLS = [
    f"http//u:{PASSWORD}@127.0.0.1:9/",
    f"u:{PASSWORD}@127.0.0.1:9/",
    f"http://u:{PASSWORD}@127.0.0.1:notaport/",
    f"http://u:{PASSWORD}@[x/",
    f"http://127.0.0.1:9/?token={PASSWORD}",
    f"http://u:{PASSWORD}@127.0.0.1:9/",
]
CRAWL = ["crates", "crawl", "serde", "--contact", "t@example.org"]
# (command, flag, environment variable, URLs for the flag, how many of them for the variable)
# for every setting or option that takes a URL.
AIRCRAFT = ["aircraft", "crawl", "--out", "{tmp}/air", "--contact", "t@example.org"]
URL_INPUTS: list[tuple[list[str], str | None, str | None, list[str], int]] = [
    (CRAWL, "--db", "STAGECRAWL_DB", DB_URLS, 3),
    (["status"], "--db", "STAGECRAWL_DB", DB_URLS[:4], 1),
    (["crates", "collect"], "--redis-url", "STAGECRAWL_REDIS_URL", REDIS_URLS, 2),
    (CRAWL, "--index-url", "STAGECRAWL_INDEX_URL", HTTP_URLS, 2),
    (CRAWL, "--api-url", "STAGECRAWL_API_URL", HTTP_URLS[:3], 1),
    (CRAWL, "--ai-license-url", "STAGECRAWL_AI_LICENSE_URL", HTTP_URLS[:3], 1),
    (AIRCRAFT, "--sparql-url", "STAGECRAWL_SPARQL_URL", HTTP_URLS[:3], 1),
    (AIRCRAFT, "--entities-url", "STAGECRAWL_ENTITIES_URL", HTTP_URLS[:3], 1),
    (["crates", "dbdump"], "--source", None, HTTP_URLS[:4], 0),
    (
        [
            "crates",
            "lock",
            "--all-tags",
            "--contact",
            "t@example.org",
            "--index-url",
            "http://127.0.0.1:9/",
        ],
        "",
        None,
        HTTP_URLS[:4],
        0,
    ),  # the repository argument
]


def test_malformed_urls_never_print_their_password(tmp_path: Path) -> None:
    """Every flag and environment variable that takes a URL, given malformed URLs with a
    password in them (user-info parsed or not, a query parameter): the password is never in
    stdout or stderr, whatever the command made of it (mostly: one line, exit 2)."""
    sqlite = f"sqlite:///{tmp_path / 'x.db'}"
    runs: list[tuple[list[str], dict[str, str]]] = []
    for command, flag, env_name, urls, by_env in URL_INPUTS:
        base = [part.replace("{tmp}", str(tmp_path)) for part in command]
        own_db = flag == "--db" or base[0] == "aircraft"
        db = [] if own_db else ["--db", sqlite]
        if "lock" in base:
            db += ["--cache-dir", str(tmp_path / "cache")]
        for url in urls:
            runs.append((["-v", *base, *db, *([url] if flag == "" else [flag or "", url])], {}))
        for url in urls[:by_env] if env_name else []:
            runs.append((["-v", *base, *db], {env_name: url}))

    def one(args: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str], str, int]:
        done = stagecrawl(*args, env=env, timeout=120, cwd=tmp_path)
        return args, env, done.stdout + done.stderr, done.returncode

    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda run: one(*run), runs))
    for args, env, output, code in results:
        assert PASSWORD not in output, (args, env, output)
        assert "Traceback" not in output, (args, env, output)
        assert code != 0 or args[1] == "status", (args, env, output)


SLASHED = "S3cr/3tPw-63"  # a raw `/` in a password: urlsplit reads `S3cr` as the port
TOKEN = "ghp-T0kenAsUser-64"  # `https://TOKEN@host/…`: GitHub's and Gemfury's form
SIGNATURE = "5ig-pre-signed-65"  # a pre-signed download URL's signature


def test_passwords_tokens_and_signatures_in_any_url_input_are_never_printed_nor_stored(
    tmp_path: Path,
) -> None:
    """A password with a raw `/`, a database URL without its `@host`, a token given as the
    user of an http(s) URL, a `?key=` or a pre-signed URL's signature: in every input that
    takes a URL (settings, `--source`, a repository), they are masked in what the command
    prints and in the reasons it stores, which a later `status` shows."""
    sqlite = f"sqlite:///{tmp_path / 'x.db'}"
    contact = {"STAGECRAWL_CONTACT": "t@example.org"}
    cache = ["--cache-dir", str(tmp_path / "cache")]
    runs = [
        ["status", "--db", f"mysql+pymysql://crawler:{SLASHED}@127.0.0.1:1/sca"],
        ["crates", "crawl", "serde", *NOWHERE, "--db",
         f"postgresql+psycopg://crawler:{SLASHED}@127.0.0.1:1/sca"],
        ["status", "--db", f"mysql+pymysql://crawler:{PASSWORD}"],  # `@host` left out
        ["crates", "crawl", "serde", "--db", sqlite, "--index-url",
         f"http://u:{SLASHED}@127.0.0.1:9/"],
        ["-v", "crates", "crawl", "serde", *NOWHERE, "--db", sqlite, "--index-url",
         f"http://{TOKEN}@127.0.0.1:9/"],
        # its own file: SQLite takes one collect at a time, and this one runs beside the
        # crates crawl above, which the final `status` reads back
        ["-v", "pypi", "crawl", "requests", "--db", f"sqlite:///{tmp_path / 'x-pypi.db'}",
         "--index-url",
         f"http://127.0.0.1:9/simple/?key={PASSWORD}", "--api-url", "http://127.0.0.1:9/"],
        ["-v", "crates", "vulns", "--db", sqlite, "--source",
         f"http://127.0.0.1:9/osv.zip?X-Amz-Signature={SIGNATURE}"],
        ["-v", "pypi", "vulns", "--db", sqlite, "--source", f"http://{TOKEN}@127.0.0.1:9/o.zip"],
        ["crates", "dbdump", "--db", sqlite, "--source", f"http://u:{SLASHED}@127.0.0.1:9/d.tgz"],
        ["-v", "crates", "lock", f"http://{TOKEN}@127.0.0.1:9/r.git", "--all-tags", *NOWHERE,
         "--db", sqlite, *cache],
        ["crates", "audit", "--repo", f"http://u:{SLASHED}@127.0.0.1:9/r.git", "--all-tags",
         "--db", sqlite, *cache],
        ["pypi", "audit", "--repo", f"https://127.0.0.1:9/r.git?sig={SIGNATURE}", "--all-tags",
         "--db", sqlite, *cache],
    ]  # fmt: skip
    requirements = tmp_path / "requirements.txt"  # a lock file's index options echo back
    requirements.write_text(
        f"--extra-index-url https://{TOKEN}@pypi.fury.io/me/\n"
        f"-i https://u:{SLASHED}@h.example/simple\n"
        f"pkg @ https://files.example/pkg-1.0.whl?sig={SIGNATURE}\nrequests==2.0.0\n"
    )
    runs.append(["pypi", "lock", "--lockfile", str(requirements), "--db", sqlite])
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(lambda args: stagecrawl(*args, env=contact, timeout=120), runs))
    done.append(stagecrawl("-v", "status", "--db", sqlite, "--format", "json"))
    for args, result in zip([*runs, ["status"]], done, strict=True):
        output = result.stdout + result.stderr
        for secret in (PASSWORD, SLASHED, "3tPw-63", TOKEN, SIGNATURE):
            assert secret not in output, (args, output)
        assert "Traceback" not in output, (args, output)
    assert "http://***@127.0.0.1:9/se/rd/serde" in done[-1].stdout  # the stored seed reason
    for stored in tmp_path.glob("x*.db*"):  # every table, the write-ahead log too
        for secret in (PASSWORD, SLASHED, TOKEN, SIGNATURE):
            assert secret.encode() not in stored.read_bytes(), (stored, secret)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (f"crawler:{PASSWORD}@h/sca", "crawler:***@h/sca"),
        (f"mysql+pymysql//crawler:{PASSWORD}@h/sca", "mysql+pymysql//crawler:***@h/sca"),
        (f"mysql+pymysql:/crawler:{PASSWORD}@h/sca", "mysql+pymysql:/crawler:***@h/sca"),
        (f"error: bad URL ':{PASSWORD}@127.0.0.1:6379'", "error: bad URL ':***@127.0.0.1:6379'"),
        (f"redis://:{PASSWORD}@[x", "redis://:***@[x"),
        (f"mysql+pymysql://u@h/db?password={PASSWORD}&x=1",
         "mysql+pymysql://u@h/db?password=***&x=1"),
        (f"http://u:p@ss{PASSWORD}@h/", "http://u:***@h/"),  # a password holding an @
        (f"fatal: 'http://u:{SLASHED}@h:9/'", "fatal: 'http://u:***@h:9/'"),  # ... or a /
        (f"https://{TOKEN}@github.com/o/r.git", "https://***@github.com/o/r.git"),
        (f"http://h/o.zip?X-Amz-Signature={SIGNATURE}&X-Amz-Credential=AK/x",
         "http://h/o.zip?X-Amz-Signature=***&X-Amz-Credential=***"),
        (f"http://h/?key={PASSWORD} http://h/?sig={SIGNATURE}", "http://h/?key=*** http://h/?sig=***"),
        # Not secrets: a database user alone, a port and a path, `keyword`, `design`.
        ("mysql+pymysql://crawler@h/db ssh://git@github.com/o/r",) * 2,
        ("http://h:8080/se/rd/serde@1.0.0 ?keyword=x&design=y",) * 2,
        # Not credentials: left as they are.
        ("stagecrawl/0.1.0 (+ops@example.org)", "stagecrawl/0.1.0 (+ops@example.org)"),
        ("serde@1.0.0 tokio@1.2.3", "serde@1.0.0 tokio@1.2.3"),
        # purls in a CycloneDX or SARIF report (a userinfo never holds a `/`)
        ("pkg:cargo/time@0.3.10 pkg:pypi/django@1.11.29",) * 2,
        ('{"user_agent": "x (+a@b.org)", "at": "12:30:45"}',) * 2,
        ("mysql+pymysql://crawler@127.0.0.1/db", "mysql+pymysql://crawler@127.0.0.1/db"),
    ],
)  # fmt: skip
def test_credentials_are_masked_in_any_text_parsed_or_not(text: str, shown: str) -> None:
    """`redact` masks what looks like `user:password@` or a secret query parameter in any
    text, registered or not (a library's error quoting a URL it was never given by us)."""
    from stagecrawl.secrets import redact

    assert redact(text) == shown
