"""Go modules on the registry kernel: the module proxy is authoritative (`@v/list`, `.info`,
`.mod`), the index feed says what is new (refresh: a cursor in the database), module zips give
licenses (off by default). Latest, retractions and deprecation as `go` decides them
(docs/go.md); everything else is the kernel's."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from sqlalchemy import Connection

from stagecrawl.engine.fanout import all_or_none
from stagecrawl.engine.fetcher import Fetcher, Validators
from stagecrawl.engine.ratelimit import Lane, Lanes, Rate
from stagecrawl.errors import InputError, NotFound, UnreadableAnswer
from stagecrawl.go import locks, modfile, tables
from stagecrawl.go.client import INDEX, PROXY, ZIP, GoClient, match_private, private_patterns
from stagecrawl.go.declaration import DECLARATION, GoSettings
from stagecrawl.go.licenses import zip_licenses
from stagecrawl.go.versions import (
    GoVersion,
    check_path,
    is_prerelease,
    is_pseudo,
    is_valid,
    sort_key,
)
from stagecrawl.kernel.lockfiles import Namer, tree_namer
from stagecrawl.kernel.registry import (
    CollectContext,
    Collected,
    Listing,
    LockInput,
    RefreshPlan,
    RefreshTarget,
    Registry,
    SourceFailed,
    declared_ecosystem,
)
from stagecrawl.sca.audit import Unaudited
from stagecrawl.sca.ecosystem import parse_time
from stagecrawl.settings import Settings
from stagecrawl.storage.db import Database

GO = declared_ecosystem(
    DECLARATION, tables.GO_ORDER, purl_type="golang", version_kind="Go semantic version",
    parse_version=GoVersion.parse,  # OSV's bounds have no `v`: both spellings parse
    product_key=lambda name: name,  # module paths are case-sensitive
    primary_prefix="GO-", database_name="Go Vulnerability Database",
    advisory_url_template="https://pkg.go.dev/vuln/{}",
    registry_key="go", lockfile_name="go.mod", manifest_name="go.mod",
)  # fmt: skip


@dataclass
class Module:
    """A module's versions, @latest before retractions (its go.mod has them) and after."""

    name: str
    versions: list[str]
    problems: list[str] = field(default_factory=list)
    latest_raw: str | None = None
    retracts: list[tuple[str, str, str]] = field(default_factory=list)
    deprecated: str | None = None
    latest: str | None = None
    status: str = "ACTIVE"
    etag: str | None = None

    def reason(self, version: str) -> str | None:
        """The rationale of the first retraction covering `version` (x/mod's semver.Compare:
        build metadata, +incompatible too, ignored); None: not retracted."""
        key = sort_key(version)
        covering = (
            why for low, high, why in self.retracts if sort_key(low) <= key <= sort_key(high)
        )
        return next(covering, None)

    def listing(self) -> Listing:
        retracted = {v: self.reason(v) is not None for v in self.versions}
        return Listing(self.name, retracted, self.problems, self)

    def product(self) -> dict[str, Any]:
        retractions = json.dumps([list(r) for r in self.retracts]) if self.retracts else None
        return {"LATEST_VERSION": self.latest, "COMP_STATUS": self.status,
                "DEPRECATED": self.deprecated, "RETRACTIONS_FROM": self.latest_raw,
                "RETRACTIONS": retractions, "LIST_ETAG": self.etag}  # fmt: skip


HasGoMod = Callable[[str], Awaitable[bool]]


async def _pick(
    versions: Sequence[str], allowed: Callable[[str], bool], has_go_mod: HasGoMod
) -> str | None:
    """@latest as cmd/go's queryProxy picks it: the highest release, else the highest
    pre-release (+incompatible ones only while the highest compatible version has no go.mod:
    modload's filterVersions), else the newest pseudo-version (the proxy's @latest)."""
    best: list[str | None] = [None, None]
    compatible, incompatible_ok = None, False
    for v in sorted((v for v in versions if allowed(v) and not is_pseudo(v)), key=sort_key):
        if not v.endswith("+incompatible"):
            compatible = v
        elif not incompatible_ok and compatible is not None:
            if await has_go_mod(compatible):
                break
            incompatible_ok = True
        best[is_prerelease(v)] = v
    pseudo = max((v for v in versions if allowed(v) and is_pseudo(v)), key=sort_key, default=None)
    return best[0] or best[1] or pseudo


