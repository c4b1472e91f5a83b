"""A Go module proxy look-alike on 127.0.0.1: what stagecrawl's Go tests, benches and demo crawl.

One host serves two lanes, as proxy.golang.org and index.golang.org do:

- the GOPROXY protocol under a path prefix (`/mirror/go/` by default: Athens and Artifactory
  sit under one too): `$module/@v/list` (unsorted, no pseudo-versions), `@v/$v.info`,
  `@v/$v.mod`, `@v/$v.zip` (a zip with the module's LICENSE) and `@latest`. Module paths and
  versions must be case-encoded (`!` + lower case): a path with an upper-case letter gets 400,
  as the real proxy answers. A module marked gone answers 404 or 410; a module not cached
  answers 404 to a request with `Disable-Module-Fetch: true` (and is fetched without it). The
  list carries an ETag (If-None-Match: 304).
- the index feed `/index?since=T&limit=N` (N ≤ 2000): JSON lines, oldest first, `since`
  inclusive.

A request without a contact (an e-mail address or URL) in its User-Agent gets 403. `strict()`
puts a token bucket on each lane (proxy, index, zip); a request that finds its bucket empty gets
429 (counted in `rejected`). Everything the server sees is in `log` (TestOrigin)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import time
import zipfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from aiohttp import web

from stagecrawl.testing.origin import Rule, TestOrigin

PREFIX = "/mirror/go/"
MIT = (
    "MIT License\n\nCopyright (c) {year} The Authors\n\nPermission is hereby granted, free of"
    " charge, to any person obtaining a copy of this software and associated documentation"
    ' files (the "Software"), to deal in the Software without restriction, including without'
    " limitation the rights to use, copy, modify, merge, publish, distribute, sublicense, and/or"
    " sell copies of the Software, and to permit persons to whom the Software is furnished to do"
    " so, subject to the following conditions:\n\nThe above copyright notice and this permission"
    " notice shall be included in all copies or substantial portions of the Software.\n\nTHE"
    ' SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING'
    " BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND"
    " NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,"
    " DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING"
    " FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE"
    " SOFTWARE.\n"
)


def unescape(text: str) -> str | None:
    """The proxy's case-decoding; None for text that is not case-encoded."""
    if re.search(r"[A-Z]", text) or re.search(r"![^a-z]|!$", text):
        return None
    return re.sub(r"!([a-z])", lambda m: m[1].upper(), text)


def has_contact(user_agent: str) -> bool:
    return "@" in user_agent or "http://" in user_agent or "https://" in user_agent


@dataclass
class GoModule:
    """One module as the origin holds it: each version's time and go.mod, which versions the
    list shows (never pseudo-versions), and whether the module is gone (404/410)."""

    path: str
    mods: dict[str, str] = field(default_factory=dict)
    times: dict[str, str] = field(default_factory=dict)
    unlisted: set[str] = field(default_factory=set)  # pseudo-versions: not in @v/list
    gone: int | None = None  # 404 or 410
    cached: bool = True
    license: str = MIT

    def add(self, version: str, mod: str | None = None, when: str | None = None) -> None:
        self.mods[version] = mod if mod is not None else f"module {self.path}\n\ngo 1.21\n"
        self.times[version] = when or "2024-01-01T00:00:00Z"
        if re.search(r"\d{14}-[0-9a-f]{12}", version):
            self.unlisted.add(version)

    def listed(self) -> list[str]:
        """The list in a scrambled but stable order (the protocol promises none)."""
        shown = [v for v in self.mods if v not in self.unlisted]
        return sorted(shown, key=lambda v: hashlib.sha256(v.encode()).hexdigest())


@dataclass
class FeedEntry:
    path: str
    version: str
    timestamp: str


