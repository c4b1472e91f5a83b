"""A real HTTP server on 127.0.0.1 that serves a fixture tree and misbehaves on request.

It is what stagecrawl's tests, benchmarks and offline demo crawl: never a mock of the client.
Behaviours are set per path pattern (fnmatch on the URL path) with `rule()`; every request it sees
is logged with its arrival time, path, headers and the status it got, so tests can assert on what
the origin experienced.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fnmatch
import hashlib
import json
import mimetypes
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
LAST_MODIFIED = "Wed, 21 Oct 2015 07:28:00 GMT"


@dataclass
class Rule:
    """What to do to requests whose path matches `pattern`. Counters are per rule."""

    pattern: str
    rate_limit: int | None = None  # at most this many requests ...
    rate_window: float = 1.0  # ... in any window of this many seconds, else 429
    # Strict mode, as real registries enforce it: a token bucket of `bucket_burst` tokens
    # refilled at `bucket_rate` per second, shared by every path the pattern matches; a
    # request that finds it empty gets 429 (with `retry_after` if set).
    bucket_rate: float | None = None
    bucket_burst: int = 1
    bucket_tat: float = float("-inf")
    bucket_rejected: int = 0
    retry_after: str | None = None  # Retry-After sent with this rule's 429s / failures
    too_many: int = 0  # answer 429 to the first N matching requests
    fail_times: int = 0  # answer `fail_status` to the first N matching requests
    fail_status: int = 503
    stall: float = 0.0  # sleep this long before answering
    empty: bool = False
    truncate: bool = False
    oversize: int = 0  # stream this many bytes instead of the real body
    trickle: float = 0.0  # send the body one byte every this many seconds
    invalid_json: bool = False
    redirect_to: str | None = None  # origin URL to redirect to (same path)
    status: int | None = None  # answer this status with an empty body
    body: bytes | None = None  # serve these bytes instead of the fixture
    headers: dict[str, str] | None = None  # set on the answer (an odd ETag …)
    seen: int = 0
    accepted: deque[float] = field(default_factory=deque)


@dataclass
class LoggedRequest:
    time: float  # time.monotonic() at arrival
    method: str
    path: str
    query: str
    headers: dict[str, str]
    status: int = 0


class TestOrigin:
    """Serve `root` (a directory) and in-memory routes on 127.0.0.1:`port` (0 = random)."""

    __test__ = False  # not a pytest test class

    def __init__(self, root: Path | str | None = None, port: int = 0) -> None:
        self.root = Path(root) if root is not None else None
        self.files: dict[str, bytes] = {}
        self.handlers: dict[str, Handler] = {}
        self.rules: list[Rule] = []
        self.log: list[LoggedRequest] = []
        self.port = port
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    # -- configuration ------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(self, path: str, content: bytes | str | Any) -> None:
        """Serve `content` at `path` (bytes as they are, str as UTF-8, anything else as JSON)."""
        if isinstance(content, bytes):
            data = content
        elif isinstance(content, str):
            data = content.encode()
        else:
            data = json.dumps(content).encode()
        self.files["/" + path.lstrip("/")] = data

    def handle(self, path: str, handler: Handler) -> None:
        self.handlers["/" + path.lstrip("/")] = handler

    def rule(self, pattern: str, **behaviour: Any) -> Rule:
        new = Rule(pattern=pattern, **behaviour)
        with self._lock:
            self.rules.append(new)
        return new

    def clear_rules(self) -> None:
        with self._lock:
            self.rules.clear()

    def requests_to(self, pattern: str = "*") -> list[LoggedRequest]:
        with self._lock:
            return [r for r in self.log if fnmatch.fnmatchcase(r.path, pattern)]

    def max_in_window(self, pattern: str = "*", window: float = 1.0, status: int = 200) -> int:
        """The most requests (answered with `status`) that arrived within any `window` seconds."""
        times = sorted(r.time for r in self.requests_to(pattern) if r.status == status)
        best, start = 0, 0
        for end, t in enumerate(times):
            while t - times[start] >= window:
                start += 1
            best = max(best, end - start + 1)
        return best

    # -- serving --------------------------------------------------------------------------
    async def route(self, request: web.Request, rules: list[Rule]) -> web.StreamResponse | None:
        """A subclass's computed answer for a path (after the rules let it through), or None
        to serve the fixture tree."""
        return None

    def _lookup(self, path: str) -> bytes | None:
        if path in self.files:
            return self.files[path]
        if self.root is None:
            return None
        candidate = (self.root / path.lstrip("/")).resolve()
        root = self.root.resolve()
        if root not in candidate.parents and candidate != root:
            return None
        if candidate.is_file():
            return candidate.read_bytes()
        return None

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        entry = LoggedRequest(
            time.monotonic(),
            request.method,
            request.path,
            request.query_string,
            dict(request.headers),
        )
        with self._lock:
            self.log.append(entry)
            matching = [r for r in self.rules if fnmatch.fnmatchcase(request.path, r.pattern)]
        response = await self._respond(request, matching)
        for rule in matching:
            if rule.headers and not response.prepared:
                response.headers.update(rule.headers)
        entry.status = response.status
        return response

    async def _respond(self, request: web.Request, rules: list[Rule]) -> web.StreamResponse:
        now = time.monotonic()
        for rule in rules:
            rule.seen += 1
            retry = {"Retry-After": rule.retry_after} if rule.retry_after else {}
            if rule.stall:
                await asyncio.sleep(rule.stall)
            if rule.too_many and rule.seen <= rule.too_many:
                return web.Response(status=429, headers=retry, text="too many requests")
            if rule.bucket_rate is not None:
                interval = 1.0 / rule.bucket_rate
                with self._lock:
                    tat = max(rule.bucket_tat, now)
                    if now < tat - (rule.bucket_burst - 1) * interval:
                        rule.bucket_rejected += 1
                        return web.Response(status=429, headers=retry, text="bucket empty")
                    rule.bucket_tat = tat + interval
            if rule.rate_limit is not None:
                while rule.accepted and now - rule.accepted[0] >= rule.rate_window:
                    rule.accepted.popleft()
                if len(rule.accepted) >= rule.rate_limit:
                    return web.Response(status=429, headers=retry, text="rate limit exceeded")
                rule.accepted.append(now)
            if rule.fail_times and rule.seen <= rule.fail_times:
                return web.Response(status=rule.fail_status, headers=retry, text="failure")
            if rule.redirect_to:
                target = rule.redirect_to.rstrip("/") + request.path_qs
                return web.Response(status=302, headers={"Location": target})
            if rule.status is not None:
                return web.Response(status=rule.status)
        handler = self.handlers.get(request.path)
        if handler is not None:
            return await handler(request)
        routed = await self.route(request, rules)
        if routed is not None:
            return routed
        body = next((r.body for r in rules if r.body is not None), None)
        if body is None:
            body = self._lookup(request.path)
        if body is None:
            return web.Response(status=404, text="not found")
        return await self._serve_body(request, body, rules)

    async def _serve_body(
        self, request: web.Request, body: bytes, rules: list[Rule]
    ) -> web.StreamResponse:
        etag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
        if request.headers.get("If-None-Match") == etag or (
            "If-None-Match" not in request.headers
            and request.headers.get("If-Modified-Since") == LAST_MODIFIED
        ):
            return web.Response(status=304, headers={"ETag": etag})
        content_type = mimetypes.guess_type(request.path)[0] or (
            "application/json" if body[:1] in (b"{", b"[") else "text/plain"
        )
        headers = {"ETag": etag, "Last-Modified": LAST_MODIFIED, "Content-Type": content_type}
        if any(r.empty for r in rules):
            return web.Response(status=200, body=b"", headers=headers)
        if any(r.invalid_json for r in rules):
            return web.Response(status=200, body=b'{"truncated": [1, 2', headers=headers)
        oversize = max((r.oversize for r in rules), default=0)
        if oversize:
            stream = web.StreamResponse(status=200, headers={"Content-Type": content_type})
            stream.enable_chunked_encoding()
            await stream.prepare(request)
            chunk = b"x" * 65536
            sent = 0
            try:
                while sent < oversize:
                    await stream.write(chunk)
                    sent += len(chunk)
                await stream.write_eof()
            except ConnectionResetError:
                pass  # the client gave up once it passed its limit, as it should
            return stream
        trickle = max((r.trickle for r in rules), default=0.0)
        if trickle:
            stream = web.StreamResponse(
                status=200, headers={**headers, "Content-Length": str(len(body))}
            )
            await stream.prepare(request)
            try:
                for byte in body:
                    await stream.write(bytes([byte]))
                    await asyncio.sleep(trickle)
                await stream.write_eof()
            except (ConnectionResetError, RuntimeError):
                pass  # the client hung up at its deadline, as it should
            return stream
        if any(r.truncate for r in rules):
            stream = web.StreamResponse(
                status=200, headers={**headers, "Content-Length": str(len(body))}
            )
            await stream.prepare(request)
            await stream.write(body[: max(1, len(body) // 2)])
            assert request.transport is not None
            request.transport.close()
            return stream
        return web.Response(status=200, body=body, headers=headers)

    # -- lifecycle --------------------------------------------------------------------------
    async def start_async(self) -> TestOrigin:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        # On stop, a handler still stalling (a rule's `stall`) is cancelled after half a second:
        # aiohttp's default waits a minute for it, and each such test paid `stop`'s 10 s join.
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=0.5
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, backlog=1024)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return self

    async def stop_async(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def start(self) -> TestOrigin:
        """Run in a background thread with its own event loop (for sync tests and subprocesses)."""
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            loop.run_until_complete(self.start_async())
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.stop_async())
            left = asyncio.all_tasks(loop)  # handlers past the shutdown timeout, as asyncio.run
            for task in left:
                task.cancel()
            if left:
                loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.close()

        self._thread = threading.Thread(target=run, name="test-origin", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("test origin did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = None

    def __enter__(self) -> TestOrigin:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    """`python -m stagecrawl.testing.origin --root DIR`: serve a tree until interrupted."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--root", required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()

    async def serve() -> None:
        origin = await TestOrigin(args.root, args.port).start_async()
        print(origin.url, flush=True)
        await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