async def resolve(
    client: GoClient, name: str, extra: Sequence[str] = (), validators: Validators | None = None
) -> Module | None:
    """The module's listing (None: a 304 to `validators`), the versions in `extra` (confirmed
    elsewhere: the feed, .info answers) with those the proxy lists, latest and retractions."""
    result = await client.listing(name, validators)
    if result.not_modified:
        return None
    module = Module(name, [], etag=result.validators.etag)
    for line in result.content.decode("utf-8", errors="replace").splitlines():
        version = line.strip()
        if version and not is_valid(version):
            module.problems.append(f"{version[:100]!r}: not a canonical version (skipped)")
        elif version and version not in module.versions:
            module.versions.append(version)
    module.versions += [v for v in extra if v not in module.versions]

    async def has_go_mod(version: str) -> bool:  # modload's versionHasGoMod
        return await client.mod(name, version) != f"module {modfile.auto_quote(name)}\n"

    module.latest_raw = await _pick(module.versions, lambda v: True, has_go_mod)
    if module.latest_raw is not None:
        parsed = modfile.parse_dependency(await client.mod(name, module.latest_raw))
        module.retracts, module.deprecated = parsed.retracts, parsed.deprecated
    module.latest = await _pick(module.versions, lambda v: module.reason(v) is None, has_go_mod)
    if module.latest is None and module.versions:  # every version retracted: the highest
        module.latest, module.status = max(module.versions, key=sort_key), "YANKED"
    return module


@lru_cache(maxsize=128)  # as modfile.parse_dependency: a module's versions repeat their go.mod
def _requires_column(text: str) -> str | None:
    """The DEPENDENCIES column of a version whose go.mod is `text` (read: `_row` parsed it)."""
    # Written out as `dumps` writes these dicts (keys sorted, compact, strings by json's own
    # encoder): the generic encoder sorting ~200 small dicts a go.mod was a twelfth of a crawl.
    return (
        "["
        + ",".join(
            f'{{"indirect":{"true" if r.indirect else "false"},"path":{_json_text(r.path)},'
            f'"version":{_json_text(r.version)}}}'
            for r in modfile.parse_dependency(text).requires
        )
        + "]"
    )


_json_text = json.encoder.encode_basestring  # as dumps writes a str (ensure_ascii off)


