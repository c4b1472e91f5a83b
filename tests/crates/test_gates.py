"""The gates a CI team configures: ignores with reasons that expire, a severity threshold, the
informational kinds that deny, a maximum advisory-data age, license policy per project — from
stagecrawl.toml, or from the cargo-audit and cargo-deny files a Rust project already has, with
flags over the file and one-line errors for a bad file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import update

from stagecrawl.crates.licenses import evaluate
from stagecrawl.sca.config import read_cargo_deny, read_native
from stagecrawl.storage.db import Database
from tests.cli import stagecrawl
from tests.crates.kernel import policy_from_config, rust
from tests.crates.test_audit import LOCK_V3, ZIP, needs_zip
from tests.crates.test_osv import add_collected
from tests.sca.test_cargo_deny_semantics import ALLOW, CASES, OWN

pytestmark = needs_zip


@pytest.fixture(scope="module")
def db_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("gates")
    url = f"sqlite:///{root / 'g.db'}"
    done = stagecrawl("crates", "vulns", "--source", str(ZIP), "--db", url)
    assert done.returncode == 0, done.stderr
    yield url


def audit(db_url: str, cwd: Path, *args: str) -> tuple[int, dict[str, object], str]:
    done = stagecrawl("crates", "audit", *args, "--format", "json", "--db", db_url, cwd=cwd)
    assert "Traceback" not in done.stderr
    if done.returncode == 2:
        return 2, {}, done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr


NATIVE = """
[advisories]
ignore = [
  { id = "RUSTSEC-2026-0009", reason = "time: the parser is never fed user input" },
]
deny = ["unsound"]
severity-threshold = "critical"
"""
CARGO_AUDIT = """
[advisories]
ignore = ["RUSTSEC-2026-0009"]
severity_threshold = "critical"

[output]
deny = ["unsound"]
"""
CARGO_DENY = """
[advisories]
ignore = [{ id = "RUSTSEC-2026-0009", reason = "time: the parser is never fed user input" }]
unmaintained = "none"
unsound = "all"
"""


@pytest.mark.parametrize(
    ("name", "text"),
    [("stagecrawl.toml", NATIVE), (".cargo/audit.toml", CARGO_AUDIT), ("deny.toml", CARGO_DENY)],
)
def test_the_three_formats_give_the_native_verdicts(
    db_url: str, tmp_path: Path, name: str, text: str
) -> None:
    path = tmp_path / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    code, report, _ = audit(db_url, tmp_path, "time@0.3.10")
    assert code == 0  # the only hit is ignored, with its reason where the file gives one
    assert [h["id"] for h in report["ignored"]] == ["RUSTSEC-2026-0009"]  # type: ignore[index]
    assert report["hits"] == []
    code, report, _ = audit(db_url, tmp_path, "lock_api@0.4.1")
    assert code == 1  # unsound denies, in all three
    assert report["hits"][0]["informational"] == "unsound"  # type: ignore[index]
    # the file is found from a folder below too
    below = tmp_path / "crates" / "deep"
    below.mkdir(parents=True)
    assert audit(db_url, below, "time@0.3.10")[0] == 0


def test_expiry_unused_ignores_aliases_threshold_and_age(db_url: str, tmp_path: Path) -> None:
    config = tmp_path / "stagecrawl.toml"
    config.write_text(
        """
