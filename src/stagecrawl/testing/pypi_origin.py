"""A PyPI look-alike on 127.0.0.1: what stagecrawl's PyPI tests, benches and demo crawl.

It serves what its caller gives it, and nothing of its own:
- `load_folder(DIR)`: real PyPI replies from a folder laid out as `../shared/fixtures/pypi/` is
  (Simple pages, JSON API releases, PEP 658 metadata; the project keeps no copy of them);
- `add_project(...)`: projects built in code — `synthetic_project()` (N uniform releases) or
  `build_project()` (releases described one by one: dependencies, licenses, yanks, metadata or
  none, a JSON API reply or none).
An origin started with no project says so in a warning; `load_folder` on a folder without a
Simple page raises `NoProjects`.

One host serves the three PyPI endpoints under their own paths, each a lane of its own:

- the Simple API, `/simple/<normalized>/`, in JSON (PEP 691, asked for with
  `Accept: application/vnd.pypi.simple.v1+json`) or HTML (PEP 503, the default, as on PyPI);
  a non-normalised name or a missing slash gets a 301 to the normalised page;
- the JSON API, `/pypi/<name>/json` and `/pypi/<name>/<version>/json`; any spelling other than
  the display name, or a trailing slash, gets `301` with a *relative* Location, as PyPI's CDN
  answers since 2025;
- a files host, `/files/packages/…/<filename>.metadata` (PEP 658/714 core metadata).

Unknown projects get 404 `text/html`. Replies carry an ETag (a matching If-None-Match gets 304)
and `X-PyPI-Last-Serial`. A request without a contact in its User-Agent gets 406, as PyPI
refuses generic clients. `strict()` puts one token bucket (burst 1) on each lane; `misbehave()`
serves HTML where JSON was asked, bodies that are not JSON, or 429s on demand. Everything
the server sees is in `log` with its arrival time (from TestOrigin).

`python -m stagecrawl.testing.pypi_origin --root DIR` (or `--synthetic N`) serves until
interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import fnmatch
import functools
import hashlib
import html
import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from stagecrawl.testing.origin import Rule, TestOrigin

log = logging.getLogger("stagecrawl.testing.pypi_origin")

SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
SIMPLE_HTML = "application/vnd.pypi.simple.v1+html"
LANE_PATTERNS = {"index": "/simple/*", "api": "/pypi/*", "files": "/files/*"}
NOT_FOUND_HTML = b"<html><head><title>404 Not Found</title></head><body>Not Found</body></html>"


class NoProjects(ValueError):
    """A folder given to `PyPIOrigin.load_folder` holds no Simple page to serve."""


def normalize(name: str) -> str:
    """PEP 503 (written out here so the origin stays independent of the code it tests)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def has_contact(user_agent: str) -> bool:
    """A User-Agent that says how to reach its operator: an e-mail address or a URL."""
    return "@" in user_agent or "http://" in user_agent or "https://" in user_agent


@dataclass
class Project:
    """One project as the origin holds it: its Simple page (as PyPI sent it), the JSON API
    release replies it has, and the core metadata of its files by filename."""

    display_name: str
    page: dict[str, Any]
    releases: dict[str, dict[str, Any]] = field(default_factory=dict)
    metadata: dict[str, bytes] = field(default_factory=dict)
    last_serial: int = 1

    @property
    def name(self) -> str:
        return normalize(self.display_name)

    def versions(self) -> list[str]:
        listed = self.page.get("versions")
        if isinstance(listed, list):
            return [str(v) for v in listed]
        seen: dict[str, None] = {}
        for f in self.page.get("files", []):
            seen.setdefault(version_from_filename(self.name, f["filename"]) or "", None)
        return [v for v in seen if v]

    def files_of(self, version: str) -> list[dict[str, Any]]:
        return [
            f
            for f in self.page.get("files", [])
            if version_from_filename(self.name, f["filename"]) == version
        ]


