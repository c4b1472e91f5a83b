"""Running the aircraft passes, the attribution file, and the CSV export."""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import os
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from stagecrawl.aircraft import MAX_BATCH, PASSES
from stagecrawl.aircraft.stages import (
    MANUFACTURERS_QUERY,
    MODELS_QUERY,
    ManufacturersStage,
    ModelsStage,
    SpecsStage,
)
from stagecrawl.aircraft.wikidata import QUANTITY_FIELDS
from stagecrawl.components import build_fetcher, effective, loop_settings
from stagecrawl.engine.crawler import Crawler, CrawlSummary, JsonStoreSink, Output, Stage
from stagecrawl.engine.fetcher import Fetcher, require_contact
from stagecrawl.engine.filelock import exclusive_folder
from stagecrawl.engine.frontier import FAILED, GAVE_UP, INFLIGHT, PENDING, Frontier
from stagecrawl.engine.jsonstore import (
    JsonStore,
    atomic_write,
    dumps_store,
    fsync_dir,
    journal_of,
    read_store,
    remove_stray_temporaries,
)
from stagecrawl.engine.progress import ProgressReporter
from stagecrawl.engine.ratelimit import Lane, Lanes, Rate
from stagecrawl.engine.request import Request
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.engine.work import LoopSettings
from stagecrawl.errors import ConfigError, FetchError, InputError, StorageError
from stagecrawl.pauses import Waiting
from stagecrawl.secrets import redact
from stagecrawl.settings import DEFAULTS, Settings


@dataclass
class AircraftConfig:
    """One aircraft run: where it writes, what it asks for, and the run's settings (the
    endpoints, rates, concurrency and fetch knobs; defaults follow Wikimedia's asks: one WDQS
    query at a time, few concurrent API calls)."""

    out: Path
    settings: Settings = DEFAULTS
    refresh: bool = False
    batch: int = MAX_BATCH

    @property
    def sparql_url(self) -> str:
        return self.settings.sparql_url

    @property
    def api_url(self) -> str:
        return self.settings.entities_url

    def validate(self) -> None:
        for label, url in (("--sparql-url", self.sparql_url), ("--entities-url", self.api_url)):
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ConfigError(f"{label} must be an http(s) URL, got {url!r}")
            if (parts.hostname or "").endswith("wikidata.org"):
                require_contact(
                    self.settings.contact,
                    "Wikimedia's User-Agent policy asks for a way to reach the operator",
                )
        if not 1 <= self.batch <= MAX_BATCH:
            raise ConfigError(f"--batch must be from 1 to {MAX_BATCH}, got {self.batch}")

    def lanes(self) -> Lanes:
        s = self.settings
        return Lanes(
            [
                Lane("sparql", s.sparql_url, Rate(s.sparql_rate)),
                Lane("entities", s.entities_url, Rate(s.entities_rate)),
            ]
        )

    def fetcher(self) -> Fetcher:
        self.validate()
        return build_fetcher(self.settings, self.lanes())

    def loop_settings(self, name: str) -> LoopSettings:
        """The work loop of pass `name`: the SPARQL passes send one query at a time, as the
        Wikidata Query Service asks of every client; the entity API takes the concurrency."""
        sparql = name in ("manufacturers", "models")
        concurrency = 1 if sparql else self.settings.aircraft_concurrency
        return loop_settings(self.settings, concurrency=concurrency)


# The pass whose store each pass reads.
INPUT = {"models": "manufacturers", "specs": "models"}
STATE_FOLDER = ".stagecrawl"
log = logging.getLogger("stagecrawl.aircraft")


@dataclass(frozen=True)
class OutFolder:
    """Where a pass's files are in `--out`."""

    out: Path

    def store(self, name: str) -> Path:
        return self.out / f"{name}.json"

    def frontier(self, name: str) -> Path:
        return self.out / STATE_FOLDER / f"{name}.frontier.sqlite"

    def staging(self, name: str) -> Path:
        """Where a refresh writes until it is finished, then replaces the store with it."""
        return self.out / STATE_FOLDER / f"{name}.refresh.json"

    def refreshing(self, name: str) -> bool:
        staging = self.staging(name)
        return staging.exists() or journal_of(staging).exists()

    def target(self, name: str) -> Path:
        """The store the pass writes now: its staging store while a refresh is under way."""
        return self.staging(name) if self.refreshing(name) else self.store(name)

    def written(self) -> list[Path]:
        """Every file an aircraft command writes with `atomic_write`."""
        stores = [self.store(name) for name in PASSES]
        staging = [self.staging(name) for name in PASSES]
        return [*stores, *staging, self.out / "ATTRIBUTION.md", self.out / "specs.csv"]


