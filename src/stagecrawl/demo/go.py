"""The demo's Go step: made-up modules on the Go look-alike (stagecrawl.testing.go_origin: the
proxy under a path prefix, the index feed, case-encoded paths) crawled through the same
pipeline a real run uses — a retraction, a deprecation, a pseudo-version from the feed — then
a made-up advisory in OSV's Go shape imported and a go.mod with a local replace audited."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from stagecrawl.engine.progress import ProgressReporter
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.go.plugin import REGISTRY as GO
from stagecrawl.kernel.collecting import CollectSettings
from stagecrawl.kernel.phases import collect, started
from stagecrawl.kernel.refresh import refresh
from stagecrawl.kernel.sca import AuditRequest, Inputs, import_records, run_audit
from stagecrawl.settings import Settings
from stagecrawl.storage.db import Database
from stagecrawl.testing.go_origin import GoOrigin

WIDGET, GADGET = "example.com/Demo/widget", "example.com/demo/gadget"
ADVISORY = {
    "schema_version": "1.3.1", "id": "DEMO-2026-0301", "modified": "2026-01-01T00:00:00Z",
    "published": "2026-01-01T00:00:00Z", "aliases": ["CVE-0000-00001"],
    "summary": "Made up for the demo: widget.Parse panics on empty input",
    "affected": [{
        "package": {"name": WIDGET, "ecosystem": "Go"},
        "ranges": [{"type": "SEMVER", "events": [{"introduced": "0"}, {"fixed": "1.2.0"}]}],
        "ecosystem_specific": {"imports": [{"path": WIDGET, "symbols": ["Parse"]}]},
    }],
    "database_specific": {"review_status": "REVIEWED"},
}  # fmt: skip
GO_MOD = (
    f"module example.com/demo/app\n\ngo 1.22\n\nrequire (\n\t{WIDGET} v1.1.0\n"
    f"\t{GADGET} v0.3.0\n)\n\nreplace {GADGET} => ../gadget\n"
)


def build(origin: GoOrigin) -> None:
    for n in range(6):
        text = f"module {WIDGET}\n\ngo 1.22\n\nrequire {GADGET} v0.{n % 3}.0\n"
        if n == 5:  # the latest go.mod retracts a broken release
            text = f"// Deprecated: use example.com/demo/widget2\n{text}retract v1.3.0 // broken\n"
        origin.publish(WIDGET, f"v1.{n}.0", text)
    for n in range(3):
        origin.publish(GADGET, f"v0.{n}.0", f"module {GADGET}\n\ngo 1.21\n")
    origin.publish(GADGET, "v0.3.0-0.20260101000000-0123456789ab", f"module {GADGET}\n")


async def run_go(db: Database, out: Path, console: Console, quiet: bool, stop: GracefulStop) -> str:
    """Crawl, follow the feed, import, audit; returns the step's one-line summary."""
    origin = GoOrigin()
    build(origin)
    with origin:
        flags = {
            "go.proxy_url": origin.proxy_url, "go.index_url": origin.index_url,
            "go.proxy_rate": 40.0, "go.index_rate": 5.0, "go.since": "2020-01-01T00:00:00Z",
            "contact": "stagecrawl-demo@example.org", "db": db.url,
        }  # fmt: skip
        s = Settings.resolve(flags, {})
        async with started(GO, s) as (_fetcher, client):
            with ProgressReporter("go crawl", console=console, quiet=quiet) as progress:
                crawled = await collect(
                    db, GO, client, CollectSettings.from_settings(s), stop, [WIDGET],
                    progress=progress,
                )  # fmt: skip
                fed = await refresh(db, GO, client, [], stop)  # the feed: gadget's pseudo too
                await collect(db, GO, client, CollectSettings.from_settings(s), stop)
    folder = out / "osv-go"
    folder.mkdir(exist_ok=True)
    (folder / "DEMO-2026-0301.json").write_text(json.dumps(ADVISORY))
    imported = import_records(db, GO, folder, "all", 1 << 20)
    gomod = out / "go-app" / "go.mod"
    gomod.parent.mkdir(exist_ok=True)
    gomod.write_text(GO_MOD)
    audited = await run_audit(GO, s, AuditRequest(Inputs(lockfiles=(gomod,))), stop)
    summary = crawled.collect
    assert summary is not None
    return (
        f"{summary.outcomes[1]} versions of {WIDGET} ({summary.yanked} retracted),"
        f" {fed.new_events} more from the index feed; 429s seen:"
        f" {sum(crawled.rate_limited.values())}; {imported.advisories} Go advisory;"
        f" audit of go.mod: {len(audited.vulnerabilities)} vulnerabilities,"
        f" {len(audited.unaudited)} not audited (a local replace)"
    )