# Every route asks it of each file of a project (`files_of`): read once per name, as the
# crawler's own reader is (a PEP 440 parse a file a request made the origin the bench's bottleneck)
@functools.lru_cache(maxsize=65536)
def version_from_filename(project: str, filename: str) -> str | None:
    """The version part of a wheel or sdist name (the origin's own reading, for its routes)."""
    stem = re.sub(r"\.(whl|tar\.gz|zip|tar\.bz2|egg|exe|tgz)$", "", filename)
    if filename.endswith((".whl", ".egg")):
        parts = stem.split("-")
        return parts[1] if len(parts) >= 5 else None
    prefix_len = len(project)
    if normalize(stem[:prefix_len]) == project and stem[prefix_len : prefix_len + 1] == "-":
        # a built distribution's platform is no part of its version (PyPI lists `0.9.6` for
        # bdist_dumb's hbmqtt-0.9.6.linux-x86_64.tar.gz), unless it is PEP 440's (a local
        # label: `1.0+cpu.win32`)
        version = stem[prefix_len + 1 :]
        if _pep440(version) is not None:
            return version
        platforms = r"linux-|win32|win-|macosx-|freebsd-|openbsd-|netbsd-|cygwin-|mingw"
        return re.sub(rf"\.({platforms}|solaris-|sunos-|aix-|darwin-).*$", "", version)
    return None