@contextlib.contextmanager
def hold_output(out: Path) -> Iterator[None]:
    """The one lock of an aircraft `--out`, taken before anything there is opened, replayed
    or written: a second crawl, refresh or export on it is refused and touches nothing."""
    busy = (
        f"another stagecrawl process is writing to {out} (an aircraft crawl, refresh or"
        " export); wait for it to end, or stop it"
    )
    with exclusive_folder(out, busy):
        yield


def _stage(name: str, config: AircraftConfig, folder: OutFolder) -> Stage:
    """The pass's stage, over the stores as they are now (read, never written here)."""
    if name == "manufacturers":
        return ManufacturersStage(config.sparql_url)
    if name == "models":
        return ModelsStage(
            config.sparql_url, list(read_store(folder.store("manufacturers"))), config.batch
        )
    done = read_store(folder.target("specs"))
    todo = [m for m in read_store(folder.store("models")) if m not in done]
    return SpecsStage(config.api_url, todo, config.batch)


class _Offered:
    """A stage whose start requests the run has offered the frontier itself (`offer_all`:
    unfinished requests follow this run's endpoints, those no longer wanted go): the crawler
    adds none. Everything else is the stage's."""

    def __init__(self, stage: Stage) -> None:
        self.stage = stage
        self.name = stage.name

    def start_requests(self) -> Iterable[Request]:
        return ()

    def failed(self, request: Request, error: FetchError) -> Iterable[Output]:
        return self.stage.failed(request, error)

    def __getattr__(self, attribute: str) -> Any:  # lane, rate_limited, the callbacks
        return getattr(self.stage, attribute)


@dataclass(frozen=True)
class Lacking:
    """Done requests whose items their store no longer holds."""

    requests: list[str]
    records: int | None  # how many records are missing, where the frontier can tell


def lacking(name: str, frontier: Frontier, held: Collection[str]) -> Lacking:
    """What the frontier counts as done that `held` (the pass's store) lacks. A frontier
    that lists each done request's items is checked item by item; one written before that
    by what it can tell: a specs request's ids, else an empty store."""
    if frontier.items_listed:
        requests, missing = [], set()
        for request, items in frontier.done_items().items():
            lost = {key for _store, key in items if key not in held}
            if lost:
                requests.append(request)
                missing |= lost
        return Lacking(requests, len(missing))
    done = frontier.done_requests()
    if name == "specs":
        gone = [(r.key, {i for i in r.meta.get("ids", []) if i not in held}) for r in done]
        gone = [(key, ids) for key, ids in gone if ids]
        return Lacking([key for key, _ids in gone], len(set().union(*(ids for _k, ids in gone))))
    if done and not held:
        return Lacking([r.key for r in done], None)
    return Lacking([], 0)


def _check(config: AircraftConfig, folder: OutFolder, passes: tuple[str, ...]) -> None:
    """Before anything is written: every store this run reads or writes can be read, and a
    store it reads but does not crawl holds what its frontier counts as done. Otherwise
    refused, naming the command that mends it (a store this run crawls is mended in its
    pass: what it lacks is fetched again)."""
    out = config.out
    for name in PASSES:
        reads = [p for p in passes if INPUT.get(p) == name]
        if name not in passes and not reads:
            continue
        target = folder.target(name)
        try:
            held = read_store(target)
        except StorageError as exc:
            if name in passes and config.refresh:
                continue  # the refresh fetches it whole and replaces it
            raise StorageError(
                f"{exc}. Move it aside (mv {target} {target}.broken) and run again: what the"
                " frontier counts as done there is fetched again"
            ) from None
        if name in passes or not folder.frontier(name).exists():
            continue
        view = Frontier(folder.frontier(name), read_only=True)
        try:
            lost = lacking(name, view, held)
        finally:
            view.close()
        if lost.requests:
            what = f"{lost.records} records" if lost.records else "records"
            raise StorageError(
                f"{target} lacks {what} its frontier counts as done, which the {reads[0]} pass"
                f" reads: fetch them again first (stagecrawl aircraft crawl --out {out}"
                f" --stage {name}, or --stage all)"
            )


