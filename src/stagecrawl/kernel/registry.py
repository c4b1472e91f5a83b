"""The registry plug-in contract: what a registry declares and the little it does itself.

A registry is one object (`Registry`): its declaration (names, words, settings section),
its identity rules and version order, its lanes and client, its tables (`schema`), its OSV
ecosystem, and its per-unit work —

- `seed_one(client, name)` → a `Listing`: every version the authoritative source lists;
- `collect_one(client, name, versions, context)` → a `Collected`: the rows of one unit
  (a crate, a project) and what the source lists;
- `refresh_one(client, target)` → a `Listing`, or None when nothing changed (a 304);
- its lock-file readers (`read_lock`, `locks_at_tag`) and pin parser (`parse_pin`).

Each raises what the fetcher raises (NotFound, RateLimited, FetchError) or a ValueError
for an unreadable answer; the kernel turns every one into the same outcome for every
registry (not found, waiting for a pause off the ladder, one rung up the ladder with the
reason). Everything else — seeding with backpressure and the SQLite hand-over, collecting
with leases, heartbeats, group commit and the outage watch, crawl, refresh on the work
loop, lock registration, advisories, audit, license policy, status, reports — is the
kernel's (stagecrawl.kernel), written once.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from stagecrawl.errors import InputError
from stagecrawl.kernel.declaration import RegistryDecl
from stagecrawl.sca.spdx import SPDX_READER, LicenseReader
from stagecrawl.settings import Section, Settings

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from stagecrawl.engine.fetcher import Fetcher
    from stagecrawl.engine.git import GitRepo
    from stagecrawl.engine.ratelimit import Lanes
    from stagecrawl.engine.shutdown import GracefulStop
    from stagecrawl.queue.events import EventList
    from stagecrawl.queue.sql import SqlQueue
    from stagecrawl.sca.ai import AiLicenseClient
    from stagecrawl.sca.audit import DependencyGraph, Package, Unaudited
    from stagecrawl.sca.ecosystem import Ecosystem, VulnTables
    from stagecrawl.sca.matcher import LicenseMatcher, Standardised
    from stagecrawl.storage.bounds import RowSet
    from stagecrawl.storage.db import Database
    from stagecrawl.storage.owners import ProductTable, VersionOrder, VersionTable
    from stagecrawl.storage.schema import RegistrySchema, RegistryTables

C = TypeVar("C")  # the registry's client
# PRODUCT's columns that describe a package, each registry filling those its sources give
_DESCRIBING = ("DESCRIPTION", "URL", "SCM", "KEYWORDS", "CATEGORIES", "DOWNLOADS")
# VERSION's columns that describe a release, each registry filling those its sources give
_RELEASE_FACTS = ("DESCRIPTION", "DEPENDENCIES", "CHECKSUM", "SCM", "DOWNLOADS", "RELEASE_DATE")


class SourceFailed(Exception):
    """One of a unit's requests failed: `source` names which of the registry's sources
    ("index", "api") for the stored reason, `cause` is what the fetcher or a parser raised
    (a RateLimited cause still means "not attempted", a NotFound of the index "not found")."""

    def __init__(self, source: str, cause: Exception) -> None:
        super().__init__(f"{source}: {cause}")
        self.source = source
        self.cause = cause


@dataclass
class Listing:
    """What the authoritative source lists for one name: its real spelling, every version
    (with its yanked flag) in the source's order, and what could not be read but did not
    stop the rest (unreadable lines, invalid versions: kept and reported)."""

    name: str
    versions: dict[str, bool]
    problems: list[str] = field(default_factory=list)
    # the registry's own facts to keep with a refresh (PRODUCT's ETAG, an index state row)
    state: Any = None
    # versions on parts of the source that could not be read, and whether some unreadable
    # part's version could not be made out at all: a version not listed may still be there
    unreadable_versions: frozenset[str] = frozenset()
    unreadable_unknown: bool = False

    def may_list(self, version: str) -> bool:
        """Whether `version`, not among the readable versions, may sit on an unreadable part
        (then "not found" would be a guess)."""
        return version in self.unreadable_versions or self.unreadable_unknown


@dataclass
class CollectContext:
    """What the kernel gives a unit's collection besides the client."""

    now: datetime
    licenses: LicenseMatcher | None = None
    ai: AiLicenseClient | None = None


