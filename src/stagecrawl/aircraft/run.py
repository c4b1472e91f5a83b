"""Running the aircraft passes, the attribution file, and the CSV export."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
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
from stagecrawl.engine.crawler import Crawler, CrawlSummary, JsonStoreSink, Stage
from stagecrawl.engine.fetcher import Fetcher, FetchSettings, require_contact
from stagecrawl.engine.frontier import Frontier
from stagecrawl.engine.jsonstore import JsonStore, atomic_write
from stagecrawl.engine.progress import ProgressReporter
from stagecrawl.engine.ratelimit import Lane, Lanes, Rate
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.engine.work import LoopSettings
from stagecrawl.errors import ConfigError, InputError, StorageError
from stagecrawl.pauses import Waiting
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
                    FetchSettings(contact=self.settings.contact),
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

    def loop_settings(self) -> LoopSettings:
        return loop_settings(self.settings, concurrency=self.settings.aircraft_concurrency)


def _stage(name: str, config: AircraftConfig, stores: dict[str, JsonStore]) -> Stage:
    if name == "manufacturers":
        return ManufacturersStage(config.sparql_url)
    if name == "models":
        return ModelsStage(config.sparql_url, list(stores["manufacturers"]), config.batch)
    done = set() if config.refresh else set(stores["specs"])
    todo = [m for m in stores["models"] if m not in done]
    return SpecsStage(config.api_url, todo, config.batch)


@dataclass
class AircraftReport:
    passes: dict[str, CrawlSummary] = field(default_factory=dict)
    stored: dict[str, int] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)  # what the run's parts used

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
            "settings": self.settings,
        }


async def run_aircraft(
    config: AircraftConfig,
    selected: str,
    stop: GracefulStop,
    progress: Callable[[str], ProgressReporter] | None = None,
) -> AircraftReport:
    """Run the selected passes; each pass crawls into its store with a frontier beside it."""
    out = config.out
    try:
        (out / ".stagecrawl").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot write to {out}: {exc.strerror}") from None
    passes = PASSES if selected == "all" else (selected,)
    stores = {name: JsonStore(out / f"{name}.json") for name in PASSES}
    report = AircraftReport()
    try:
        async with config.fetcher() as fetcher:
            for name in passes:
                frontier_path = out / ".stagecrawl" / f"{name}.frontier.sqlite"
                if config.refresh:
                    for leftover in frontier_path.parent.glob(f"{name}.frontier.sqlite*"):
                        leftover.unlink()
                frontier = Frontier(frontier_path)
                sink = JsonStoreSink({name: stores[name]})
                bar = (
                    progress(f"aircraft {name}") if progress else ProgressReporter(name, quiet=True)
                )
                try:
                    with bar:
                        crawler = Crawler(
                            _stage(name, config, stores),
                            fetcher,
                            sink,
                            frontier,
                            config.loop_settings(),
                            bar,
                            stop,
                        )
                        summary = await crawler.run()
                finally:
                    frontier.close()
                stores[name].checkpoint()
                report.passes[name] = summary
                report.stored[name] = len(stores[name])
                if summary.interrupted or summary.waiting is not None:
                    break  # a pause holds the host: the next pass could send nothing either
            report.requests = dict(fetcher.stats.requests)
            report.settings = effective(fetcher, {"crawl": config.loop_settings()})
    finally:
        for store in stores.values():
            store.close()
    if not report.interrupted:
        write_attribution(config)
    return report


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
    """specs.json as one flat row per model: first value of each field, in SI-style units."""
    if not (out / "specs.json").is_file():  # a mistyped --out: no empty CSV, no new folder
        raise InputError(
            f"no specs.json in {out}: nothing crawled there yet (stagecrawl aircraft crawl"
            f" --out {out})"
        )
    store = JsonStore(out / "specs.json")
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for key, record in store.items():
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
    target = out / "specs.csv"
    atomic_write(target, buffer.getvalue().encode())
    return target