def _begin_refresh(folder: OutFolder, passes: tuple[str, ...]) -> None:
    """Start each pass over: a new frontier, and an empty staging store that replaces the
    pass's store once the refresh is finished (until then readers see the last finished
    crawl, and an interrupted refresh goes on with the next plain run)."""
    (folder.out / STATE_FOLDER).mkdir(parents=True, exist_ok=True)
    for name in passes:
        frontier = folder.frontier(name)
        for leftover in (frontier, *(frontier.with_name(frontier.name + s) for s in WAL_FILES)):
            leftover.unlink(missing_ok=True)
        staging = folder.staging(name)
        journal_of(staging).unlink(missing_ok=True)
        atomic_write(staging, dumps_store({}))


WAL_FILES = ("-wal", "-shm")


def _tidy(folder: OutFolder) -> None:
    removed = sum(remove_stray_temporaries(path) for path in folder.written())
    if removed:
        log.warning("removed %d temporary file(s) a killed write left in %s", removed, folder.out)


@dataclass
class AircraftReport:
    passes: dict[str, CrawlSummary] = field(default_factory=dict)
    stored: dict[str, int] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)  # what the run's parts used
    # 429s by lane (a maxlag error is counted apart), answers 500-599, maxlag errors waited out
    rate_limited: dict[str, int] = field(default_factory=dict)
    server_errors: int = 0
    maxlag_waits: int = 0
    nothing_to_do: list[str] = field(default_factory=list)  # passes skipped: all stored
    refetched: dict[str, int] = field(default_factory=dict)  # requests done again: store lost
    refreshed: list[str] = field(default_factory=list)  # passes whose refresh finished
    dropped: dict[str, int] = field(default_factory=dict)  # records a finished refresh let go

    @property
    def interrupted(self) -> bool:
        return any(s.interrupted for s in self.passes.values())

    @property
    def problems(self) -> bool:
        """Something is left on the retry ladder (or given up), or waits for a pause: the run
        did not finish."""
        return self.waiting is not None or any(s.ladder or s.gave_up for s in self.passes.values())

    @property
    def waiting(self) -> Waiting | None:
        """What waits for a host's pause (the passes after a held one did not run)."""
        return Waiting.merge([s.waiting for s in self.passes.values()])

    def as_json(self) -> dict[str, object]:
        waiting = self.waiting
        return {
            "passes": {name: s.as_json() for name, s in self.passes.items()},
            "waiting": None if waiting is None else waiting.as_json(),
            "stored": self.stored,
            "requests": self.requests,
            "rate_limited": dict(sorted(self.rate_limited.items())),
            "server_errors": self.server_errors,
            "maxlag_waits": self.maxlag_waits,
            "nothing_to_do": self.nothing_to_do,
            "refetched": self.refetched,
            "refreshed": self.refreshed,
            "dropped": self.dropped,
            "settings": self.settings,
        }


async def run_aircraft(
    config: AircraftConfig,
    selected: str,
    stop: GracefulStop,
    progress: Callable[[str], ProgressReporter] | None = None,
) -> AircraftReport:
    """Run the selected passes; each pass crawls into its store with a frontier beside it.
    The whole `--out` is locked first; a pass with nothing to do writes nothing."""
    out = config.out
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot write to {out}: {exc.strerror}") from None
    passes = PASSES if selected == "all" else (selected,)
    folder = OutFolder(out)
    report = AircraftReport()
    with hold_output(out):
        _check(config, folder, passes)
        if config.refresh:
            _begin_refresh(folder, passes)
        _tidy(folder)
        async with config.fetcher() as fetcher:
            stages: list[Stage] = []
            for name in passes:
                stage = _stage(name, config, folder)
                stages.append(stage)
                summary = await _run_pass(
                    name, stage, config, folder, fetcher, stop, progress, report
                )
                if summary.interrupted or summary.waiting is not None:
                    break  # a pause holds the host: the next pass could send nothing either
            _count_requests(report, fetcher, stages)
            report.settings = effective(
                fetcher,
                {"crawl": config.loop_settings("specs"), "sparql": config.loop_settings("models")},
            )
        fetched = any(s.items for s in report.passes.values()) or report.refreshed
        attribution = out / "ATTRIBUTION.md"
        if not report.interrupted and (fetched or not attribution.exists()):
            write_attribution(config)  # the date moves only when something was retrieved
    return report