@dataclass
class Collected:
    """What collecting one unit produced: every version the source lists (by the
    registry's version key, with its yanked flag), the registry's rows for its writer
    (opaque to the kernel), the versions asked for that may sit on an unreadable part of the
    source (not found would be a guess: they climb the ladder with the reason), problems to
    report, and counts of the registry's own (`unknown_dependencies`)."""

    listed: Mapping[Hashable, bool]
    rows: Any
    unreadable: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    yanked_rows: int = 0


@dataclass(frozen=True)
class RefreshTarget:
    """A stored package a refresh asks about again, with what it stored last time (an
    ETag, a content hash): the registry's own, opaque to the kernel."""

    name: str
    key: str
    stored: Any = None
    fed: tuple[str, ...] = ()  # the versions a change feed named for it (Go's index)


@dataclass
class RefreshPlan:
    """What a refresh asks about: the stored packages to ask again (a registry with a change
    feed names only those that changed), and what the next refresh starts from (a feed's
    cursor), saved by `save` only once every target was asked and its change applied — with
    the work it implies, so a refresh stopped anywhere and run again misses nothing."""

    targets: list[RefreshTarget]
    save: Callable[[Connection], None] | None = None
    note: str = ""  # how the targets were chosen, for the report ("4 of 400 moved")
    requests: int = 0  # requests the plan itself cost (a root listing, feed pages)


@dataclass(frozen=True)
class Pin:
    """A version a lock file pins, where (the lock, or a file it includes) and at which line."""

    name: str
    version: str
    where: str
    line: int | None = None

    @property
    def source(self) -> str:
        """Where, in words: "requirements.txt line 4"."""
        return self.where if self.line is None else f"{self.where} line {self.line}"


@dataclass
class LockInput:
    """One lock file read: where it is, its kind, its pins, and what it names that is not a
    registry pin (a git or path source, an unpinned line: `sca.audit.Unaudited`, with why),
    notes on how it was read (an include read once), its dependency graph where it has one."""

    where: str
    kind: str
    pins: list[Pin] = field(default_factory=list)
    unaudited: list[Unaudited] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)  # "name version" -> why
    graph: DependencyGraph | None = None
    # pins the audit evaluates that are no registry package to collect (Go's standard library)
    audit_only: list[Pin] = field(default_factory=list)

    @property
    def unpinned(self) -> list[str]:
        """The requirements that are not pins (they fail an audit: nothing can be said)."""
        return [u.text() for u in self.unaudited if u.fails]