class Go(Registry[GoClient]):
    decl, ecosystem, schema, order = DECLARATION, GO, tables.SCHEMA, tables.GO_ORDER
    language, repository = tables.LANGUAGE, tables.REPOSITORY
    lanes_shown = (PROXY, INDEX, ZIP)
    etag_column = "LIST_ETAG"  # the version list's (@v/list)
    is_version = staticmethod(is_valid)
    not_a_version = "not a canonical Go module version (vX.Y.Z)"
    # the run's settings that decide what is read (`configure`)
    private: list[str] = []  # noqa: RUF012 -- a run's, set by `configure`
    zips, zip_max, since = False, 0, ""

    def configure(self, s: Settings) -> None:
        g = s.section(GoSettings)
        self.private, self.since = private_patterns(g.private), g.since
        self.zips, self.zip_max = bool(g.zips), int(g.zip_max_mb * 1024 * 1024)

    def validate_name(self, name: str) -> str:
        check_path(name)
        if match_private(self.private or private_patterns(""), name):
            raise InputError(f"{name} is private (--private, GOPRIVATE): never asked of a proxy")
        return name

    def lanes(self, s: Settings) -> Lanes:
        g = s.section(GoSettings)
        zips = g.proxy_url.rstrip("/") + "/@zip/"  # zips are asked on their lane by name
        return Lanes([Lane(PROXY, g.proxy_url, Rate(g.proxy_rate)),
                      Lane(INDEX, g.index_url, Rate(g.index_rate)),
                      Lane(ZIP, zips, Rate(g.zip_rate))])  # fmt: skip

    def client(self, fetcher: Fetcher, s: Settings) -> GoClient:
        g = s.section(GoSettings)
        return GoClient(fetcher, g.proxy_url, g.index_url)

    async def _resolve(
        self, client: GoClient, name: str, extra: Sequence[str] = (), etag: str | None = None
    ) -> Module | None:
        try:
            return await resolve(client, name, extra, Validators(etag=etag) if etag else None)
        except ValueError as exc:  # the latest go.mod cannot be read
            raise UnreadableAnswer(f"{name}: {exc}") from None

    async def seed_one(self, client: GoClient, name: str) -> Listing:
        module = await self._resolve(client, name)
        assert module is not None  # no validators: no 304
        return module.listing()

    async def collect_one(
        self, client: GoClient, name: str, versions: Sequence[str], context: CollectContext
    ) -> Collected:
        if match_private(self.private, name):
            raise SourceFailed(PROXY, UnreadableAnswer(f"{name} is private: not asked"))
        await client.listing(name)  # the module is not there: every event not found

        async def answers(version: str) -> tuple[str, dict[str, Any], str] | None:
            try:
                return version, await client.info(name, version), await client.mod(name, version)
            except NotFound:
                return None  # that version is not on the proxy: not found
            except ValueError as exc:
                raise SourceFailed(PROXY, UnreadableAnswer(str(exc))) from None

        got = await all_or_none(partial(answers, v) for v in versions)  # in flight together
        found = {version: (info, text) for version, info, text in filter(None, got)}
        module = await self._resolve(client, name, list(found))  # the proxy answered for them
        assert module is not None
        rows = await all_or_none(
            partial(self._row, client, module, v, *found[v], context) for v in found
        )
        client.forget(name, module.versions)
        pairs = [(v, module.reason(v) is not None) for v in module.versions]  # retracted
        product = self.product_row(name, pairs, context.now, URL=f"https://pkg.go.dev/{name}",
                                   **module.product())  # its own @latest  # fmt: skip
        listed: dict[Hashable, bool] = dict(pairs)
        yanked = sum(1 for row in rows if row["YANKED"])
        return Collected(listed, (rows, product), problems=module.problems, yanked_rows=yanked)

    async def _row(
        self, client: GoClient, module: Module, version: str, info: dict[str, Any], text: str,
        context: CollectContext,
    ) -> dict[str, Any]:  # fmt: skip
        name, why = module.name, module.reason(version)
        try:
            mod = modfile.parse_dependency(text)
        except ValueError as exc:
            raise SourceFailed(PROXY, UnreadableAnswer(f"{name}@{version} go.mod: {exc}")) from None
        license_text, source = None, None
        if self.zips:  # enrichment: without the zip lane the license is unknown, not "none"
            archive = await client.zip(name, version, self.zip_max)
            try:
                license_text, source = zip_licenses(archive, f"{name}@{version}/"), "zip"
            finally:
                archive.unlink(missing_ok=True)
        standard = context.licenses.standardise(license_text) if context.licenses else None
        return self.version_row(
            name, version, context.now, standard, LICENSE=license_text,
            DEPENDENCIES=_requires_column(text), YANKED=why is not None,
            URL=f"https://pkg.go.dev/{name}@{version}", RELEASE_DATE=parse_time(info.get("Time")),
            PROCESSED=1, RETRACTED=why is not None, RETRACTED_REASON=why,
            PSEUDO=is_pseudo(version), INCOMPATIBLE=version.endswith("+incompatible"),
            GO_VERSION=mod.go, TOOLCHAIN=mod.toolchain, LICENSE_SOURCE=source,
            GO_MOD_SYNTHETIC=text == f"module {modfile.auto_quote(name)}\n",
        )  # fmt: skip

    async def refresh_plan(
        self, client: GoClient, db: Database, names: Sequence[str]
    ) -> RefreshPlan:
        """The stored modules the feed names since the cursor (every module it names with
        --since: a mirror); without a cursor yet, every stored module (a conditional GET) and
        the cursor starts an hour back (the proxy's clock and ours need not agree)."""
        go_tables = tables.GoTables(db)
        stored = await asyncio.to_thread(go_tables.read_cursor, client.index)
        since, scope = (self.since, "all") if self.since else stored or ("", "stored")
        last, pages, seen = since, 0, dict[str, list[str]]()
        if not since:
            last = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
            targets = await asyncio.to_thread(self.refresh_targets, db, names)
        else:
            async for rows in client.feed(since):
                pages += 1
                for row in rows:
                    seen.setdefault(row.path, []).append(row.version)
                    last = row.timestamp
            known = await asyncio.to_thread(db.read, self.products(db).keys)
            ours = {p for p in seen if scope == "all" or p in known} & set(names or seen)
            public = sorted(p for p in ours if not match_private(self.private, p))
            targets = [RefreshTarget(p, p, fed=tuple(seen[p])) for p in public]
        note = f"{len(targets)} of {len(seen)} modules in the feed since {since} ({scope})"
        save = lambda c: go_tables.save_cursor(c, client.index, last, scope)  # noqa: E731
        return RefreshPlan(targets, save, note if since else "no feed cursor yet: all asked", pages)

    async def refresh_one(self, client: GoClient, target: RefreshTarget) -> Listing | None:
        fed, etag = target.fed, target.stored  # the feed's versions, or the list's ETag
        module = await self._resolve(client, target.name, fed, None if fed else etag)
        return None if module is None else module.listing()  # its answers kept for collect

    def refresh_extra(self, listing: Listing) -> dict[str, Any]:
        module: Module = listing.state
        return module.product()

    def save_refresh_state(self, conn: Connection, db: Database, listing: Listing) -> None:
        module: Module = listing.state
        reasons = {v: module.reason(v) for v in module.versions}
        tables.GoTables(db).set_retractions(conn, listing.name, reasons)

    def read_lock(
        self, path: Path, text: str, where: str | None = None, root: Path | None = None
    ) -> LockInput:
        name: Namer = str
        if where is not None and root is not None:  # a tag's tree: named by the tag
            name = tree_namer(path, root, where)
        lock = self._private(locks.read_lock(path, text, root, name))
        lock.where = where or lock.where
        return lock

    def tag_locks(self, tree: Path) -> list[Path]:
        """go.work, else go.mod, else vendor/modules.txt (go < 1.17 without a go.mod): the one
        file `go` builds the tree from."""
        found = (tree / name for name in ("go.work", "go.mod", "vendor/modules.txt"))
        return next(([path] for path in found if path.is_file()), [])

    def _private(self, lock: LockInput) -> LockInput:
        """Private modules are reported as such, never registered or audited."""
        private = [pin for pin in lock.pins if match_private(self.private, pin.name)]
        lock.pins = [pin for pin in lock.pins if pin not in private]
        why = "private (--private, GOPRIVATE): not audited against public data"
        lock.unaudited += [Unaudited(p.name, p.version, p.source, why) for p in private]
        return lock

    def parse_pin(self, text: str) -> tuple[str, str | None]:
        """`PATH@VERSION`, or `PATH` (every collected version of it); `stdlib@1.22.3`."""
        name, at, version = text.partition("@")
        if name != locks.STDLIB:
            self.validate_name(name)
        if at and (not GO.parsed(version) or (name != locks.STDLIB and not is_valid(version))):
            raise InputError(f"{text!r}: {version!r} is not a canonical Go version")
        return name, version if at else None


REGISTRY = Go()