def _count_requests(report: AircraftReport, fetcher: Fetcher, stages: list[Stage]) -> None:
    stats = fetcher.stats
    report.requests = dict(stats.requests)
    report.maxlag_waits = sum(getattr(stage, "maxlag_waits", 0) for stage in stages)
    limited = dict(stats.rate_limited)
    if report.maxlag_waits:  # the fetcher counts a maxlag error as a 429 of its lane
        limited["entities"] = limited.get("entities", 0) - report.maxlag_waits
    report.rate_limited = {lane: n for lane, n in limited.items() if n}
    report.server_errors = sum(
        n for statuses in stats.statuses.values() for status, n in statuses.items() if status >= 500
    )


async def _run_pass(
    name: str,
    stage: Stage,
    config: AircraftConfig,
    folder: OutFolder,
    fetcher: Fetcher,
    stop: GracefulStop,
    progress: Callable[[str], ProgressReporter] | None,
    report: AircraftReport,
) -> CrawlSummary:
    start = list(stage.start_requests())
    idle = _nothing_to_do(name, folder, start)
    if idle is not None:
        report.passes[name], report.stored[name] = idle
        report.nothing_to_do.append(name)
        return idle[0]
    target = folder.target(name)
    refreshing = target != folder.store(name)
    frontier = Frontier(folder.frontier(name), keep_items=True)
    store: JsonStore | None = None
    summary = CrawlSummary(interrupted=True)
    try:
        store = JsonStore(target)
        _prepare(name, frontier, store, start, config, report)
        bar = progress(f"aircraft {name}") if progress else ProgressReporter(name, quiet=True)
        with bar:
            crawler = Crawler(
                _Offered(stage),
                fetcher,
                JsonStoreSink({name: store}),
                frontier,
                config.loop_settings(name),
                bar,
                stop,
            )
            summary = await crawler.run()
    finally:
        frontier.close()
        if store is not None:
            # a pass stopped before it wrote anything leaves no store behind
            store.close(create=not summary.interrupted)
    report.passes[name] = summary
    report.stored[name] = len(store)
    finished = not summary.interrupted and summary.waiting is None
    if refreshing and finished:
        if summary.ladder or summary.gave_up:
            log.warning(
                "aircraft %s: the refresh is not finished (%d request(s) failed): %s keeps"
                " the records of the last finished crawl until it is (run again; once given"
                " up, start it over with --refresh)",
                name,
                summary.ladder + summary.gave_up,
                folder.store(name).name,
            )
        else:
            _finish_refresh(name, folder, report)
    return summary


def _prepare(
    name: str,
    frontier: Frontier,
    store: JsonStore,
    start: list[Request],
    config: AircraftConfig,
    report: AircraftReport,
) -> None:
    """Make the frontier agree with this run and with the store before the crawl."""
    offered = frontier.offer_all(start)
    if offered.retargeted:
        endpoint = config.sparql_url if name != "specs" else config.api_url
        log.warning(
            "aircraft %s: %d unfinished request(s) queued by an earlier run now go to %s",
            name,
            offered.retargeted,
            redact(endpoint),
        )
    if offered.forgotten:
        log.info("aircraft %s: %d unfinished request(s) no longer wanted", name, offered.forgotten)
    wanted = {r.key for r in start}
    lost = lacking(name, frontier, store)
    again = frontier.redo([key for key in lost.requests if key in wanted])
    if again:
        what = f"{lost.records} record(s)" if lost.records else "the records of the requests"
        if store.path.exists():
            said = f"{store.path.name} lacks {what} its frontier counts as done"
        else:
            said = f"{store.path.name} is gone; its frontier counts {what} as done"
        log.warning("aircraft %s: %s: fetching them again (%d request(s))", name, said, again)
        report.refetched[name] = again


