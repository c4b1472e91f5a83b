"""The Simple API's project page in its JSON form (PEP 691), authoritative for which versions
exist: PEP 700 `versions`, `files` with hashes, `requires-python`, `size`, `upload-time`,
`yanked` (PEP 592) and `core-metadata` (PEP 714; `data-dist-info-metadata`, PEP 658's
spelling, is read too). Keys it does not know are ignored; an api-version other than 1.x is
refused (PEP 629)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any
from urllib.parse import urljoin

from stagecrawl.engine.fetcher import Validators
from stagecrawl.errors import UnreadableAnswer
from stagecrawl.jsoncodec import loads, text
from stagecrawl.pypi.names import normalize
from stagecrawl.pypi.versions import parse, version_key
from stagecrawl.sca.ecosystem import parse_time

SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
# archives, and the old platform installers (bdist_wininst, bdist_msi, bdist_rpm, dmg)
_SUFFIXES = (".whl", ".egg", ".tar.gz", ".zip", ".tar.bz2", ".tgz", ".tar.xz", ".tar", ".exe",
             ".msi", ".rpm", ".dmg")  # fmt: skip
# a file's fields that VERSION's FILES column keeps, with its hashes
_ROW_KEYS = ("filename", "size", "upload_time", "requires_python", "yanked", "yanked_reason")
# PEP 700's upload-time: UTC, its seconds in the first 19 characters
_UTC_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", re.ASCII)
# a built distribution's platform, as distutils' get_platform() names it (bdist_dumb's
# `name-1.0.linux-x86_64.tar.gz`, `.macosx-10.9-x86_64`, the installers' `.win32-py2.7.exe`):
# no part of the version (PyPI lists `1.0`); cut only from a version PEP 440 cannot read, so
# a local label (`1.0+cpu.win32`, where an index allows one) stays whole
_PLATFORMS = "linux|win|macosx|freebsd|openbsd|netbsd|cygwin|solaris|sunos|aix|darwin"
_PLATFORM_TAIL = re.compile(rf"\.(?:(?:win32|mingw)(?:[-_]\S*)?|(?:{_PLATFORMS})-\S*)$")


class SimpleFormatError(UnreadableAnswer):
    """A reply that is not a PEP 691 project page (HTML, not JSON, the wrong shape)."""

    prefix = "unreadable reply: "


@dataclass(frozen=True)
class DistFile:
    filename: str
    url: str
    version: str | None
    hashes: Mapping[str, str]
    requires_python: str | None
    size: int | None
    upload_time: str | None
    yanked: bool
    yanked_reason: str | None
    core_metadata: bool  # PEP 658: `<url>.metadata` exists
    core_metadata_sha256: str | None

    @property
    def metadata_url(self) -> str:
        return self.url.split("#", 1)[0] + ".metadata"

    def as_row(self) -> dict[str, Any]:
        """What VERSION keeps of a file (its FILES column)."""
        return {key: getattr(self, key) for key in _ROW_KEYS} | {"hashes": dict(self.hashes)}


@dataclass(frozen=True)
class SimpleRelease:
    version: str
    files: tuple[DistFile, ...]

    # computed once: the listing, the PRODUCT row and the VERSION row each ask
    @cached_property
    def yanked(self) -> bool:
        """PEP 592: yanked when every one of its files is (a version with no files is not)."""
        return bool(self.files) and all(f.yanked for f in self.files)

    @cached_property
    def yanked_reason(self) -> str | None:
        reasons = [f.yanked_reason for f in self.files if f.yanked_reason]
        return reasons[0] if self.yanked and reasons else None

    @property
    def first_upload(self) -> datetime | None:
        """When its first file was uploaded, in whole seconds of UTC (RELEASE_DATE). Times in
        PEP 700's form (`2024-01-01T00:00:00.000000Z`) compare by their seconds as text: one
        is parsed, not each (a release of forty wheels has forty)."""
        times = [f.upload_time for f in self.files if f.upload_time]
        if len(times) > 1 and all(_UTC_TIME.fullmatch(t) for t in times):
            first = parse_time(min(t[:19] for t in times))
            if first is not None:  # else a time that is no date: each is parsed
                return first
        return min(filter(None, map(parse_time, times)), default=None)

    @property
    def requires_python(self) -> str | None:
        return next((f.requires_python for f in self.files if f.requires_python), None)

    def metadata_file(self) -> DistFile | None:
        """The file whose core metadata stands for the release: a wheel that offers it."""
        offered = [f for f in self.files if f.core_metadata]
        wheels = [f for f in offered if f.filename.endswith(".whl")]
        chosen = wheels or offered
        return chosen[0] if chosen else None


@dataclass(frozen=True)
class SimplePage:
    """A project's Simple page as read (and, from the client, as served)."""

    name: str  # normalised
    last_serial: int | None  # X-PyPI-Last-Serial, else the page's meta._last-serial
    status: str | None  # PEP 792 project-status
    releases: tuple[SimpleRelease, ...]
    problems: tuple[str, ...] = field(default=())  # files without a version, invalid versions
    invalid_versions: tuple[str, ...] = field(default=())  # not PEP 440: kept, reported
    validators: Validators = field(default_factory=Validators)  # for the next refresh
    raw_bytes: int = 0  # the page as served (the run cache weighs it by this)


