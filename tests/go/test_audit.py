"""`go audit` of real go.mod files (prometheus, ../shared/fixtures/go/locks) against the real Go
vulnerability database (vulndb.zip), compared with an evaluator written here from the OSV
schema alone (semver's precedence, events sorted, `introduced`/`fixed`/`last_affected`,
withdrawn entries out; no stagecrawl code): module and stdlib hits. A local-path replace is
never audited, a clean go.mod exits 0, a bad go.mod or go.sum is one line and exit 2."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import zipfile
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import semver

from tests.cli import stagecrawl
from tests.services import SHARED

GO = SHARED / "fixtures" / "go"
VULNDB = GO / "vulndb" / "vulndb.zip"
PROMETHEUS = GO / "locks" / "prometheus"


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared Go fixtures are not laid beside the checkout)")
    return path


def order(version: str) -> semver.Version:
    return semver.Version.parse(version.removeprefix("v"))


@cache
def advisories() -> list[dict[str, Any]]:
    with zipfile.ZipFile(need(VULNDB)) as archive:
        names = [n for n in archive.namelist() if n.startswith("ID/") and n.endswith(".json")]
        return [json.loads(archive.read(n)) for n in names]


def affected(entry: dict[str, Any], name: str, version: str) -> bool:
    """The OSV schema's evaluation of one package version against one entry."""
    found = False
    for item in entry.get("affected", []):
        package = item.get("package", {})
        if package.get("ecosystem") != "Go" or package.get("name") != name:
            continue
        ranges = [r for r in item.get("ranges") or [] if r.get("type") == "SEMVER"]
        if not ranges and not item.get("versions"):
            return True  # no ranges: every version
        at = order(version)
        for r in ranges:
            pairs = [(k, v) for e in r["events"] for k, v in e.items()]
            zero = [p for p in pairs if p[1] == "0"]
            events = zero + sorted(
                (p for p in pairs if p[1] != "0"),
                key=lambda e: (order(e[1]), e[0] != "introduced"),
            )
            inside = False
            for kind, bound in events:
                if kind == "introduced" and (bound == "0" or order(bound) <= at):
                    inside = True
                elif (kind == "fixed" and order(bound) <= at) or (
                    kind == "last_affected" and order(bound) < at
                ):
                    inside = False
            found = found or inside
    return found


def expected_hits(pins: list[tuple[str, str]]) -> set[tuple[str, str, str]]:
    return {
        (name, version, entry["id"])
        for entry in advisories()
        if not entry.get("withdrawn")
        for name, version in pins
        if affected(entry, name, version)
    }


def gomod_pins(text: str) -> list[tuple[str, str]]:
    """A go.mod's requires, read here with a regular expression (no stagecrawl code)."""
    module = r"[a-z0-9.-]+\.[a-z]+(?:/\S*)?"
    pins = re.findall(rf"^\s*(?:require\s+)?({module})\s+(v\S+)", text, flags=re.M)
    return [(p, v) for p, v in pins]


@pytest.fixture(scope="module")
def vulns_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    db = f"sqlite:///{tmp_path_factory.mktemp('go-vulns') / 'v.db'}"
    done = stagecrawl("go", "vulns", "--source", str(need(VULNDB)), "--scope", "all", "--db", db)
    assert done.returncode == 0, done.stderr
    return db