[advisories]
ignore = [
  { id = "CVE-2026-25727", reason = "by its CVE alias", until = 2999-01-01 },
  { id = "RUSTSEC-2021-0003", reason = "waiting for smallvec 1.6.1", until = 2020-01-01 },
  { id = "RUSTSEC-1999-0001", reason = "an old one" },
]
"""
    )
    code, report, stderr = audit(db_url, tmp_path, "time@0.3.10", "smallvec@1.6.0")
    assert code == 1
    assert [h["id"] for h in report["ignored"]] == ["RUSTSEC-2026-0009"]  # type: ignore[index]
    assert [h["id"] for h in report["hits"]] == ["RUSTSEC-2021-0003"]  # type: ignore[index]
    [failure] = report["gate_failures"]  # type: ignore[misc]
    assert "RUSTSEC-2021-0003" in failure and "expired on 2020-01-01" in failure
    assert "stagecrawl.toml:5" in failure  # where it is written
    assert any("RUSTSEC-1999-0001 matches no advisory" in n for n in report["notes"])  # type: ignore[union-attr]
    assert "RUSTSEC-1999-0001 matches no advisory" in stderr  # said, not failing

    # a threshold by score or level sets rated hits aside; flags override the file
    code, report, _ = audit(
        db_url, tmp_path, "smallvec@1.6.0", "--config", str(tmp_path / "none.toml")
    )
    assert code == 2  # a --config that does not exist is a config error
    (tmp_path / "empty.toml").write_text("")
    code, report, _ = audit(
        db_url, tmp_path, "smallvec@1.6.0", "--config", str(tmp_path / "empty.toml")
    )
    assert code == 1
    # smallvec's RUSTSEC-2021-0003 is rated 9.8 (critical), time's RUSTSEC-2026-0009 6.8 (medium)
    for threshold, code_wanted in [("10", 0), ("critical", 1), ("9.8", 1), ("9.9", 0)]:
        code, report, _ = audit(
            db_url, tmp_path, "smallvec@1.6.0", "--config", str(tmp_path / "empty.toml"),
            "--severity-threshold", threshold,
        )  # fmt: skip
        assert code == code_wanted and bool(report["below_threshold"]) == (not code), threshold
    code, report, _ = audit(
        db_url, tmp_path, "time@0.3.10", "--config", str(tmp_path / "empty.toml"),
        "--severity-threshold", "high",
    )  # fmt: skip
    assert code == 0 and report["below_threshold"][0]["id"] == "RUSTSEC-2026-0009"  # type: ignore[index]
    # the fixture's newest change is 2026-08-21: a 30-day maximum fails, 100000 days passes
    code, report, _ = audit(
        db_url, tmp_path, "time@0.3.47", "--config", str(tmp_path / "empty.toml"),
        "--max-advisory-age", "30",
    )  # fmt: skip
    assert code == 1 and "the advisory data is" in report["gate_failures"][0]  # type: ignore[index]
    code, _, _ = audit(
        db_url, tmp_path, "time@0.3.47", "--config", str(tmp_path / "empty.toml"),
        "--max-advisory-age", "P100000D",
    )  # fmt: skip
    assert code == 0


def test_deny_kinds_and_yanked(db_url: str, tmp_path: Path) -> None:
    empty = tmp_path / "stagecrawl.toml"
    empty.write_text("[advisories]\ndeny = ['unsound']\n")
    assert audit(db_url, tmp_path, "lock_api@0.4.1")[0] == 1
    assert audit(db_url, tmp_path, "lock_api@0.4.1", "--deny", "unmaintained")[0] == 0  # replaces
    # yanked: only known for collected versions
    db = Database(db_url)
    add_collected(db, "yanky", ["1.0.0"])
    with db.engine.begin() as conn:
        conn.execute(update(rust(db).version).values(YANKED=True))
    code, report, _ = audit(db_url, tmp_path, "yanky@1.0.0", "--deny", "unsound")
    assert code == 0 and report["yanked"] == [{"crate": "yanky", "version": "1.0.0"}]
    assert audit(db_url, tmp_path, "yanky@1.0.0", "--deny", "yanked")[0] == 1


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("[advisories]\nignore = [\n  'RUSTSEC-2026-0009',\n]\n", ":2: advisories.ignore"),
        ("[advisories]\n\nseverity-threshold = 'severe'\n", ":3: advisories.severity-threshold"),
        ("[advisories]\nmax-advisory-age = 'a month'\n", ":2: advisories.max-advisory-age"),
        # past timedelta's range: was an internal error (OverflowError), exit 1
        (
            "[advisories]\nmax-advisory-age = 'P99999999999999999999D'\n",
            ":2: advisories.max-advisory-age",
        ),
        ("[licenses]\nallow = ['MIT']\nalow = ['ISC']\n", ":3: licenses.alow"),
        ("[advisories]\nignore = [{ id = 'X-1', reason = 'r', until = 'soon' }]\n", ":2:"),
        ("[advisories\n", ":"),
    ],
)
def test_a_bad_config_file_is_one_line_naming_file_line_and_key(
    db_url: str, tmp_path: Path, text: str, where: str
) -> None:
    (tmp_path / "stagecrawl.toml").write_text(text)
    done = stagecrawl("crates", "audit", "time@0.3.10", "--db", db_url, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert f"stagecrawl.toml{where}" in line and "Traceback" not in line


LICENSE_NATIVE = """
[licenses]
allow = {allow}
exceptions = [
{exceptions}
]
"""
LICENSE_DENY = """
[licenses]
allow = {allow}
deny = ["MIT"]  # deprecated in cargo-deny and not applied
{exceptions}
"""


def test_license_policy_from_deny_toml_gives_the_native_verdicts(tmp_path: Path) -> None:
    allow = json.dumps(ALLOW)
    native = tmp_path / "stagecrawl.toml"
    native.write_text(
        LICENSE_NATIVE.format(
            allow=allow,
            exceptions="\n".join(
                f"  {{ crate = {json.dumps(c)}, allow = {json.dumps(lics)} }},"
                for c, lics in OWN.items()
            ),
        )
    )
    deny = tmp_path / "deny.toml"
    deny.write_text(
        LICENSE_DENY.format(
            allow=allow,
            exceptions="\n".join(
                f"[[licenses.exceptions]]\nname = {json.dumps(c)}\nallow = {json.dumps(lics)}\n"
                for c, lics in OWN.items()
            ),
        )
    )
    from_native = policy_from_config(read_native(native), [], [], [])
    deny_config = read_cargo_deny(deny)
    from_deny = policy_from_config(deny_config, [], [], [])
    assert any("licenses.deny is deprecated" in note for note in deny_config.notes)
    verdicts = [(evaluate(e, from_native, c), evaluate(e, from_deny, c)) for c, e in CASES]
    assert all(a == b for a, b in verdicts) and len(verdicts) >= 40


def test_licenses_check_of_a_lock_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    db = Database(url)
    add_collected(db, "time", ["0.3.10"])
    add_collected(db, "smallvec", ["1.6.1"])
    add_collected(db, "lock_api", ["0.4.1"])
    licenses = {"time": "MIT OR Apache-2.0", "smallvec": "Apache-2.0 WITH LLVM-exception"}
    with db.engine.begin() as conn:
        for key, text in licenses.items():
            conn.execute(
                update(rust(db).version)
                .where(rust(db).version.c.PRODUCT_KEY == key)
                .values(LICENSE=text)
            )
    lock = tmp_path / "Cargo.lock"
    lock.write_text(LOCK_V3)
    (tmp_path / "deny.toml").write_text(
        "[licenses]\nallow = ['MIT', 'Apache-2.0']\n"
        "[[licenses.clarify]]\ncrate = 'lock_api@0.4.1'\nexpression = 'MIT'\n"
        "license-files = []\n"
    )
    done = stagecrawl(
        "crates", "licenses", "check", "--lockfile", str(lock), "--format", "json",
        "--db", url, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)
    reasons = {(v["crate"], v["version"]): v["reason"] for v in document["violations"]}
    assert reasons == {
        ("smallvec", "1.6.1"): "not allowed: Apache-2.0 WITH LLVM-exception",
        ("time", "0.1.45"): "not collected: license unknown",  # never passed silently
    }
    assert document["versions_checked"] == 4  # lock_api passes by its clarification
    assert document["violations"][0]["found_in"] == [str(lock)]
    allowed = stagecrawl(
        "crates", "licenses", "check", "--lockfile", str(lock), "--db", url,
        "--allow", "MIT,Apache-2.0,Apache-2.0 WITH LLVM-exception",
        "--exception", "time@0.1.45=LicenseRef-unknown", cwd=tmp_path,
    )  # fmt: skip
    assert allowed.returncode == 1  # the flag replaces allow; 0.1.45 still has no license
    assert "smallvec" not in allowed.stdout and "time\t0.1.45" in allowed.stdout