class Registry(ABC, Generic[C]):
    """A registry plug-in (see the module's docstring). Subclasses set the class attributes
    and implement the abstract methods; the rest has defaults every registry shares."""

    decl: RegistryDecl
    language: str  # VERSION/PRODUCT LANGUAGE: "rust", "python"
    repository: str  # VERSION/PRODUCT REPOSITORY: "Cargo", "PyPI"
    order: VersionOrder
    ecosystem: Ecosystem
    schema: RegistrySchema
    # Lanes whose requests a unit's collection makes, for its progress fields
    lanes_shown: tuple[str, ...] = ()
    # Licenses: how the registry's license strings are read (its loose names), for the
    # matcher and for the policy's verdict (None: the matcher's reader, deprecated ids kept)
    license_reader: LicenseReader = SPDX_READER
    policy_reader: LicenseReader | None = None
    # A version requirement of a license exception (`NAME@REQ=LICENSE`, the config's
    # `version`) in the registry's syntax; None: an exact version
    version_matcher: Callable[[str], Callable[[str], bool]] | None = None
    # A Rust audit also reads the cargo tools' deny.toml and .cargo/audit.toml
    reads_cargo_configs = False
    # Why the registry's origin asks a crawler for a contact in its User-Agent (its crawler
    # policy, in words); None: it does not
    contact_policy: str | None = None
    # The registry's version syntax, checked where a version enters from an input (a lock
    # file, a pin: `check_version`), and how a refusal names it; None: any text in the bound
    is_version: Callable[[str], bool] | None = None
    not_a_version = "not a version"
    # The PRODUCT column that keeps the ETag of the listing a refresh asks again with a
    # conditional GET (PyPI's Simple page, Go's version list); None: the registry keeps its
    # own refresh state and says its own `refresh_targets` (crates' index state table)
    etag_column: str | None = None

    # -- identity ---------------------------------------------------------------------------

    @property
    def code(self) -> str:
        return self.decl.code

    @abstractmethod
    def validate_name(self, name: str) -> str:
        """The name if the registry could have published it, else InputError (before any
        URL is built from it)."""

    def identity(self, name: str) -> str:
        """The key names are deduplicated and grouped by (the LIST's key column): the
        PRODUCT_KEY by default."""
        return self.product_key(name)

    def product_key(self, name: str) -> str:
        """VERSION's and PRODUCT's PRODUCT_KEY of a real name."""
        return self.decl.names.fold(name)

    def version_row(
        self,
        name: str,
        version: str,
        now: datetime,
        standard: Standardised | None = None,
        expression: str | None = None,
        **columns: Any,
    ) -> dict[str, Any]:
        """A VERSION row of a collected version: the columns every registry's has, the
        license columns from what the SCA core's matcher made of the declared license
        (`standard`; `expression` is LICENSE_EXPRESSION when there is none: PyPI's declared
        one), then `columns`: LICENSE, the release's facts (NULL when not given), YANKED and
        the registry's own. (crates builds its rows as tuples instead: its crawl makes one
        per version at thousands a second, and a dict a row was a measured cost there.)"""
        return {
            "LANGUAGE": self.language, "REPOSITORY": self.repository,
            "PRODUCT_KEY": self.product_key(name), "VERSION": version, "NAME": name,
            **dict.fromkeys(_RELEASE_FACTS), "LICENSE": None, "FEATURES": "[]", "YANKED": False,
            "STANDARD_LICENSE": standard.standard_license if standard else None,
            "LICENSE_IDS": standard.license_ids if standard else None,
            "LICENSE_EXPRESSION": standard.expression if standard else expression,
            "LICENSE_AI": None, "LAST_UPDATED": now, **columns,
        }  # fmt: skip

    def product_row(
        self, name: str, versions: Sequence[tuple[str, bool]], now: datetime, **columns: Any
    ) -> dict[str, Any]:
        """A PRODUCT row of a collected package: the columns every registry's has, with
        LATEST_VERSION and COMP_STATUS by the one rule over its (version, yanked) pairs (a
        registry whose latest is its own, as Go's @latest, gives them in `columns`), then
        `columns`: DESCRIPTION, URL, SCM, KEYWORDS, CATEGORIES, DOWNLOADS (NULL when not
        given) and the registry's own."""
        from stagecrawl.storage.owners import latest_version

        latest = latest_version(versions, self.order)
        return {
            "LANGUAGE": self.language, "REPOSITORY": self.repository,
            "PRODUCT_KEY": self.product_key(name), "NAME": name, **dict.fromkeys(_DESCRIBING),
            "LATEST_VERSION": latest.latest, "COMP_STATUS": latest.status,
            "VERSION_COUNT": len(versions), "LAST_UPDATED": now, **columns,
        }  # fmt: skip

    def event_id(self, name: str, version: str) -> bytes:
        """The LIST primary key: sha256 of `identity@version`, 32 raw bytes."""
        return hashlib.sha256(f"{self.identity(name)}@{version}".encode()).digest()

    def listing_problem(self, listing: Listing) -> str | None:
        """Why a listing cannot enter the queue, if it cannot: its name or a version longer
        than the columns hold (the bounds of the registry's declaration). The unit fails
        alone, with this reason, instead of its batch."""
        from stagecrawl.storage.bounds import too_long

        bounds, unit = self.decl.names.bounds, self.decl.words.unit
        if len(listing.name) > bounds.name:
            return too_long(f"{unit} name", listing.name, bounds.name)
        for version in listing.versions:
            if len(version) > bounds.version:
                return too_long(f"{unit} {listing.name[:80]}: version", version, bounds.version)
        return None

    def version_key(self, version: str) -> Hashable:
        """Versions that are one under the registry's rules compare equal by this key (PEP
        440's `3.13.0` and `3.13`); the plain string by default."""
        return version

    def check_version(self, name: str, version: str) -> str:
        """A version from an input (a lock file, a pin) that may enter the queue, else
        InputError with the reason. Its bound is the table's (one declaration)."""
        from stagecrawl.storage.bounds import too_long

        bound = self.decl.names.bounds.version
        if not version:
            raise InputError(f"invalid version '' of {self.decl.words.unit} {name!r}: empty")
        if len(version) > bound:
            raise InputError(
                too_long(f"{self.decl.words.unit} {name[:80]!r}: version", version, bound)
            )
        if self.is_version is not None and not self.is_version(version):
            raise InputError(f"{name} {version}: {self.not_a_version}")
        return version

    # -- sources ----------------------------------------------------------------------------

    def section(self, s: Settings) -> Section:
        return s.section(self.decl.section)

    @abstractmethod
    def lanes(self, s: Settings) -> Lanes:
        """The registry's lanes (one per endpoint) from its settings section."""

    def check_settings(self, s: Settings) -> None:
        """What the settings table cannot check alone: by default the contact the origin asks
        for (`contact_policy`), where `asks_contact` says the run reaches that origin."""
        from stagecrawl.engine.fetcher import require_contact

        if self.contact_policy is not None and self.asks_contact(s):
            require_contact(s.contact, self.contact_policy)

    def asks_contact(self, s: Settings) -> bool:
        """Whether the run's sources are the origin whose policy asks for a contact: yes by
        default (a mirror of it answers the same crawler)."""
        return True

    def configure(self, s: Settings) -> None:
        """Take the run's settings that decide what the registry reads, not how it fetches
        (Go's private modules: never asked, never audited); called before any input is
        read."""

    @abstractmethod
    def client(self, fetcher: Fetcher, s: Settings) -> C:
        """The registry's client on the run's fetcher."""

    @abstractmethod
    async def seed_one(self, client: C, name: str) -> Listing:
        """Every version the authoritative source lists for `name`."""

    @abstractmethod
    async def collect_one(
        self, client: C, name: str, versions: Sequence[str], context: CollectContext
    ) -> Collected:
        """Collect the asked `versions` of one unit (`name` as registered)."""

    def write(self, conn: Connection, db: Database, rows: Sequence[Any]) -> None:
        """The rows of `Collected.rows` of a batch of units, in the finishing transaction,
        through the table owners. By default a unit's rows are `(VERSION rows as dicts, its
        PRODUCT row)`; a registry with other rows (tuples, a table of its own) overrides
        this and `row_sets` together."""
        if version_rows := [row for versions, _product in rows for row in versions]:
            self.versions(db).upsert(conn, version_rows)
        self.products(db).upsert(conn, [product for _versions, product in rows])

    def row_sets(self, db: Database, rows: Any) -> list[RowSet]:
        """One unit's `Collected.rows` by table, for the kernel's bounds check before the
        unit joins a batch (a value longer than its column fails that unit alone)."""
        from stagecrawl.storage.bounds import RowSet

        versions, product = rows
        t = self.tables(db)
        return [RowSet(t.version, versions), RowSet(t.product, [product])]

    def requests(self, client: C) -> dict[str, int]:
        """Requests so far, per lane (the progress fields)."""
        fetcher: Fetcher = getattr(client, "fetcher")  # noqa: B009 -- every client has one
        return dict(fetcher.stats.requests)

    # -- refresh ----------------------------------------------------------------------------

    def refresh_targets(self, db: Database, names: Sequence[str]) -> list[RefreshTarget]:
        """The stored packages a refresh asks about (all, or those of `names`), each with the
        ETag its PRODUCT row keeps (`etag_column`)."""
        if self.etag_column is None:
            raise NotImplementedError(f"{self.code}: no etag_column, no refresh_targets")
        column = self.etag_column
        etags: dict[str, Any] = db.read(lambda conn: self.products(db).column(conn, column))
        wanted = [self.product_key(name) for name in names] if names else sorted(etags)
        return [RefreshTarget(key, key, etags.get(key)) for key in wanted]

    async def refresh_plan(self, client: C, db: Database, names: Sequence[str]) -> RefreshPlan:
        """Which stored packages to ask again: by default every one (a registry without a
        change feed, such as crates.io's sparse index, asks each with a conditional GET); a
        registry with a feed (PyPI's serials, Go's index) narrows it to what changed."""
        import asyncio

        targets = await asyncio.to_thread(self.refresh_targets, db, list(names))
        words = self.decl.words
        note = f"every stored {words.unit} asked ({len(targets)}: {words.index} has no change feed)"
        return RefreshPlan(targets, note=note)

    @abstractmethod
    async def refresh_one(self, client: C, target: RefreshTarget) -> Listing | str | None:
        """The package's listing if it changed since `target.stored`; else None (a 304) or
        how the registry knew it is unchanged ("same_content")."""

    def refresh_extra(self, listing: Listing) -> dict[str, Any]:
        """PRODUCT columns of the registry's own that a changed listing sets (PyPI's ETAG)."""
        return {}

    def save_refresh_state(self, conn: Connection, db: Database, listing: Listing) -> None:
        """Keep what the next refresh compares with (in the transaction that applies the
        change: recorded only with the work it implies)."""

    # -- locks and pins ---------------------------------------------------------------------

    @abstractmethod
    def read_lock(
        self, path: Path, text: str, where: str | None = None, root: Path | None = None
    ) -> LockInput:
        """One lock file of the registry's, named `where` in what it reports (its path by
        default); what it includes is read from beside it, never from outside `root` when
        given. InputError when it is not readable as one."""

    async def locks_at_tag(
        self, repo: GitRepo, tag: str, s: Settings, stop: GracefulStop | None
    ) -> list[LockInput]:
        """The lock files `tag_locks` chooses in the tree at `tag`, each read as `read_lock`
        reads one, its includes from that tree alone. None is not an error: the caller reports
        a tag without a lock file (nothing is resolved here; a registry whose tags need a
        resolver, as cargo's do, says its own)."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="stagecrawl-tag-") as tmp:
            tree = Path(tmp)
            await repo.export(tag, tree)
            return [
                self.read_lock(
                    path,
                    path.read_text(encoding="utf-8", errors="replace"),
                    f"{repo.label}@{tag} {path.relative_to(tree).as_posix()}",
                    tree,
                )
                for path in self.tag_locks(tree)
            ]

    def tag_locks(self, tree: Path) -> list[Path]:
        """The lock files read at a tag: every one the declaration names at the top of the
        tree; a registry that reads one of several (Go) chooses its own."""
        return self.decl.locks_in(tree)

    @abstractmethod
    def parse_pin(self, text: str) -> tuple[str, str | None]:
        """A pin from the command line: (name, version), or (name, None) for every
        collected version of it. InputError when it is not one."""

    # -- tables (one way to reach each: the registry's owners) ------------------------------

    def tables(self, db: Database) -> RegistryTables:
        return db.registry(self.code)

    def event_list(self, db: Database) -> EventList:
        from stagecrawl.queue.events import EventList

        names = self.decl.names
        return EventList(db, self.tables(db).list, self.identity, self.event_id, names.group)

    def seed_queue(self, db: Database) -> SqlQueue:
        from stagecrawl.queue.lists import seed_spec
        from stagecrawl.queue.sql import SqlQueue

        names = self.decl.names
        return SqlQueue(db, seed_spec(names.seed, names.group))

    def versions(self, db: Database) -> VersionTable:
        from stagecrawl.storage.owners import VersionTable

        return VersionTable(db, self.tables(db), self.language, self.repository)

    def products(self, db: Database) -> ProductTable:
        from stagecrawl.storage.owners import ProductTable

        return ProductTable(db, self.tables(db), self.language, self.repository, self.order)

    def vuln_tables(self, db: Database) -> VulnTables:
        from stagecrawl.sca.ecosystem import VulnTables

        t = self.tables(db)
        return VulnTables(raw=t.vuln_raw, v1=t.vuln_v1, hit=t.vuln_hit)

    def policy_license(self, expression: str | None, text: str | None) -> str | None:
        """The license string a policy judges: the registry's as declared (crates.io's
        LICENSE) unless it keeps a normalised expression it trusts more."""
        return text

    def audit_package(self, name: str, version: str, source: str) -> Package:
        from stagecrawl.sca.audit import Package

        return Package(name, version, [source])


def declared_ecosystem(decl: RegistryDecl, order: VersionOrder, **facts: Any) -> Ecosystem:
    """The registry as OSV, purl and reports know it (`sca.ecosystem.Ecosystem`), with what
    its declaration and version order say already taken from them, not said again: OSV's
    name for it, its word for a package, the order ranges are read in; `facts` the rest."""
    from stagecrawl.sca.ecosystem import Ecosystem

    unit = decl.words.unit
    return Ecosystem(name=decl.osv_ecosystem, package_word=unit, sort_key=order.key, **facts)


def load(decl: RegistryDecl) -> Registry[Any]:
    """A registry's work from its declaration (its module imported now)."""
    import importlib

    module, _, attribute = decl.plugin.partition(":")
    found = getattr(importlib.import_module(module), attribute)
    assert isinstance(found, Registry), decl.plugin
    return found
