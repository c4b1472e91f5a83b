"""crates.io on the registry kernel: the sparse index is authoritative (which versions exist,
yanked, dependencies, features), the API enriches (description, license, dates, downloads).
The kernel seeds, collects, refreshes, locks and audits; this module gives crates.io's lanes,
its identity rules, one crate's work and its readers."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import Connection

from stagecrawl.crates import tables
from stagecrawl.crates.client import CratesClient, IndexEntry, index_entry
from stagecrawl.crates.declaration import DECLARATION, CratesSettings
from stagecrawl.crates.ecosystem import CRATES
from stagecrawl.crates.licenses import CRATES_POLICY_READER, CRATES_READER
from stagecrawl.crates.lock import LOCKFILE, cargo_home, locks_at_tag, read_cargo_lock
from stagecrawl.crates.names import identity_key, index_path, validate_name, validate_version
from stagecrawl.crates.rows import (
    VERSION_COLUMNS,
    YANKED_AT,
    index_state_row,
    product_columns,
    version_row,
)
from stagecrawl.crates.semver import SEMVER, Version, version_matcher
from stagecrawl.engine.fetcher import Fetcher, Validators
from stagecrawl.engine.git import GitRepo
from stagecrawl.engine.ratelimit import Budget, Lane, Lanes, Rate
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.errors import ConfigError, FetchError, InputError
from stagecrawl.kernel.registry import (
    CollectContext,
    Collected,
    Listing,
    LockInput,
    RefreshTarget,
    Registry,
    SourceFailed,
)
from stagecrawl.secrets import mask_url
from stagecrawl.settings import Settings
from stagecrawl.storage.bounds import RowSet
from stagecrawl.storage.db import Database


@dataclass
class CrateRows:
    """One crate's rows: VERSION tuples (`rows.VERSION_COLUMNS`), PRODUCT, index state."""

    versions: list[tuple[Any, ...]]
    product: dict[str, Any]
    index_state: dict[str, Any]