def version_of(project: str, filename: str) -> str | None:
    """The version part of a distribution's file name, spelled as uploaded, or None."""
    lower = filename.lower()
    suffix = next((s for s in _SUFFIXES if lower.endswith(s)), None)
    if suffix is None:
        return None
    stem = filename[: -len(suffix)]
    if suffix in (".whl", ".egg"):
        parts = stem.split("-")
        return parts[1] if len(parts) >= 2 and parts[1] else None
    key = normalize(project)
    # The name ends at the first `-` where the stem's start normalises to the project's name,
    # never before the name's length (normalising never lengthens): most sdists have it there.
    dashes = (i for i in range(len(key), len(stem)) if stem[i] == "-")
    end = next((i for i in dashes if normalize(stem[:i]) == key), None)
    if end is None:
        return None
    version = stem[end + 1 :]
    return (version if parse(version) else _PLATFORM_TAIL.sub("", version)) or None


def _absolute(page_url: str, url: str) -> str:
    """PEP 691 allows relative URLs; PyPI's are absolute, and urljoin was a tenth of a page."""
    if url.startswith(("https://", "http://")) and not any(c in url for c in "?#;"):
        return url  # what urljoin returns for it
    return urljoin(page_url, url)


def _file(entry: Any, page_url: str, project: str) -> DistFile:
    if not isinstance(entry, dict) or not isinstance(entry.get("filename"), str):
        raise SimpleFormatError("a file entry has no filename")
    if not isinstance(entry.get("url"), str):
        raise SimpleFormatError(f"file {entry['filename']} has no url")
    hashes = entry.get("hashes")
    yanked = entry.get("yanked", False)
    meta = entry.get("core-metadata", entry.get("data-dist-info-metadata", False))
    sha256 = meta.get("sha256") if isinstance(meta, dict) else None
    size = entry.get("size")
    return DistFile(
        filename=entry["filename"],
        url=_absolute(page_url, entry["url"]),
        version=version_of(project, entry["filename"]),
        hashes={str(k): str(v) for k, v in hashes.items()} if isinstance(hashes, dict) else {},
        requires_python=text(entry.get("requires-python")),
        size=size if isinstance(size, int) else None,
        upload_time=text(entry.get("upload-time")),
        yanked=bool(yanked),
        yanked_reason=yanked if isinstance(yanked, str) and yanked else None,
        core_metadata=bool(meta),
        core_metadata_sha256=None if sha256 is None else str(sha256),
    )


def parse_simple_page(content: bytes, page_url: str, project: str) -> SimplePage:
    """A PEP 691 JSON project page. Raises SimpleFormatError on HTML, non-JSON or the wrong
    shape. Versions come from PEP 700 `versions` when the page has them (a version may have no
    files), else from the file names; a file whose version cannot be made out is reported in
    `problems`, never guessed."""
    head = content.lstrip()[:64].lower()
    if head.startswith((b"<!doctype", b"<html", b"<")):
        raise SimpleFormatError("an HTML page where the Simple API JSON was asked for")
    try:
        document = loads(content)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # Recursion: too deep
        raise SimpleFormatError(f"not JSON ({str(exc)[:80]})") from None
    if not isinstance(document, dict) or not isinstance(document.get("files"), list):
        raise SimpleFormatError("not a Simple API project page (no files list)")
    meta: dict[str, Any] = document["meta"] if isinstance(document.get("meta"), dict) else {}
    api_version = str(meta.get("api-version", "1.0"))
    if not api_version.startswith("1."):
        raise SimpleFormatError(f"Simple API version {api_version} (stagecrawl reads 1.x)")
    name = normalize(str(document.get("name") or project))
    files = [_file(entry, page_url, name) for entry in document["files"]]
    problems = [
        f"{f.filename}: version not recognisable in the file name"
        for f in files
        if f.version is None
    ]
    listed = document.get("versions")
    named = [str(v) for v in listed] if isinstance(listed, list) else []
    spelled: dict[Any, str] = {}  # by PEP 440 equality: PEP 700's spelling, else a file's
    for version in named + [f.version for f in files if f.version is not None]:
        spelled.setdefault(version_key(version), version)
    by_version: dict[str, list[DistFile]] = {v: [] for v in spelled.values()}
    for f in files:
        if f.version is not None:
            by_version[spelled[version_key(f.version)]].append(f)
    invalid = tuple(v for v in by_version if parse(v) is None)
    problems += [f"{v}: not a PEP 440 version (kept)" for v in invalid]
    status = document.get("project-status")
    serial = meta.get("_last-serial")
    return SimplePage(
        name=name,
        last_serial=serial if isinstance(serial, int) else None,
        status=str(status.get("status")) if isinstance(status, dict) else None,
        releases=tuple(SimpleRelease(v, tuple(fs)) for v, fs in by_version.items()),
        problems=tuple(problems),
        invalid_versions=invalid,
    )
