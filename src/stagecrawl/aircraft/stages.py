"""The three passes as engine stages: each reads the previous pass's store, writes its own."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlencode

from stagecrawl.aircraft.wikidata import AIRCRAFT_CLASSES, qid, spec_record
from stagecrawl.engine.crawler import Output
from stagecrawl.engine.fetcher import FetchResult
from stagecrawl.engine.request import Item, Request
from stagecrawl.errors import FetchError

CLASSES = " ".join(f"wd:{c}" for c in AIRCRAFT_CLASSES)
LANGUAGES = "en,mul,fr,de,es,it,ru,ja,zh"

MANUFACTURERS_QUERY = f"""SELECT ?m ?mLabel ?country ?inception ?website
  (GROUP_CONCAT(DISTINCT ?alias; separator="|") AS ?aliases) WHERE {{
  ?model wdt:P31/wdt:P279* ?class . VALUES ?class {{ {CLASSES} }}
  ?model wdt:P176 ?m .
  OPTIONAL {{ ?m wdt:P17 ?country }}
  OPTIONAL {{ ?m wdt:P571 ?inception }}
  OPTIONAL {{ ?m wdt:P856 ?website }}
  OPTIONAL {{ ?m skos:altLabel ?alias FILTER(LANG(?alias) = "en") }}
  SERVICE wikibase:label {{ bd:serviceParam wikibase:language "{LANGUAGES}" . }}
}} GROUP BY ?m ?mLabel ?country ?inception ?website"""

MODELS_QUERY = f"""SELECT ?model ?modelLabel ?class ?family ?firstFlight ?role ?status
  (GROUP_CONCAT(DISTINCT ?maker; separator="|") AS ?makers) WHERE {{
  VALUES ?m {{ %s }}
  ?model wdt:P176 ?m ; wdt:P31/wdt:P279* ?cls . VALUES ?cls {{ {CLASSES} }}
  ?model wdt:P176 ?maker .
  OPTIONAL {{ ?model wdt:P31 ?class }}
  OPTIONAL {{ ?model wdt:P361 ?family }}
  OPTIONAL {{ ?model wdt:P606 ?firstFlight }}
  OPTIONAL {{ ?model wdt:P366 ?role }}
  OPTIONAL {{ ?model wdt:P5817 ?status }}
  SERVICE wikibase:label {{ bd:serviceParam wikibase:language "{LANGUAGES}" . }}
}} GROUP BY ?model ?modelLabel ?class ?family ?firstFlight ?role ?status"""


def sparql_url(endpoint: str, query: str) -> str:
    return f"{endpoint}?{urlencode({'query': query, 'format': 'json'})}"


def bindings(response: FetchResult) -> list[dict[str, str]]:
    document = response.json()
    rows = document["results"]["bindings"]
    return [{name: cell["value"] for name, cell in row.items()} for row in rows]


def _batch_key(prefix: str, ids: list[str]) -> str:
    return prefix + hashlib.sha256(",".join(ids).encode()).hexdigest()[:24]


class ManufacturersStage:
    name = "manufacturers"
    lane = "sparql"

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint

    def start_requests(self) -> Iterable[Request]:
        return [Request(sparql_url(self.endpoint, MANUFACTURERS_QUERY), key="manufacturers")]

    def parse(self, request: Request, response: FetchResult) -> Iterable[Output]:
        merged: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        labels: dict[str, str] = {}
        for row in bindings(response):
            m = qid(row["m"])
            labels[m] = row.get("mLabel", m)
            record = merged[m]
            for field, column in (
                ("countries", "country"),
                ("inception", "inception"),
                ("websites", "website"),
            ):
                if row.get(column):
                    record[field].add(qid(row[column]) if column == "country" else row[column])
            record["aliases"].update(a for a in row.get("aliases", "").split("|") if a)
        for m, record in sorted(merged.items()):
            inception = sorted(record["inception"])
            yield Item(
                m,
                {
                    "qid": m,
                    "label": labels[m],
                    "aliases": sorted(record["aliases"]),
                    "countries": sorted(record["countries"]),
                    "inception": inception[0][:10] if inception else None,
                    "websites": sorted(record["websites"]),
                    "url": f"https://www.wikidata.org/wiki/{m}",
                },
                store="manufacturers",
            )

    def failed(self, request: Request, error: FetchError) -> Iterable[Output]:
        return []


class ModelsStage:
    name = "models"
    lane = "sparql"

    def __init__(self, endpoint: str, manufacturers: list[str], batch: int) -> None:
        self.endpoint = endpoint
        self.manufacturers = sorted(manufacturers)
        self.batch = batch

    def start_requests(self) -> Iterable[Request]:
        for start in range(0, len(self.manufacturers), self.batch):
            ids = self.manufacturers[start : start + self.batch]
            query = MODELS_QUERY % " ".join(f"wd:{i}" for i in ids)
            yield Request(sparql_url(self.endpoint, query), key=_batch_key("models:", ids))

    def parse(self, request: Request, response: FetchResult) -> Iterable[Output]:
        merged: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
        labels: dict[str, str] = {}
        for row in bindings(response):
            model = qid(row["model"])
            labels[model] = row.get("modelLabel", model)
            record = merged[model]
            record["manufacturers"].update(qid(m) for m in row.get("makers", "").split("|") if m)
            for field, column in (
                ("classes", "class"),
                ("families", "family"),
                ("roles", "role"),
                ("status", "status"),
            ):
                if row.get(column):
                    record[field].add(qid(row[column]))
            if row.get("firstFlight"):
                record["first_flight"].add(row["firstFlight"][:10])
        for model, record in sorted(merged.items()):
            flights = sorted(record["first_flight"])
            yield Item(
                model,
                {
                    "qid": model,
                    "label": labels[model],
                    "manufacturers": sorted(record["manufacturers"]),
                    "classes": sorted(record["classes"]),
                    "families": sorted(record["families"]),
                    "roles": sorted(record["roles"]),
                    "status": sorted(record["status"]),
                    "first_flight": flights[0] if flights else None,
                    "url": f"https://www.wikidata.org/wiki/{model}",
                },
                store="models",
            )

    def failed(self, request: Request, error: FetchError) -> Iterable[Output]:
        return []


class SpecsStage:
    name = "specs"
    lane = "entities"

    def __init__(self, endpoint: str, models: list[str], batch: int = 50) -> None:
        self.endpoint = endpoint
        self.models = sorted(models)
        self.batch = min(batch, 50)  # wbgetentities takes at most 50 ids
        self.maxlag_waits = 0  # maxlag errors met (each waited out like a 429), for the summary

    def start_requests(self) -> Iterable[Request]:
        for start in range(0, len(self.models), self.batch):
            ids = self.models[start : start + self.batch]
            params = {
                "action": "wbgetentities",
                "ids": "|".join(ids),
                "props": "labels|claims",
                "languages": "en|mul",
                "format": "json",
                "maxlag": "5",
            }
            yield Request(
                f"{self.endpoint}?{urlencode(params)}",
                key=_batch_key("specs:", ids),
                meta={"ids": ids},
            )

    def rate_limited(self, response: FetchResult) -> bool:
        """The Action API answers lag with HTTP 200 and a maxlag error: rate limiting. The
        fetcher asks once per such answer, so it is counted here."""
        try:
            error = json.loads(response.content).get("error")
        except (ValueError, AttributeError):
            return False
        lagging = isinstance(error, dict) and error.get("code") == "maxlag"
        self.maxlag_waits += lagging
        return lagging

    def parse(self, request: Request, response: FetchResult) -> Iterable[Output]:
        document = response.json()
        if "error" in document:
            raise ValueError(f"API error: {document['error']}")
        entities: dict[str, Any] = document.get("entities", {})
        by_source: dict[str, dict[str, Any]] = {}
        for key, entity in entities.items():
            source = (entity.get("redirects") or {}).get("from") or key
            by_source[source] = entity
        requested = request.meta["ids"]
        unmatched = [e for k, e in by_source.items() if k not in requested]
        for wanted in requested:
            entity = by_source.get(wanted)
            if entity is None and unmatched:
                entity = unmatched.pop(0)  # a redirect the answer did not label
            if entity is None or "missing" in entity:
                yield Item(wanted, {"qid": wanted, "missing": True}, store="specs")
                continue
            yield Item(wanted, spec_record(wanted, entity), store="specs")

    def failed(self, request: Request, error: FetchError) -> Iterable[Output]:
        return []
