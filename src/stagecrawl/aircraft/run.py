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

from stagecrawl.aircraft.stages import (
    MANUFACTURERS_QUERY,
    MODELS_QUERY,
    ManufacturersStage,
    ModelsStage,
    SpecsStage,
)
from stagecrawl.aircraft.wikidata import QUANTITY_FIELDS
from stagecrawl.engine.crawler import Crawler, CrawlSummary, JsonStoreSink, Stage
from stagecrawl.engine.fetcher import Fetcher, FetchSettings, require_contact
from stagecrawl.engine.frontier import Frontier
from stagecrawl.engine.jsonstore import JsonStore, atomic_write
from stagecrawl.engine.progress import ProgressReporter
from stagecrawl.engine.ratelimit import Lane, Lanes, LocalLimiter, Rate
from stagecrawl.engine.shutdown import GracefulStop
from stagecrawl.engine.work import LoopSettings
from stagecrawl.errors import ConfigError, StorageError

DEFAULT_SPARQL_URL = "https://query.wikidata.org/sparql"
DEFAULT_API_URL = "https://www.wikidata.org/w/api.php"
PASSES = ("manufacturers", "models", "specs")


@dataclass
class AircraftConfig:
    """Defaults follow Wikimedia's asks: one WDQS query at a time, few concurrent API calls."""

    out: Path
    sparql_url: str = DEFAULT_SPARQL_URL
    api_url: str = DEFAULT_API_URL
    contact: str | None = None
    refresh: bool = False
    batch: int = 50
    sparql_rate: float = 1.0
    api_rate: float = 5.0
    concurrency: int = 2
    grace_period: float = 10.0
    fetch: FetchSettings | None = None  # the engine knobs; the contact is set from above

    def validate(self) -> None:
        for label, url in (("--sparql-url", self.sparql_url), ("--api-url", self.api_url)):
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ConfigError(f"{label} must be an http(s) URL, got {url!r}")
            if (parts.hostname or "").endswith("wikidata.org"):
                require_contact(
                    FetchSettings(contact=self.contact),
                    "Wikimedia's User-Agent policy asks for a way to reach the operator",
                )
        if not (self.sparql_rate > 0 and self.api_rate > 0):
            raise ConfigError("rates must be positive")
        if self.concurrency < 1 or self.batch < 1:
            raise ConfigError("--concurrency and --batch must be at least 1")

    def lanes(self) -> Lanes:
        return Lanes(
            [
                Lane("sparql", self.sparql_url, Rate(self.sparql_rate)),
                Lane("entities", self.api_url, Rate(self.api_rate)),
            ]
        )

    def fetcher(self) -> Fetcher:
        self.validate()
        settings = self.fetch or FetchSettings()
        settings.contact = self.contact
        return Fetcher(settings, self.lanes(), LocalLimiter())


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

    @property
    def interrupted(self) -> bool:
        return any(s.interrupted for s in self.passes.values())

    @property
    def problems(self) -> bool:
        """Something is left on the retry ladder (or given up): the run did not finish."""
        return any(s.ladder or s.gave_up for s in self.passes.values())

    def as_json(self) -> dict[str, object]:
        return {
            "passes": {name: s.as_json() for name, s in self.passes.items()},
            "stored": self.stored,
            "requests": self.requests,
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
                            LoopSettings(
                                concurrency=config.concurrency, grace_period=config.grace_period
                            ),
                            bar,
                            stop,
                        )
                        summary = await crawler.run()
                finally:
                    frontier.close()
                stores[name].checkpoint()
                report.passes[name] = summary
                report.stored[name] = len(stores[name])
                if summary.interrupted:
                    break
            report.requests = dict(fetcher.stats.requests)
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