def _pep440(text: str) -> Any:
    """The PEP 440 version `text` is (equal when PEP 440 says so: 3.13 == 3.13.0), or None."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion:
        return None


def _pypi_versions(name: str, page: dict[str, Any]) -> list[str]:
    """The PEP 700 `versions` as PyPI would send them. Poetry's fixture pages list the versions
    as its tests requested them (`3.13.0`, `0.3.0dev1`); PyPI lists each release under the
    version it was uploaded as (`3.13`, `0.3.0.dev1`, the files' spelling), PEP 440-sorted."""
    spelled: dict[Any, str] = {}
    for f in page.get("files", []):
        version = version_from_filename(name, f["filename"])
        if version:
            spelled.setdefault(_pep440(version) or version, version)
    for listed in page.get("versions") or []:
        spelled.setdefault(_pep440(str(listed)) or str(listed), str(listed))

    def order(text: str) -> tuple[int, Any]:
        parsed = _pep440(text)
        return (0, text) if parsed is None else (1, parsed)

    return sorted(spelled.values(), key=order)


def _file_path(url: str) -> str:
    """`https://files.pythonhosted.org/packages/ab/cd/…/f.whl` → `packages/ab/cd/…/f.whl`."""
    if "/packages/" in url:
        return "packages/" + url.split("/packages/", 1)[1]
    return "packages/" + url.rsplit("/", 1)[-1]


class PyPIOrigin(TestOrigin):
    """A PyPI look-alike (see the module docstring). It serves the projects it is given:
    `projects`, `add_project()`, or `load_folder()`. `require_contact=False` turns the 406 for
    generic User-Agents off."""

    def __init__(
        self, port: int = 0, require_contact: bool = True, projects: Iterable[Project] = ()
    ) -> None:
        super().__init__(None, port)
        self.projects: dict[str, Project] = {}
        self.require_contact = require_contact
        self._misbehaviour: list[tuple[str, str]] = []
        for project in projects:
            self.add_project(project)

    # -- content --------------------------------------------------------------------------
    def add_project(self, project: Project) -> Project:
        self.projects[project.name] = project
        return project

    def load_folder(self, root: Path) -> PyPIOrigin:
        """Every project of a folder laid out as `../shared/fixtures/pypi/` is:

        - `simple/<source>/<name>.json`: one PEP 691 page a project (a page whose file is not
          named for its project, a variant such as `argset-700.json`, is left out; of two
          sources holding one project the first in name order serves it);
        - `json/<source>/<name>/<version>.json`: JSON API release replies of those projects
          (the first source in name order wins a release two of them hold);
        - `simple/pep658-metadata/<source>/<filename>.metadata`: the core metadata of the
          pages' files.

        Raises NoProjects when the folder holds no such page (or is not there)."""
        simple = root / "simple"
        metadata = {
            p.name[: -len(".metadata")]: p.read_bytes()
            for p in sorted(simple.glob("pep658-metadata/*/*.metadata"))
        }
        pages: dict[str, dict[str, Any]] = {}
        for page_path in sorted(simple.glob("*/*.json")):
            if page_path.parent.name == "pep658-metadata":
                continue
            page = json.loads(page_path.read_text(encoding="utf-8"))
            name = normalize(str(page.get("name") or page_path.stem))
            if normalize(page_path.stem) == name:
                pages.setdefault(name, page)
        if not pages:
            raise NoProjects(
                f"no PyPI project to serve under {root}: expected Simple pages at "
                "simple/<source>/<name>.json, laid out as ../shared/fixtures/pypi/ is"
            )
        for name, page in sorted(pages.items()):
            page["versions"] = _pypi_versions(name, page)
            releases: dict[str, dict[str, Any]] = {}
            for release in sorted(root.glob(f"json/*/{name}/*.json")):
                document = json.loads(release.read_text(encoding="utf-8"))
                releases.setdefault(str(document["info"]["version"]), document)
            display = next(
                (str(r["info"]["name"]) for r in releases.values() if r.get("info")), name
            )
            own = {
                f["filename"]: metadata[f["filename"]]
                for f in page.get("files", [])
                if f["filename"] in metadata
            }
            serial = page.get("meta", {}).get("_last-serial") or 1000 + len(name)
            self.add_project(Project(display, page, releases, own, last_serial=serial))
        return self

    def project(self, name: str) -> Project:
        return self.projects[normalize(name)]

    def yank(self, name: str, version: str, reason: str | bool = True) -> None:
        """Yank (or with `reason=False` un-yank) every file of a version; the serial moves."""
        project = self.project(name)
        for f in project.files_of(version):
            f["yanked"] = reason
        project.last_serial += 1

    async def start_async(self) -> PyPIOrigin:
        await super().start_async()
        if not self.projects:
            log.warning(
                "the PyPI look-alike at %s serves no project: give it a folder laid out as "
                "../shared/fixtures/pypi/ (load_folder) or projects built in code (add_project)",
                self.url,
            )
        return self

    # -- politeness and misbehaviour ------------------------------------------------------
    def strict(
        self,
        index_rate: float,
        api_rate: float,
        files_rate: float,
        burst: int = 2,
        retry_after: str | None = None,
    ) -> dict[str, Rule]:
        """One token bucket per lane, as a registry that bans the impolite would. A client
        pacing at burst 1 never needs the second token; it absorbs the jitter between the
        client's send and the server's arrival times (as tests/crates/test_pacing does)."""
        rates = {"index": index_rate, "api": api_rate, "files": files_rate}
        return {
            lane: self.rule(
                LANE_PATTERNS[lane], bucket_rate=rate, bucket_burst=burst, retry_after=retry_after
            )
            for lane, rate in rates.items()
        }

    def misbehave(self, pattern: str, kind: str) -> None:
        """From now on answer requests whose path matches `pattern` with: `html` (a 200 HTML
        page where JSON was asked), `not-json` (a 200 `application/json` body that is not
        JSON), `wrong-shape` (valid JSON of the wrong shape)."""
        if kind not in ("html", "not-json", "wrong-shape"):
            raise ValueError(f"unknown misbehaviour {kind!r}")
        self._misbehaviour.append((pattern, kind))

    def clear_misbehaviour(self) -> None:
        self._misbehaviour.clear()

    # -- serving --------------------------------------------------------------------------
    async def _respond(self, request: web.Request, rules: list[Rule]) -> web.StreamResponse:
        agent = request.headers.get("User-Agent", "")
        if self.require_contact and not has_contact(agent):
            return web.Response(
                status=406,
                text="Please identify your client with a contact in the User-Agent.",
                content_type="text/plain",
            )
        return await super()._respond(request, rules)

    async def route(self, request: web.Request, rules: list[Rule]) -> web.StreamResponse | None:
        for pattern, kind in self._misbehaviour:
            if fnmatch.fnmatchcase(request.path, pattern):
                return self._misbehaving(kind)
        path = request.path
        if path == "/simple/":
            return self._simple_index(request)
        if path.startswith("/simple/"):
            return self._simple_page(request, path[len("/simple/") :])
        if path.startswith("/pypi/"):
            return self._json_api(request, path[len("/pypi/") :])
        if path.startswith("/files/"):
            return self._files(request, path[len("/files/") :])
        return None

    def _misbehaving(self, kind: str) -> web.Response:
        if kind == "html":
            page = b"<!DOCTYPE html><html><body><h1>Just a moment...</h1></body></html>"
            return web.Response(status=200, body=page, content_type="text/html")
        if kind == "not-json":
            return web.Response(status=200, body=b"\x00\x01 garbage {", content_type=SIMPLE_JSON)
        return web.Response(
            status=200,
            body=b'{"meta": {"api-version": "1.4"}, "files": "nope"}',
            content_type=SIMPLE_JSON,
        )

    def _reply(
        self, request: web.Request, body: bytes, content_type: str, serial: int | None
    ) -> web.Response:
        etag = '"' + hashlib.sha256(content_type.encode() + body).hexdigest()[:24] + '"'
        headers = {"ETag": etag, "Cache-Control": "max-age=900, public", "Vary": "Accept"}
        if serial is not None:
            headers["X-PyPI-Last-Serial"] = str(serial)
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers=headers)
        headers["Content-Type"] = content_type
        return web.Response(status=200, body=body, headers=headers)

    @staticmethod
    def _not_found() -> web.Response:
        return web.Response(status=404, body=NOT_FOUND_HTML, content_type="text/html")

    @staticmethod
    def _redirect(location: str) -> web.Response:
        return web.Response(status=301, reason="Redirect", headers={"Location": location})

    def _negotiate(self, request: web.Request) -> str | None:
        """The content type to answer with, from Accept (q-values honoured), or None (406)."""
        accept = request.headers.get("Accept", "")
        if not accept.strip():
            return "text/html"
        best: tuple[float, str] | None = None
        for part in accept.split(","):
            media, *params = (p.strip() for p in part.split(";"))
            q = 1.0
            for param in params:
                if param.startswith("q="):
                    with contextlib.suppress(ValueError):
                        q = float(param[2:])
            chosen = {
                SIMPLE_JSON: SIMPLE_JSON,
                SIMPLE_HTML: SIMPLE_HTML,
                "text/html": "text/html",
                "*/*": "text/html",
            }.get(media.lower())
            if chosen and q > 0 and (best is None or q > best[0]):
                best = (q, chosen)
        return best[1] if best else None

    def _simple_index(self, request: web.Request) -> web.Response:
        kind = self._negotiate(request)
        if kind is None:
            return web.Response(status=406, text="unacceptable")
        serial = max((p.last_serial for p in self.projects.values()), default=0)
        if kind == SIMPLE_JSON:
            doc = {
                "meta": {"api-version": "1.4", "_last-serial": serial},
                "projects": [
                    {"name": p.display_name, "_last-serial": p.last_serial}
                    for p in sorted(self.projects.values(), key=lambda p: p.name)
                ],
            }
            return self._reply(request, json.dumps(doc).encode(), kind, serial)
        links = "".join(
            f'<a href="/simple/{p.name}/">{html.escape(p.display_name)}</a>\n'
            for p in sorted(self.projects.values(), key=lambda p: p.name)
        )
        body = f"<!DOCTYPE html><html><body>\n{links}</body></html>".encode()
        return self._reply(request, body, kind, serial)

    def _page_document(self, project: Project) -> dict[str, Any]:
        doc = copy.deepcopy(project.page)
        doc.setdefault("meta", {"api-version": "1.0"})
        doc["meta"]["_last-serial"] = project.last_serial
        doc["name"] = project.name
        for f in doc.get("files", []):
            f["url"] = f"{self.url}/files/{_file_path(str(f['url']))}"
        return doc

    def _simple_page(self, request: web.Request, rest: str) -> web.Response:
        name = rest.rstrip("/")
        if "/" in name or not name:
            return self._not_found()
        if normalize(name) != name or not rest.endswith("/"):
            return self._redirect(f"/simple/{normalize(name)}/")
        project = self.projects.get(name)
        if project is None:
            return self._not_found()
        kind = self._negotiate(request)
        if kind is None:
            return web.Response(status=406, text="unacceptable")
        doc = self._page_document(project)
        if kind == SIMPLE_JSON:
            return self._reply(request, json.dumps(doc).encode(), kind, project.last_serial)
        anchors = []
        for f in doc.get("files", []):
            hashes = f.get("hashes", {})
            digest = ("sha256", hashes["sha256"]) if "sha256" in hashes else None
            href = f["url"] + (f"#{digest[0]}={digest[1]}" if digest else "")
            attrs = [f'href="{html.escape(href)}"']
            if f.get("requires-python"):
                attrs.append(f'data-requires-python="{html.escape(f["requires-python"])}"')
            if f.get("yanked"):
                reason = f["yanked"] if isinstance(f["yanked"], str) else ""
                attrs.append(f'data-yanked="{html.escape(reason)}"')
            meta = f.get("core-metadata")
            if isinstance(meta, dict) and meta.get("sha256"):
                attrs.append(f'data-core-metadata="sha256={meta["sha256"]}"')
            anchors.append(f"<a {' '.join(attrs)}>{html.escape(f['filename'])}</a><br />")
        body = (
            "<!DOCTYPE html><html><head>"
            f'<meta name="pypi:repository-version" content="1.0">'
            f"<title>Links for {html.escape(project.name)}</title></head><body>"
            f"<h1>Links for {html.escape(project.name)}</h1>\n"
            + "\n".join(anchors)
            + "\n</body></html>"
        ).encode()
        return self._reply(request, body, kind, project.last_serial)

    def _json_api(self, request: web.Request, rest: str) -> web.Response:
        parts = rest.split("/")
        # <name>/json, <name>/json/, <name>/<version>/json, <name>/<version>/json/
        trailing = parts[-1] == ""
        if trailing:
            parts = parts[:-1]
        if len(parts) not in (2, 3) or parts[-1] != "json":
            return self._not_found()
        project = self.projects.get(normalize(parts[0]))
        if project is None:
            return self._not_found()
        if trailing or parts[0] != project.display_name:
            return self._redirect("/pypi/" + "/".join([project.display_name, *parts[1:]]))
        if len(parts) == 2:
            doc = self._project_document(project)
        else:
            release = self._release_document(project, parts[1])
            if release is None:
                return self._not_found()
            doc = release
        return self._reply(
            request, json.dumps(doc).encode(), "application/json", project.last_serial
        )

    def _json_file(self, project: Project, f: dict[str, Any]) -> dict[str, Any]:
        """A Simple API file entry as the JSON API spells it."""
        yanked = f.get("yanked", False)
        digests = dict(f.get("hashes", {}))
        filename = str(f["filename"])
        return {
            "filename": filename,
            "url": f"{self.url}/files/{_file_path(str(f['url']))}",
            "size": f.get("size"),
            "digests": digests,
            "md5_digest": digests.get("md5"),
            "packagetype": "bdist_wheel" if filename.endswith(".whl") else "sdist",
            "requires_python": f.get("requires-python"),
            "upload_time_iso_8601": f.get("upload-time"),
            "yanked": bool(yanked),
            "yanked_reason": yanked if isinstance(yanked, str) else None,
        }

    def _release_document(self, project: Project, version: str) -> dict[str, Any] | None:
        stored = project.releases.get(version)
        files = project.files_of(version)
        if stored is None and not files and version not in project.versions():
            return None
        if stored is not None:
            doc = copy.deepcopy(stored)
        else:
            # A release PyPI knows only from its files: what the JSON API says of an old sdist
            # upload (requires_dist null: the dependencies are unknown, not none).
            doc = {
                "info": {
                    "name": project.display_name,
                    "version": version,
                    "summary": None,
                    "license": None,
                    "license_expression": None,
                    "classifiers": [],
                    "requires_dist": None,
                    "requires_python": None,
                    "project_urls": None,
                    "yanked": False,
                    "yanked_reason": None,
                },
                "vulnerabilities": [],
            }
        doc["urls"] = [self._json_file(project, f) for f in files]
        if files and all(f.get("yanked") for f in files):
            reason = files[0]["yanked"]
            doc["info"]["yanked"] = True
            doc["info"]["yanked_reason"] = reason if isinstance(reason, str) else None
        doc["last_serial"] = project.last_serial
        doc.pop("releases", None)
        return doc

    def _project_document(self, project: Project) -> dict[str, Any]:
        versions = project.versions()
        releases = {v: [self._json_file(project, f) for f in project.files_of(v)] for v in versions}
        shown = next((v for v in reversed(versions) if v in project.releases), None)
        if shown is None and versions:
            shown = versions[-1]
        base = self._release_document(project, shown) if shown else None
        doc = base or {"info": {"name": project.display_name, "version": None}, "urls": []}
        doc["releases"] = releases
        doc["last_serial"] = project.last_serial
        return doc

    def _files(self, request: web.Request, rest: str) -> web.Response:
        filename = rest.rsplit("/", 1)[-1]
        if not filename.endswith(".metadata"):
            return self._not_found()  # distributions themselves are not served
        dist = filename[: -len(".metadata")]
        for project in self.projects.values():
            if dist in project.metadata:
                return self._reply(request, project.metadata[dist], "binary/octet-stream", None)
        return self._not_found()