def _nothing_to_do(
    name: str, folder: OutFolder, start: list[Request]
) -> tuple[CrawlSummary, int] | None:
    """The pass's summary and stored count if it has nothing to do (every request it wants
    is done or given up, its store holds what they gave), read without writing anything;
    None if it has work."""
    target = folder.target(name)
    if target != folder.store(name) or not target.exists():
        return None  # a refresh to finish, or a store to make
    held = read_store(target)
    if not folder.frontier(name).exists():
        return (CrawlSummary(), len(held)) if not start else None
    view = Frontier(folder.frontier(name), read_only=True)
    try:
        counts = view.counts()
        if counts.get(PENDING) or counts.get(INFLIGHT) or counts.get(FAILED):
            return None
        wanted = {r.key for r in start}
        if view.known(wanted) != wanted:
            return None
        if set(lacking(name, view, held).requests) & wanted:
            return None
        given_up = [(url, attempts, why) for url, _s, attempts, why in view.ladder(20)]
    finally:
        view.close()
    summary = CrawlSummary(gave_up=counts.get(GAVE_UP, 0), last_errors=given_up)
    return summary, len(held)


def _finish_refresh(name: str, folder: OutFolder, report: AircraftReport) -> None:
    """The refresh of `name` is whole: its staging store becomes the store (atomically);
    records the source no longer gives are gone, as after a fresh crawl."""
    store, staging = folder.store(name), folder.staging(name)
    try:
        before = set(read_store(store))
    except StorageError:  # a broken store the refresh replaces
        before = set()
    after = set(read_store(staging))
    try:
        os.replace(staging, store)
        fsync_dir(store.parent)
    except OSError as exc:
        raise StorageError(f"cannot write {store}: {exc.strerror}") from None
    report.refreshed.append(name)
    report.dropped[name] = len(before - after)
    if before - after:
        log.warning(
            "aircraft %s: refreshed; %d record(s) the source no longer gives were dropped",
            name,
            len(before - after),
        )


def write_attribution(config: AircraftConfig) -> None:
    today = datetime.now(UTC).date().isoformat()
    text = (
        "# Attribution\n\n"
        "The data in manufacturers.json, models.json and specs.json comes from Wikidata\n"
        "(https://www.wikidata.org), whose structured data is released under CC0 1.0\n"
        "(https://creativecommons.org/publicdomain/zero/1.0/).\n\n"
        f"Retrieved: {today}\n"
        f"SPARQL endpoint: {config.sparql_url}\n"
        f"Entity API: {config.api_url} (action=wbgetentities)\n\n"
        "## Manufacturers query\n\n```sparql\n" + MANUFACTURERS_QUERY + "\n```\n\n"
        "## Models query (per batch of manufacturers, VALUES filled in)\n\n```sparql\n"
        + MODELS_QUERY.replace("%s", "wd:Q… wd:Q…")
        + "\n```\n"
    )
    atomic_write(config.out / "ATTRIBUTION.md", text.encode())


CSV_FIELDS = [
    "qid",
    "label",
    "manufacturers",
    *QUANTITY_FIELDS,
    "crew",
    "passengers",
    "engine_count",
    "engine_models",
    "first_flight",
    "service_entry",
    "number_built",
]


def export_csv(out: Path) -> Path:
    """specs.json as one flat row per model: first value of each field, in SI-style units.
    Under the `--out` lock, taken first: never beside a crawl still writing the store."""
    nothing = InputError(
        f"no specs.json in {out}: nothing crawled there yet (stagecrawl aircraft crawl --out {out})"
    )
    if not out.is_dir():  # a mistyped --out: no empty CSV, no new folder
        raise nothing
    with hold_output(out):
        specs = out / "specs.json"
        if not specs.is_file() and not journal_of(specs).is_file():
            raise nothing
        target = out / "specs.csv"
        remove_stray_temporaries(target)
        atomic_write(target, _csv(read_store(out / "specs.json")))
    return target


def _csv(records: dict[str, Any]) -> bytes:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for key, record in sorted(records.items()):
        if record.get("missing"):
            continue
        row: dict[str, Any] = {"qid": key, "label": record.get("label")}
        for column in CSV_FIELDS[2:]:
            value = record.get(column)
            if isinstance(value, list):
                first = value[0] if value else None
                if isinstance(first, dict):
                    first = first.get("value")
                row[column] = (
                    ";".join(value) if column in ("manufacturers", "engine_models") else first
                )
            else:
                row[column] = value
        writer.writerow(row)
    return buffer.getvalue().encode()