class GoOrigin(TestOrigin):
    """The look-alike (see the module docstring)."""

    def __init__(self, port: int = 0, prefix: str = PREFIX, require_contact: bool = True) -> None:
        super().__init__(None, port)
        self.prefix = "/" + prefix.strip("/") + "/"
        self.modules: dict[str, GoModule] = {}
        self.feed: list[FeedEntry] = []
        self.require_contact = require_contact
        self.buckets: dict[str, Rule] = {}
        self.rejected = 0

    @property
    def proxy_url(self) -> str:
        return self.url + self.prefix

    @property
    def index_url(self) -> str:
        return self.url + "/index"

    def module(self, path: str) -> GoModule:
        return self.modules.setdefault(path, GoModule(path))

    def publish(self, path: str, version: str, mod: str | None = None, when: str = "") -> None:
        """A version on the proxy and in the feed (at `when`, or a second after the last)."""
        if not when:
            last = self.feed[-1].timestamp if self.feed else "2024-01-01T00:00:00.000000Z"
            after = datetime.strptime(last[:19], "%Y-%m-%dT%H:%M:%S") + timedelta(seconds=1)
            when = after.strftime("%Y-%m-%dT%H:%M:%S.000000Z")
        self.module(path).add(version, mod, when[:19] + "Z")
        self.feed.append(FeedEntry(path, version, when))
        self.feed.sort(key=lambda e: e.timestamp)

    def strict(self, proxy: float, index: float, zip_rate: float = 1.0, burst: int = 2) -> None:
        """A token bucket per lane (burst 2 absorbs the jitter between send and arrival)."""
        self.buckets = {
            lane: Rule(lane, bucket_rate=rate, bucket_burst=burst)
            for lane, rate in (("proxy", proxy), ("index", index), ("zip", zip_rate))
        }

    def lane_of(self, path: str) -> str:
        return "index" if path == "/index" else "zip" if path.endswith(".zip") else "proxy"

    def _bucket_empty(self, lane: str) -> bool:
        rule = self.buckets.get(lane)
        if rule is None or rule.bucket_rate is None:
            return False
        now, interval = time.monotonic(), 1.0 / rule.bucket_rate
        with self._lock:
            tat = max(rule.bucket_tat, now)
            if now < tat - (rule.bucket_burst - 1) * interval:
                self.rejected += 1
                return True
            rule.bucket_tat = tat + interval
        return False

    async def _respond(self, request: web.Request, rules: list[Rule]) -> web.StreamResponse:
        if self.require_contact and not has_contact(request.headers.get("User-Agent", "")):
            return web.Response(status=403, text="identify yourself: a contact in the User-Agent")
        if self._bucket_empty(self.lane_of(request.path)):
            return web.Response(status=429, text="too many requests")
        return await super()._respond(request, rules)

    async def route(self, request: web.Request, rules: list[Rule]) -> web.StreamResponse | None:
        path = request.path
        if any(r.body is not None for r in rules):
            return None  # a rule's body replaces the answer (a misbehaving proxy)
        if path == "/index":
            return self._index(request)
        if not path.startswith(self.prefix):
            return None
        rest = path[len(self.prefix) :]
        escaped, at, tail = rest.partition("/@")
        module_path = unescape(escaped)
        if not at or module_path is None:
            return web.Response(status=400, text=f"bad request: invalid escaped module path {rest}")
        module = self.modules.get(module_path)
        if module is None or module.gone:
            status = module.gone if module is not None and module.gone else 404
            return web.Response(status=status, text=f"not found: {module_path}")
        if not module.cached and request.headers.get("Disable-Module-Fetch") == "true":
            return web.Response(status=404, text="not found: module fetch disabled")
        if tail == "v/list":
            return self._list(request, module)
        if tail == "latest":
            latest = max(module.mods, key=lambda v: module.times[v])
            return web.json_response({"Version": latest, "Time": module.times[latest]})
        found = re.fullmatch(r"v/(.+)\.(info|mod|zip)", tail)
        version = unescape(found[1]) if found else None
        if found is None or version is None:
            return web.Response(status=400, text="bad request: invalid escaped version")
        if version not in module.mods:
            return web.Response(status=404, text=f"not found: {module_path}@{version}")
        if found[2] == "info":
            return web.json_response({"Version": version, "Time": module.times[version]})
        if found[2] == "mod":
            return web.Response(text=module.mods[version])
        return web.Response(body=self._zip(module, version), content_type="application/zip")

    def _list(self, request: web.Request, module: GoModule) -> web.Response:
        body = "".join(f"{v}\n" for v in module.listed())
        etag = '"' + hashlib.sha256(body.encode()).hexdigest()[:16] + '"'
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers={"ETag": etag})
        return web.Response(text=body, headers={"ETag": etag})

    @staticmethod
    def _zip(module: GoModule, version: str) -> bytes:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            root = f"{module.path}@{version}/"
            archive.writestr(root + "go.mod", module.mods[version])
            archive.writestr(root + "LICENSE", module.license.format(year=2024))
            archive.writestr(root + "doc.go", "// Package x is made up.\npackage x\n")
        return buffer.getvalue()

    def _index(self, request: web.Request) -> web.Response:
        since = request.query.get("since", "")
        try:
            limit = int(request.query.get("limit", "2000"))
        except ValueError:
            return web.Response(status=400, text="bad limit")
        if not 0 < limit <= 2000:
            return web.Response(status=400, text="limit must be 1 to 2000")
        rows = [e for e in self.feed if e.timestamp >= since][:limit]
        text = "".join(
            json.dumps({"Path": e.path, "Version": e.version, "Timestamp": e.timestamp}) + "\n"
            for e in rows
        )
        return web.Response(text=text, content_type="application/json")