def audit(db: str, *args: str) -> tuple[int, dict[str, Any]]:
    done = stagecrawl("go", "audit", *args, "--db", db, "--format", "json")
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def test_prometheus_v2_37_matches_the_osv_evaluation(vulns_db: str, tmp_path: Path) -> None:
    source = need(PROMETHEUS / "v2.37.0" / "go.mod").read_text()
    aws = dict(gomod_pins(source))["github.com/aws/aws-sdk-go"]
    # two local-path replaces (a wildcard and a versioned one) of modules with advisories
    text = source + (
        "\nreplace github.com/docker/docker => ./third_party/docker\n"
        f"replace github.com/aws/aws-sdk-go {aws} => ../aws-fork\n"
    )
    gomod = tmp_path / "go.mod"
    gomod.write_text(text)
    code, report = audit(vulns_db, "--lockfile", str(gomod))
    replaced = {"github.com/docker/docker", "github.com/aws/aws-sdk-go"}
    pins = [(p, v) for p, v in gomod_pins(source) if p not in replaced]
    pins = [(p, v) for p, v in pins if p != "k8s.io/klog"] + [
        ("github.com/simonpasquier/klog-gokit", "v0.3.0"),
        ("stdlib", "1.17.0"),  # the go line, no toolchain line
    ]
    want = expected_hits(pins)
    got = {(h["module"], h["version"], h["id"]) for h in report["hits"]}
    assert got == want
    assert {name for name, _v, _id in got} >= {"golang.org/x/net", "stdlib"}
    assert not {name for name, _v, _id in got} & replaced
    assert code == 1
    not_audited = " ".join(f"{n['module']} {n['reason']}" for n in report["not_audited"])
    assert "github.com/docker/docker" in not_audited and "../aws-fork" in not_audited
    assert any(h["functions"] for h in report["hits"])  # the affected symbols are shown


def test_head_toolchain_less_go_line_and_indirect_requires(vulns_db: str) -> None:
    gomod = need(PROMETHEUS / "HEAD-d15adb9ad7e5" / "go.mod")
    code, report = audit(vulns_db, "--lockfile", str(gomod))
    text = gomod.read_text()
    replaced = {"cloud.google.com/go": "v0.123.0"}
    excluded = set(re.findall(r"exclude\s+(\S+ v\S+)", text))
    pins = [(p, replaced.get(p, v)) for p, v in gomod_pins(text) if f"{p} {v}" not in excluded] + [
        ("stdlib", "1.25.10")
    ]
    got = {(h["module"], h["version"], h["id"]) for h in report["hits"]}
    assert got == expected_hits(pins)
    assert ("github.com/aws/aws-sdk-go", "v1.55.8", "GO-2022-0635") in got  # introduced: 0
    assert code == 1


def test_a_clean_go_mod_exits_0(vulns_db: str, tmp_path: Path) -> None:
    gomod = tmp_path / "go.mod"
    gomod.write_text("module example.com/clean\n\ngo 1.17\ntoolchain go1.99.0\n\n"
                     "require golang.org/x/text v0.99.0\n")  # fmt: skip
    code, report = audit(vulns_db, "--lockfile", str(gomod))
    assert (code, report["hits"]) == (0, [])