def parse_budgets(text: str) -> tuple[Budget, ...]:
    """`600/600s,5000/1h`; `none` (or nothing) for no budget."""
    if not text.strip() or text.strip().lower() == "none":
        return ()
    try:
        return tuple(Budget.parse(part) for part in text.split(",") if part.strip())
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def is_crates_io(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return host == "crates.io" or host.endswith(".crates.io")


class Crates(Registry[CratesClient]):
    decl = DECLARATION
    language, repository = tables.LANGUAGE, tables.REPOSITORY
    order = SEMVER
    ecosystem = CRATES
    schema = tables.SCHEMA
    lanes_shown = ("index", "api")
    license_reader = CRATES_READER
    policy_reader = CRATES_POLICY_READER
    version_matcher = staticmethod(version_matcher)
    reads_cargo_configs = True
    contact_policy = (
        "crates.io's crawler policy asks every crawler to identify itself with a way to reach"
        " its operator in the User-Agent"
    )

    # -- identity ---------------------------------------------------------------------------

    def validate_name(self, name: str) -> str:
        return validate_name(name)

    def identity(self, name: str) -> str:
        """Lower case, `_` folded to `-` (`Serde_JSON` and `serde-json` are one crate)."""
        return identity_key(name)

    def check_version(self, name: str, version: str) -> str:
        return validate_version(version, name)  # SemVer 2.0.0 as crates.io checks it

    # -- sources ----------------------------------------------------------------------------

    def check_settings(self, s: Settings) -> None:
        """A token beside credentials in the same lane's URL, and the contact crates.io asks
        crawlers for."""
        c = s.section(CratesSettings)
        lanes = (
            ("--index-url", c.index_url, "STAGECRAWL_INDEX_TOKEN", c.index_token),
            ("--api-url", c.api_url, "STAGECRAWL_API_TOKEN", c.api_token),
        )
        for label, url, token_name, token in lanes:
            parts = urlsplit(url)
            if token and (parts.username or parts.password):
                # Both would be an Authorization header: say so, rather than let every
                # request fail.
                raise ConfigError(
                    f"{label} carries credentials ({mask_url(url)}) and {token_name} is set:"
                    " use one of them"
                )
        super().check_settings(s)

    def asks_contact(self, s: Settings) -> bool:
        """crates.io asks; another registry's index (a mirror, a private one) may not."""
        c = s.section(CratesSettings)
        return any(is_crates_io(u) for u in (c.index_url, c.api_url))

    def lanes(self, s: Settings) -> Lanes:
        c = s.section(CratesSettings)
        return Lanes(
            [
                Lane(
                    "index",
                    c.index_url,
                    Rate(c.index_rate, c.index_burst),
                    parse_budgets(c.index_budget),
                    token=c.index_token,
                ),
                Lane(
                    "api",
                    c.api_url,
                    Rate(c.api_rate, c.api_burst),
                    parse_budgets(c.api_budget),
                    token=c.api_token,
                ),
            ]
        )

    def client(self, fetcher: Fetcher, s: Settings) -> CratesClient:
        c = s.section(CratesSettings)
        return CratesClient(fetcher, c.index_url, c.api_url)

    async def seed_one(self, client: CratesClient, name: str) -> Listing:
        return _listing(await client.index(name))

    async def collect_one(
        self, client: CratesClient, name: str, versions: Sequence[str], context: CollectContext
    ) -> Collected:
        """One index request and one API request (each shared with a seeder alongside
        through the client's run cache)."""
        try:
            entry = await client.index(name)
        except FetchError as exc:  # NotFound and RateLimited included: the kernel tells
            raise SourceFailed("index", exc) from exc
        except ValueError as exc:  # a file without one readable line
            raise SourceFailed("index", exc) from exc
        try:
            api = await client.api(entry.real_name)
        except (FetchError, ValueError) as exc:
            raise SourceFailed("api", exc) from exc
        ai_ids: dict[str, str | None] = {}
        if context.ai is not None and api is not None:
            for text in {v.license for v in api.versions.values() if v.license}:
                ai_ids[text] = await context.ai.classify(text)
        by_version = {v.vers: v for v in entry.versions}
        rows: list[tuple[Any, ...]] = []
        unreadable: dict[str, str] = {}
        for version in versions:
            found = by_version.get(version)
            if found is not None:
                rows.append(
                    version_row(entry.real_name, found, api, context.now, context.licenses, ai_ids)
                )
                continue
            reason = entry.unreadable_reason(version)
            if reason is not None:
                unreadable[version] = reason
        client.forget(name)  # rows built: the run cache need not keep this crate
        client.forget(entry.real_name)
        return Collected(
            listed={v.vers: v.yanked for v in entry.versions},
            rows=CrateRows(
                rows,
                self.product_row(
                    entry.real_name,
                    [(v.vers, v.yanked) for v in entry.versions],
                    context.now,
                    **product_columns(entry, api),
                ),
                index_state_row(entry, context.now),
            ),
            unreadable=unreadable,
            problems=entry.problem_lines(),
            yanked_rows=sum(1 for row in rows if row[YANKED_AT]),
        )

    def write(self, conn: Connection, db: Database, rows: Sequence[Any]) -> None:
        """The VERSION rows as tuples (the bulk upsert: no dict a row), PRODUCT and the index
        state of a batch of crates."""
        crates: Sequence[CrateRows] = rows
        version_rows = [row for crate in crates for row in crate.versions]
        if version_rows:
            tables.versions(db).bulk(VERSION_COLUMNS).execute(conn, version_rows)
        tables.products(db).upsert(conn, [crate.product for crate in crates])
        tables.IndexStateTable(db).upsert(conn, [crate.index_state for crate in crates])

    def row_sets(self, db: Database, rows: Any) -> list[RowSet]:
        crate: CrateRows = rows
        t = self.tables(db)
        return [
            RowSet(t.version, crate.versions, VERSION_COLUMNS),
            RowSet(t.product, [crate.product]),
            RowSet(tables.IndexStateTable(db).table, [crate.index_state]),
        ]

    # -- refresh: conditional GETs (the sparse index has no change feed) -----------------

    def refresh_targets(self, db: Database, names: Sequence[str]) -> list[RefreshTarget]:
        return [
            RefreshTarget(state["NAME"], str(state["PRODUCT_KEY"]), state)
            for state in tables.IndexStateTable(db).known(list(names))
        ]

    async def refresh_one(
        self, client: CratesClient, target: RefreshTarget
    ) -> Listing | str | None:
        state = target.stored
        result = await client.fetcher.get(
            client.index_url + index_path(target.name),
            lane="index",
            validators=Validators(state["ETAG"], state["LAST_MODIFIED"]),
        )
        if result.not_modified:
            return None
        if hashlib.sha256(result.content).hexdigest() == state["CONTENT_SHA256"]:
            return "same_content"
        entry = index_entry(result.content, result.validators, target.name)
        client.keep(target.name, entry)  # changed: the collect that follows reads it
        return _listing(entry)

    def save_refresh_state(self, conn: Connection, db: Database, listing: Listing) -> None:
        from stagecrawl.queue import utcnow

        entry: IndexEntry = listing.state
        tables.IndexStateTable(db).upsert(conn, [index_state_row(entry, utcnow())])

    # -- locks and pins ---------------------------------------------------------------------

    def read_lock(
        self, path: Path, text: str, where: str | None = None, root: Path | None = None
    ) -> LockInput:
        return read_cargo_lock(text, where or str(path), LOCKFILE, path.resolve().parent.name)

    async def locks_at_tag(
        self, repo: GitRepo, tag: str, s: Settings, stop: GracefulStop | None
    ) -> list[LockInput]:
        home = cargo_home(Path(s.cache_dir), s.section(CratesSettings).index_url)
        return await locks_at_tag(repo, tag, home)

    def parse_pin(self, text: str) -> tuple[str, str | None]:
        """`NAME@VERSION`, or `NAME` (every collected version of it)."""
        name, at, version = text.partition("@")
        validate_name(name)
        if not at:
            return name, None
        if not version.strip():
            raise InputError(f"{text!r}: no version after @")
        try:
            Version.parse(version)
        except ValueError:
            raise InputError(f"{text!r}: {version!r} is not a semantic version") from None
        return name, version.strip()


def _listing(entry: IndexEntry) -> Listing:
    """An index file as the kernel reads a listing (the entry kept as the refresh state)."""
    return Listing(
        entry.real_name,
        {v.vers: v.yanked for v in entry.versions},
        entry.problem_lines(),
        entry,
        frozenset(p.version for p in entry.problems if p.version is not None),
        any(p.version is None for p in entry.problems),
    )


REGISTRY = Crates()
