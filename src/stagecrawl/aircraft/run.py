"""Running the aircraft passes, the attribution file, and the CSV export."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rich.console import Console

from stagecrawl.aircraft.stages import (
    MANUFACTURERS_QUERY,
    MODELS_QUERY,
    ManufacturersStage,
    ModelsStage,
    SpecsStage,
)
from stagecrawl.aircraft.wikidata import QUANTITY_FIELDS
from stagecrawl.engine.crawler import Crawler, CrawlSettings, JsonStoreSink, Stage
from stagecrawl.engine.fetcher import Fetcher, FetchSettings, require_contact
from stagecrawl.engine.frontier import Frontier
from stagecrawl.engine.jsonstore import JsonStore, atomic_write
from stagecrawl.engine.progress import ProgressReporter, summary_table
from stagecrawl.engine.ratelimit import LocalLimiter, Rate, origin_of
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

    def fetcher(self) -> Fetcher:
        for label, url in (("--sparql-url", self.sparql_url), ("--api-url", self.api_url)):
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ConfigError(f"{label} must be an http(s) URL, got {url!r}")
            if (parts.hostname or "").endswith("wikidata.org"):
                require_contact(
                    FetchSettings(contact=self.contact),
                    "Wikimedia's User-Agent policy asks for a way to reach the operator",
                )
        limiter = LocalLimiter(
            {
                origin_of(self.sparql_url): Rate(self.sparql_rate),
                origin_of(self.api_url): Rate(self.api_rate),
            }
        )
        return Fetcher(FetchSettings(contact=self.contact), limiter=limiter)


def _stage(name: str, config: AircraftConfig, stores: dict[str, JsonStore]) -> Stage:
    if name == "manufacturers":
        return ManufacturersStage(config.sparql_url)
    if name == "models":
        return ModelsStage(config.sparql_url, list(stores["manufacturers"]), config.batch)
    done = set() if config.refresh else set(stores["specs"])
    todo = [m for m in stores["models"] if m not in done]
    return SpecsStage(config.api_url, todo, config.batch)


async def run_aircraft(config: AircraftConfig, selected: str, console: Console, quiet: bool) -> int:
    out = config.out
    try:
        (out / ".stagecrawl").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot write to {out}: {exc.strerror}") from None
    passes = PASSES if selected == "all" else (selected,)
    stores = {name: JsonStore(out / f"{name}.json") for name in PASSES}
    errors = 0
    async with config.fetcher() as fetcher:
        for name in passes:
            frontier_path = out / ".stagecrawl" / f"{name}.frontier.sqlite"
            if config.refresh:
                for leftover in frontier_path.parent.glob(f"{name}.frontier.sqlite*"):
                    leftover.unlink()
            frontier = Frontier(frontier_path)
            sink = JsonStoreSink({name: stores[name]})
            with ProgressReporter(f"aircraft {name}", console=console, quiet=quiet) as bar:
                crawler = Crawler(
                    _stage(name, config, stores),
                    fetcher,
                    sink,
                    frontier,
                    CrawlSettings(concurrency=config.concurrency),
                    bar,
                )
                summary = await crawler.run()
            stores[name].checkpoint()
            frontier.close()
            rows = {f"{name} stored": len(stores[name]), **summary.as_rows()}
            console.print(summary_table(f"aircraft {name}", rows))
            errors += sum(summary.errors.values())
            if summary.interrupted:
                return 130
    for store in stores.values():
        store.close()
    write_attribution(config)
    return 1 if errors else 0


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
        for field in CSV_FIELDS[2:]:
            value = record.get(field)
            if isinstance(value, list):
                first = value[0] if value else None
                if isinstance(first, dict):
                    first = first.get("value")
                row[field] = (
                    ";".join(value) if field in ("manufacturers", "engine_models") else first
                )
            else:
                row[field] = value
        writer.writerow(row)
    target = out / "specs.csv"
    atomic_write(target, buffer.getvalue().encode())
    return target