@dataclass
class Release:
    """One release of a project built in code (`build_project`), as its files and core metadata
    declare it. Its dependencies are known where its metadata is served (`metadata`) or its JSON
    API reply lists them (`json_api`); with neither, PyPI cannot say (requires_dist null)."""

    version: str
    requires: list[str] = field(default_factory=list)  # Requires-Dist lines
    license: str | None = "MIT"  # the free-text License field
    license_expression: str | None = None  # PEP 639
    classifiers: list[str] = field(default_factory=list)
    requires_python: str | None = ">=3.8"
    yanked: bool | str = False  # True, or the reason given
    metadata: bool = True  # its wheel's core metadata is served (PEP 658)
    json_api: bool = False  # the JSON API has a reply of its own for it
    upload_time: str | None = None  # ISO 8601 with Z; a date in 2024 when None


def build_project(
    name: str, releases: Iterable[Release], summary: str | None = None, last_serial: int = 1
) -> Project:
    """A project of the given releases, each one wheel (with core metadata when the release
    says so) and one sdist. `name` is the display name (`Demo.Yaml`); files are named as
    uploads spell them (`Demo_Yaml-1.0-py3-none-any.whl`, `Demo.Yaml-1.0.tar.gz`)."""
    files: list[dict[str, Any]] = []
    metadata: dict[str, bytes] = {}
    documents: dict[str, dict[str, Any]] = {}
    listed: list[str] = []
    for i, release in enumerate(releases):
        version = release.version
        listed.append(version)
        stem = f"{re.sub(r'[-_.]+', '_', name)}-{version}"
        digest = hashlib.sha256(stem.encode()).hexdigest()
        text = _core_metadata(name, release, summary)
        core = {"sha256": hashlib.sha256(text).hexdigest()} if release.metadata else False
        uploaded = release.upload_time or f"2024-01-{1 + i % 28:02d}T00:00:00.000000Z"
        for filename, meta in (
            (f"{stem}-py3-none-any.whl", core),
            (f"{name}-{version}.tar.gz", False),
        ):
            files.append(
                {
                    "filename": filename,
                    "url": f"https://files.pythonhosted.org/packages/{digest[:2]}/{digest[2:4]}/{digest[4:]}/{filename}",
                    "hashes": {"sha256": digest},
                    "requires-python": release.requires_python,
                    "size": 1000 + i,
                    "upload-time": uploaded,
                    "yanked": release.yanked,
                    "core-metadata": meta,
                    "data-dist-info-metadata": meta,
                }
            )
            if meta:
                metadata[filename] = text
        if release.json_api:
            documents[version] = json_api_release(name, release, summary)
    page: dict[str, Any] = {
        "meta": {"api-version": "1.1"},
        "name": normalize(name),
        "versions": listed,
        "files": files,
    }
    return Project(name, page, documents, metadata, last_serial=last_serial)