def test_go_sum_counts_only_below_go_1_17(vulns_db: str, tmp_path: Path) -> None:
    old = tmp_path / "old"
    shutil.copytree(need(PROMETHEUS / "v2.20.0"), old)
    _code, report = audit(vulns_db, "--lockfile", str(old / "go.mod"))
    modules = {h["module"] for h in report["hits"]}
    direct = {p for p, _v in gomod_pins((old / "go.mod").read_text())}
    assert modules - direct - {"stdlib"}, "go 1.13: go.sum's modules are audited too"
    new = tmp_path / "new"
    shutil.copytree(need(PROMETHEUS / "v2.37.0"), new)
    done = stagecrawl("go", "audit", "--lockfile", str(new / "go.sum"), "--db", vulns_db)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "go.mod" in done.stderr


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("go.mod", "module x\nrequire (\n", "unterminated"),
        ("go.mod", "module x\nrequire a.example/b\n", "usage"),
        ("go.mod", 'module x\nrequire "a.example/b v1.0.0\n', "unterminated string"),
        ("go.sum", "a.example/b v1.0.0\n", "not a go.sum line"),
        ("go.work", "go 1.22\nuse ./missing\n", "cannot read"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    lock = tmp_path / name
    lock.write_text(text)
    db = tmp_path / "never.db"
    for command in ("audit", "lock"):
        done = stagecrawl("go", command, "--lockfile", str(lock), "--db", f"sqlite:///{db}")
        assert done.returncode == 2, (command, done.stderr)
        assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    assert not db.exists()


def test_stagecrawl_audit_dir_includes_go_mod(vulns_db: str, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "go.mod").write_text(
        "module example.com/p\n\ngo 1.22.1\n\nrequire github.com/aws/aws-sdk-go v1.55.8\n"
    )
    done = stagecrawl("audit", str(project), "--db", vulns_db, "--format", "json")
    assert done.returncode == 1, done.stderr
    assert "GO-2022-0635" in done.stdout


def test_sarif_points_at_the_require_line_and_the_purl_is_golang(
    vulns_db: str, tmp_path: Path
) -> None:
    gomod = tmp_path / "go.mod"
    gomod.write_text("module example.com/p\n\ngo 1.22.1\n\nrequire (\n"
                     "\tgithub.com/aws/aws-sdk-go v1.55.8\n)\n")  # fmt: skip
    done = stagecrawl("go", "audit", "--lockfile", str(gomod), "--db", vulns_db,
                      "--format", "sarif", "--sarif-root", str(tmp_path))  # fmt: skip
    assert done.returncode == 1, done.stderr
    results = json.loads(done.stdout)["runs"][0]["results"]
    aws = [r for r in results if "GO-2022-0635" in json.dumps(r)]
    region = aws[0]["locations"][0]["physicalLocation"]
    assert region["artifactLocation"]["uri"] == "go.mod" and region["region"]["startLine"] == 6
    bom = stagecrawl("go", "audit", "--lockfile", str(gomod), "--db", vulns_db,
                     "--format", "cyclonedx")  # fmt: skip
    assert "pkg:golang/github.com/aws/aws-sdk-go@v1.55.8" in bom.stdout


def test_vendor_modules_txt_is_read_with_its_replacements(vulns_db: str, tmp_path: Path) -> None:
    vendor = need(PROMETHEUS / "v2.20.0" / "vendor" / "modules.txt")
    lines = [line[2:].split() for line in vendor.read_text().splitlines() if line.startswith("# ")]
    expected = {(w[-2], w[-1]) if "=>" in w else (w[0], w[1]) for w in lines}
    db = f"sqlite:///{tmp_path / 'lock.db'}"
    done = stagecrawl("go", "lock", "--lockfile", str(vendor), "--db", db, "--format", "json")
    assert done.returncode == 0, done.stderr
    connection = sqlite3.connect(tmp_path / "lock.db")
    stored = set(connection.execute("SELECT NAME, VERSION FROM TB_COMP_LIB_GOLANG_LIST"))
    connection.close()
    assert stored == expected and ("github.com/simonpasquier/klog-gokit", "v0.1.0") in stored


def test_go_work_reads_every_used_module_and_keeps_the_workspace_local(tmp_path: Path) -> None:
    work = need(PROMETHEUS / "HEAD-d15adb9ad7e5" / "go.work")
    db = f"sqlite:///{tmp_path / 'work.db'}"
    done = stagecrawl("go", "lock", "--lockfile", str(work), "--db", db, "--format", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)["inputs"][0]
    local = [n for n in report["not_from_the_registry"] if "workspace" in n]
    assert len(local) == 5  # the five `use`d modules themselves
    connection = sqlite3.connect(tmp_path / "work.db")
    names = {n for (n,) in connection.execute("SELECT DISTINCT NAME FROM TB_COMP_LIB_GOLANG_LIST")}
    connection.close()
    compliance = gomod_pins((work.parent / "compliance" / "go.mod").read_text())
    assert {p for p, _v in compliance} - {"github.com/prometheus/prometheus"} <= names
    assert "github.com/prometheus/prometheus" not in names


def test_lock_reads_a_repositorys_go_mod_at_each_tag(tmp_path: Path) -> None:
    import subprocess

    repo = tmp_path / "app"
    repo.mkdir()

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                       env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
                            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org",
                            "PATH": "/usr/bin:/bin"})  # fmt: skip

    git("init", "-q")
    for tag, version in (("v1.0.0", "v0.1.0"), ("v1.1.0", "v0.2.0")):
        (repo / "go.mod").write_text(
            f"module example.com/app\n\ngo 1.21\n\nrequire example.com/dep {version}\n"
            "replace example.com/local => ./local\n"
        )
        git("add", "go.mod")
        git("commit", "-qm", tag)
        git("tag", tag)
    # a workspace: its go.work is read, not the go.mod beside it
    (repo / "svc").mkdir()
    (repo / "svc" / "go.mod").write_text(
        "module example.com/svc\n\ngo 1.22\n\nrequire example.com/dep v0.3.0\n"
    )
    (repo / "go.work").write_text("go 1.22\n\nuse (\n\t./svc\n\t../outside\n)\n")
    (tmp_path / "outside").mkdir()  # beside the repository, never in a tag's tree
    (tmp_path / "outside" / "go.mod").write_text(
        "module example.com/outside\n\ngo 1.22\n\nrequire example.com/secret v9.9.9\n"
    )
    git("add", "-A")
    git("commit", "-qm", "workspace")
    git("tag", "v1.2.0")
    # neither: the vendor folder's modules.txt (go < 1.17 without modules)
    git("rm", "-rq", "go.mod", "go.work", "svc")
    (repo / "vendor").mkdir()
    (repo / "vendor" / "modules.txt").write_text("# example.com/dep v0.4.0\nexample.com/dep\n")
    git("add", "-A")
    git("commit", "-qm", "vendor")
    git("tag", "v1.3.0")
    db = f"sqlite:///{tmp_path / 'tags.db'}"
    done = stagecrawl("go", "lock", str(repo), "--all-tags", "--db", db,
                      "--cache-dir", str(tmp_path / "cache"), "--format", "json")  # fmt: skip
    # the workspace member outside the tree is said, never read, and fails the run as any
    # requirement that cannot be pinned does (the rest is registered all the same)
    assert done.returncode == 1, done.stderr
    assert "use ../outside: outside the tree, not read" in done.stderr
    connection = sqlite3.connect(tmp_path / "tags.db")
    rows = set(connection.execute("SELECT NAME, VERSION, REF_TAGS FROM TB_COMP_LIB_GOLANG_LIST"))
    connection.close()
    assert {(n, v) for n, v, _t in rows} == {
        ("example.com/dep", "v0.1.0"),
        ("example.com/dep", "v0.2.0"),
        ("example.com/dep", "v0.3.0"),
        ("example.com/dep", "v0.4.0"),
    }
    tags_of = {v: tags for _n, v, tags in rows}
    assert "app@v1.1.0" in tags_of["v0.2.0"]
    assert "app@v1.2.0" in tags_of["v0.3.0"] and "app@v1.3.0" in tags_of["v0.4.0"]
    assert "app@v1.2.0" not in tags_of["v0.2.0"]  # the go.mod beside go.work is not read
    inputs = {i["label"]: i for i in json.loads(done.stdout)["inputs"]}
    assert inputs["app@v1.2.0"]["lock"] == "go.work"
    assert inputs["app@v1.3.0"]["lock"] == "vendor/modules.txt"
    # named by the tag's label, not by the temporary folder the tag was read from
    assert inputs["app@v1.2.0"]["not_from_the_registry"] == [
        "example.com/svc (app@v1.2.0 go.work): a module of the workspace (local)"
    ]
    assert inputs["app@v1.2.0"]["unpinned"] == [
        "../outside (app@v1.2.0 go.work): use ../outside: outside the tree, not read"
    ]
    assert "stagecrawl-tag-" not in done.stdout + done.stderr
