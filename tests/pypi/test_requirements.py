"""Requirements files read as pip reads them (pip's req_file.py: `-r`/`-c` includes relative to
the file naming them, option lines, per-requirement options, `${VAR}`), and every pin a lock
takes from somewhere else than the index (git, URL, path, editable) named in the audit as "not
audited, and why" in every format — never a silent all-clear."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from stagecrawl.errors import InputError
from stagecrawl.kernel.lock import read_lockfile
from stagecrawl.pypi.locks import parse_lock
from stagecrawl.pypi.plugin import REGISTRY as PYPI
from stagecrawl.sca.cyclonedx import audit_cyclonedx
from stagecrawl.sca.ecosystem import utcnow
from stagecrawl.sca.markdown import audit_markdown
from stagecrawl.sca.report_json import audit_json
from stagecrawl.sca.sarif import audit_sarif
from stagecrawl.storage.db import Database
from tests.cli import stagecrawl
from tests.pypi.kernel import audit, import_osv

HASH = "sha256:" + "ab" * 32


def advisory(osv_id: str, name: str, *events: dict[str, str], **fields: Any) -> dict[str, Any]:
    return {
        "id": osv_id,
        "modified": "2024-01-01T00:00:00Z",
        "details": f"{name} trusts its input. It should not.",
        "affected": [
            {
                "package": {"ecosystem": "PyPI", "name": name},
                "ranges": [{"type": "ECOSYSTEM", "events": list(events)}],
            }
        ],
        **fields,
    }


@pytest.fixture
def advisories(tmp_path: Path) -> str:
    """Advisories for requests (< 2.20), werkzeug (< 0.15.3) and six (every version)."""
    folder = tmp_path / "osv"
    folder.mkdir()
    records = [
        advisory("PYSEC-2099-1", "requests", {"introduced": "0"}, {"fixed": "2.20.0"}),
        advisory("PYSEC-2099-2", "Werkzeug", {"introduced": "0"}, {"fixed": "0.15.3"}),
        advisory("PYSEC-2099-3", "six", {"introduced": "0"}, summary="six is six"),
    ]
    for record in records:
        (folder / f"{record['id']}.json").write_text(json.dumps(record))
    url = f"sqlite:///{tmp_path / 'osv.db'}"
    import_osv(Database(url), folder, "all", 4 * 1024 * 1024)
    return url


def test_includes_options_and_a_vcs_line_as_pip_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIX_VERSION", "1.16.0")
    (tmp_path / "reqs").mkdir()
    (tmp_path / "reqs" / "base.txt").write_text(
        "--index-url https://pypi.example.org/simple/\n"
        "requests[socks]==2.19.0 ; python_version >= '3' \\\n"
        f"    --hash={HASH} \\\n"
        f"    --hash {HASH}\n"
        "-c ../constraints.txt\n"
    )
    (tmp_path / "constraints.txt").write_text("flask==2.0.1\nclick==8.0.0\n-r reqs/extra.txt\n")
    (tmp_path / "reqs" / "extra.txt").write_text("six==${SIX_VERSION}\n-r ../requirements.txt\n")
    lock_path = tmp_path / "requirements.txt"
    lock_path.write_text(
        "# a comment\n"
        "-r reqs/base.txt\n"
        "--extra-index-url https://mirror.example.org/simple/\n"
        "--prefer-binary\n"
        "flask>=2  # pinned by the constraint file\n"
        "mypkg --config-settings=editable_mode=compat\n"
        "git+https://github.com/pallets/werkzeug@0.15.0#egg=werkzeug\n"
        "-e ./local-lib\n"
        "./vendor/thing-1.0.tar.gz\n"
    )
    lock = read_lockfile(PYPI, lock_path)
    pins = {(r.name, r.version, r.where, r.line) for r in lock.pins}
    assert pins == {
        ("requests", "2.19.0", str(tmp_path / "reqs" / "base.txt"), 2),
        # -r inside a constraint file is a requirements file again (pip); ${SIX_VERSION} read
        ("six", "1.16.0", str(tmp_path / "reqs" / "extra.txt"), 1),
        ("flask", "2.0.1", str(lock_path), 5),  # flask>=2, pinned by the constraint
    }
    skipped = {(p.name, p.reason.split(" (")[0], p.fails) for p in lock.unaudited}
    assert skipped == {
        ("mypkg", "not pinned", True),
        ("werkzeug", "a VCS checkout", False),
        ("./local-lib", "editable", False),
        ("./vendor/thing-1.0.tar.gz", "a local path", False),
    }
    notes = " | ".join(lock.notes)
    assert "closes an include cycle" in notes  # extra.txt -r ../requirements.txt
    assert "flask>=2 is pinned by" in notes and "constraints.txt line 1" in notes
    # click is only a constraint: pip installs it only when something needs it
    assert "1 constraint pins that no requirement names are not audited" in notes
    assert "click==8.0.0" in notes


def test_a_missing_include_and_a_line_that_is_no_requirement_are_one_line_errors(
    tmp_path: Path,
) -> None:
    lock = tmp_path / "requirements.txt"
    lock.write_text("six==1.16.0\n-r missing.txt\n")
    with pytest.raises(InputError, match=r"requirements.txt line 2: cannot read -r missing.txt"):
        read_lockfile(PYPI, lock)
    lock.write_text("this is not a requirement at all !!\n")
    with pytest.raises(InputError, match="line 1: not a requirement"):
        read_lockfile(PYPI, lock)


def test_the_cli_audits_an_included_file_and_names_the_vcs_pin(
    advisories: str, tmp_path: Path
) -> None:
    (tmp_path / "base.txt").write_text("requests==2.19.0\nsix==1.16.0\n")
    lock = tmp_path / "requirements.txt"
    lock.write_text(
        "-r base.txt\n--index-url https://pypi.example.org/simple/\n"
        "git+https://github.com/pallets/werkzeug@0.15.0#egg=werkzeug\n"
    )
    done = stagecrawl(
        "pypi", "audit", "--lockfile", str(lock), "--db", advisories, "--format", "json"
    )
    assert done.returncode == 1, done.stderr  # requests 2.19.0 and six are vulnerable
    document = json.loads(done.stdout)
    assert {(h["project"], h["version"], h["id"]) for h in document["hits"]} == {
        ("requests", "2.19.0", "PYSEC-2099-1"),
        ("six", "1.16.0", "PYSEC-2099-3"),
    }
    assert document["hits"][0]["found_in"] == [str(tmp_path / "base.txt")]
    assert document["hits"][0]["summary"] == "requests trusts its input."  # from details
    [vcs] = document["not_audited"]
    assert vcs["project"] == "werkzeug" and "VCS" in vcs["reason"]
    assert vcs["found_in"] == f"{lock} line 3" and vcs["fails_without_strict"] is False
    table = stagecrawl("pypi", "audit", "--lockfile", str(lock), "--db", advisories)
    lines = table.stdout.splitlines()
    assert lines[1].split("\t")[:3] == ["project", "version", "id"]  # a header on the table
    header = lines.index("not audited:")
    assert lines[header + 1].split("\t") == [
        "project",
        "version",
        "found in",
        "not audited because",
    ]
    assert lines[header + 2].startswith("werkzeug\t-\t")


def test_non_index_sources_of_lock_files_are_named_and_strict_fails_on_them(
    advisories: str, tmp_path: Path
) -> None:
    uv = tmp_path / "uv.lock"
    uv.write_text(
        'version = 1\nrevision = 3\n\n[[package]]\nname = "app"\nversion = "0.1.0"\n'
        'source = { editable = "." }\n\n'
        '[[package]]\nname = "werkzeug"\nversion = "0.15.0"\n'
        'source = { git = "https://github.com/pallets/werkzeug?tag=0.15.0#9b1123a7" }\n\n'
        '[[package]]\nname = "six"\nversion = "1.16.0"\n'
        'source = { registry = "https://pypi.org/simple" }\n'
    )
    poetry = tmp_path / "poetry.lock"
    poetry.write_text(
        '[[package]]\nname = "werkzeug"\nversion = "0.15.0"\ndescription = ""\n'
        'optional = false\npython-versions = "*"\nfiles = []\n\n'
        '[package.source]\ntype = "git"\nurl = "https://github.com/pallets/werkzeug.git"\n'
        'reference = "0.15.0"\nresolved_reference = "9b1123a7"\n\n'
        '[metadata]\nlock-version = "2.0"\npython-versions = "*"\ncontent-hash = "x"\n'
    )
    pylock = tmp_path / "pylock.toml"
    pylock.write_text(
        'lock-version = "1.0"\ncreated-by = "t"\n\n[[packages]]\nname = "werkzeug"\n'
        'version = "0.15.0"\n[packages.vcs]\ntype = "git"\n'
        'url = "https://github.com/pallets/werkzeug"\ncommit-id = "9b1123a7"\n'
    )
    for path in (uv, poetry, pylock):
        [named] = read_lockfile(PYPI, path).unaudited
        assert (named.name, named.version) == ("werkzeug", "0.15.0"), path
        assert "git https://github.com/pallets/werkzeug" in named.reason, path
    report = audit(advisories, [], [uv])
    assert [(h.package.name, h.advisory.osv_id) for h in report.hits] == [("six", "PYSEC-2099-3")]
    [werkzeug] = report.unaudited  # the editable project itself is not a dependency
    assert werkzeug.text().startswith("werkzeug 0.15.0 (")
    clean = audit(advisories, ["six==1.16.0"], strict=False)
    clean.unaudited = report.unaudited  # only the git pin beside a pin that is clean…
    clean.hits = []
    assert clean.exit_code == 0  # …a warning
    clean.strict = True
    assert clean.exit_code == 1  # strict: every unaudited pin fails (pip-audit's --strict)
    # every format says it
    assert audit_json(report)["not_audited"][0]["project"] == "werkzeug"
    assert "| werkzeug | 0.15.0 |" in audit_markdown(report)
    sarif = audit_sarif(report)
    texts = [
        n["message"]["text"]
        for n in sarif["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    ]
    assert any(t.startswith("not audited: werkzeug 0.15.0") for t in texts)
    bom = audit_cyclonedx(report, "00000000-0000-4000-8000-000000000000", utcnow())
    component = next(c for c in bom["components"] if c["name"] == "werkzeug")
    assert "purl" not in component  # not the index's werkzeug 0.15.0
    assert component["properties"][0]["name"] == "stagecrawl:not-audited"
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(json.dumps(bom)) is None


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("requirements.txt", "six==not.a.ver\n"),
        (
            "poetry.lock",
            '[[package]]\nname = "six"\nversion = "not.a.ver"\nfiles = []\n\n'
            '[metadata]\nlock-version = "2.0"\n',
        ),
        (
            "uv.lock",
            'version = 1\n[[package]]\nname = "six"\nversion = "not.a.ver"\n'
            'source = { registry = "https://pypi.org/simple" }\n',
        ),
        (
            "pylock.toml",
            'lock-version = "1.0"\n[[packages]]\nname = "six"\nversion = "not.a.ver"\n',
        ),
    ],
)
def test_a_version_pep_440_cannot_read_is_reported_the_same_in_every_lock(
    advisories: str, tmp_path: Path, name: str, text: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert [(r.name, r.version) for r in parse_lock(text, name).pins] == [("six", "not.a.ver")]
    report = audit(advisories, [], [path])
    [unaudited] = report.unaudited
    assert (unaudited.name, unaudited.version, unaudited.fails) == ("six", "not.a.ver", True)
    assert "not a PEP 440 version" in unaudited.reason
    assert report.hits == [] and report.exit_code == 1  # never a silent all-clear


@pytest.mark.parametrize(
    ("text", "pins", "unaudited"),
    [
        # options pip no longer reads (23.1 dropped --install-option; the legacy ones long ago)
        ("six==1.0 --install-option=--x\n", [], [("six==1.0 --install-option=--x", True)]),
        ("--allow-external six\nsix==1.0\n", [("six", "1.0")], [("--allow-external six", True)]),
        # the options pip added since: per requirement, and a line of their own
        ("six==1.0 -C a=b --config-settings c=d\n--no-deps-for six\n", [("six", "1.0")], []),
        # pip follows one include a line (`-r` first): the `-c` beside it is not read
        ("-r base.txt -c constraints.txt\n", [], [("base.txt", True)]),
        # a wheel names its project; an empty marker is no marker (pip)
        ("./dist/thing-1.0-py3-none-any.whl\nsix==1.0;\n", [("six", "1.0")], [("thing", False)]),
    ],
)
def test_options_and_lines_as_pip_reads_them_now(
    text: str, pins: list[tuple[str, str]], unaudited: list[tuple[str, bool]]
) -> None:
    lock = parse_lock(text, "requirements.txt")
    assert [(p.name, p.version) for p in lock.pins] == pins
    assert [(u.name, u.fails) for u in lock.unaudited] == unaudited