def _core_metadata(name: str, release: Release, summary: str | None) -> bytes:
    """The wheel's METADATA (email-header form), as PEP 658 serves it."""
    lines = [
        f"Metadata-Version: {'2.4' if release.license_expression else '2.1'}",
        f"Name: {name}",
        f"Version: {release.version}",
    ]
    if summary:
        lines.append(f"Summary: {summary}")
    if release.license is not None:
        lines.append(f"License: {release.license}")
    if release.license_expression:
        lines.append(f"License-Expression: {release.license_expression}")
    lines += [f"Classifier: {c}" for c in release.classifiers]
    lines += [f"Requires-Dist: {r}" for r in release.requires]
    return ("\n".join(lines) + "\n").encode()


def json_api_release(name: str, release: Release, summary: str | None) -> dict[str, Any]:
    """The JSON API's reply for the release (`urls` and `last_serial` are the origin's)."""
    return {
        "info": {
            "name": name,
            "version": release.version,
            "summary": summary,
            "license": release.license,
            "license_expression": release.license_expression,
            "classifiers": list(release.classifiers),
            "requires_dist": list(release.requires) or None,  # PyPI: null when none
            "requires_python": release.requires_python,
            "project_urls": None,
            "yanked": bool(release.yanked),
            "yanked_reason": release.yanked if isinstance(release.yanked, str) else None,
        },
        "vulnerabilities": [],
    }


def synthetic_project(
    name: str,
    versions: int,
    requires: list[str] | None = None,
    yanked: set[int] | None = None,
    with_metadata: bool = True,
) -> Project:
    """A project of `versions` releases `1.0.<i>`, each one wheel (with core metadata when
    `with_metadata`) and one sdist; the releases at the indices in `yanked` are yanked."""
    return build_project(
        name,
        [
            Release(
                f"1.0.{i}",
                requires=list(requires or []),
                yanked=i in (yanked or set()),
                metadata=with_metadata,
            )
            for i in range(versions)
        ],
    )


def main() -> None:
    """`python -m stagecrawl.testing.pypi_origin --root DIR | --synthetic N`: serve the PyPI
    replies of a folder laid out as ../shared/fixtures/pypi/, or N synthetic projects, until
    interrupted."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--root", type=Path, help="a folder laid out as ../shared/fixtures/pypi/")
    parser.add_argument("--synthetic", type=int, metavar="N", help="serve N synthetic projects")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    origin = PyPIOrigin(args.port)
    try:
        if args.root is not None:
            origin.load_folder(args.root)
        for n in range(args.synthetic or 0):
            origin.add_project(synthetic_project(f"synthetic-{n}", 3, requires=["six>=1.0"]))
    except NoProjects as exc:
        parser.exit(2, f"error: {exc}\n")
    if not origin.projects:
        parser.exit(2, "error: nothing to serve: give --root DIR or --synthetic N\n")

    async def serve() -> None:
        await origin.start_async()
        print(origin.url, flush=True)
        await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
