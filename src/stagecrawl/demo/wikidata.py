"""A small Wikidata slice for the demo and the tests, served by the loopback origin: SPARQL 1.1
(`application/sparql-results+json`) and `wbgetentities` JSON in the documented shapes. Every
item, label and number here is made up."""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web

from stagecrawl.testing.origin import TestOrigin

E = "http://www.wikidata.org/entity/"
MANUFACTURERS: dict[str, dict[str, Any]] = {
    "Q100": {
        "label": "Aerofab",
        "countries": ["Q30"],
        "inception": "1920-01-01T00:00:00Z",
        "website": "https://aerofab.example",
        "aliases": ["AF Works", "Aerofab Ltd"],
    },
    "Q200": {
        "label": "Skyworks",
        "countries": ["Q142", "Q183"],
        "inception": None,
        "website": None,
        "aliases": [],
    },
    "Q300": {
        "label": "No Models Inc",
        "countries": [],
        "inception": None,
        "website": None,
        "aliases": [],
    },
}
MODELS = {  # model -> (label, manufacturers, class)
    "Q1001": ("AF-1", ["Q100"], "Q15056995"),
    "Q1002": ("AF-2", ["Q100", "Q200"], "Q15056995"),
    "Q1003": ("Ghost", ["Q100"], "Q15056995"),
    "Q1004": ("Old name", ["Q100"], "Q15056993"),
    "Q2001": ("SW-9", ["Q200"], "Q15056995"),
}


def uri(value: str) -> dict[str, str]:
    return {"type": "uri", "value": E + value}


def literal(value: str) -> dict[str, str]:
    return {"type": "literal", "value": value, "xml:lang": "en"}


def sparql_answer(query: str) -> dict[str, Any]:
    if "VALUES ?m" in query:
        wanted = re.findall(r"wd:(Q\d+)", query.split("VALUES ?m", 1)[1].split("}", 1)[0])
        variables = [
            "model",
            "modelLabel",
            "class",
            "family",
            "firstFlight",
            "role",
            "status",
            "makers",
        ]
        rows = []
        for model, (label, makers, cls) in sorted(MODELS.items()):
            if not set(makers) & set(wanted):
                continue
            row = {
                "model": uri(model),
                "modelLabel": literal(label),
                "class": uri(cls),
                "makers": literal("|".join(E + m for m in makers)),
            }
            if model == "Q1001":
                row["firstFlight"] = {
                    "type": "literal",
                    "value": "1967-04-09T00:00:00Z",
                    "datatype": "http://www.w3.org/2001/XMLSchema#dateTime",
                }
                row["role"] = uri("Q210932")
            rows.append(row)
    else:
        variables = ["m", "mLabel", "country", "inception", "website", "aliases"]
        rows = []
        for m, info in sorted(MANUFACTURERS.items()):
            for country in info["countries"] or [None]:
                row = {
                    "m": uri(m),
                    "mLabel": literal(info["label"]),
                    "aliases": literal("|".join(info["aliases"])),
                }
                if country:
                    row["country"] = uri(country)
                if info["inception"]:
                    row["inception"] = {"type": "literal", "value": info["inception"]}
                if info["website"]:
                    row["website"] = {"type": "uri", "value": info["website"]}
                rows.append(row)
    return {"head": {"vars": variables}, "results": {"bindings": rows}}


def quantity(
    prop: str,
    amount: str,
    unit: str,
    rank: str = "normal",
    qualifiers: dict[str, Any] | None = None,
) -> dict[str, Any]:
    claim: dict[str, Any] = {
        "mainsnak": {
            "snaktype": "value",
            "property": prop,
            "datavalue": {
                "type": "quantity",
                "value": {"amount": amount, "unit": E + unit if unit != "1" else "1"},
            },
        },
        "type": "statement",
        "rank": rank,
    }
    if qualifiers:
        claim["qualifiers"] = qualifiers
    return claim


def item(prop: str, value: str, qualifiers: dict[str, Any] | None = None) -> dict[str, Any]:
    claim = quantity(prop, "0", "1")
    claim["mainsnak"]["datavalue"] = {
        "type": "wikibase-entityid",
        "value": {"entity-type": "item", "id": value},
    }
    if qualifiers:
        claim["qualifiers"] = qualifiers
    return claim


def qualifier_item(prop: str, value: str) -> dict[str, Any]:
    return {
        prop: [
            {
                "snaktype": "value",
                "property": prop,
                "datavalue": {"type": "wikibase-entityid", "value": {"id": value}},
            }
        ]
    }


def time_claim(prop: str, time: str, precision: int) -> dict[str, Any]:
    claim = quantity(prop, "0", "1")
    claim["mainsnak"]["datavalue"] = {
        "type": "time",
        "value": {
            "time": time,
            "precision": precision,
            "timezone": 0,
            "before": 0,
            "after": 0,
            "calendarmodel": E + "Q1985727",
        },
    }
    return claim


def entity(qid: str, label: str, claims: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    return {
        "type": "item",
        "id": qid,
        "labels": {"en": {"language": "en", "value": label}},
        "claims": claims,
    }


ENTITIES: dict[str, dict[str, Any]] = {
    "Q1001": entity(
        "Q1001",
        "AF-1",
        {
            "P2050": [
                quantity("P2050", "+35.8", "Q11573"),
                quantity("P2050", "+99", "Q11573", rank="deprecated"),
            ],
            "P2043": [quantity("P2043", "+117.5", "Q3710")],  # feet
            "P2048": [
                quantity("P2048", "+11.3", "Q11573", rank="preferred"),
                quantity("P2048", "+11.0", "Q11573"),
            ],
            "P2067": [
                quantity("P2067", "+154000", "Q100995"),  # pounds, no criterion: MTOW
                quantity(
                    "P2067", "+70000", "Q11570", qualifiers=qualifier_item("P1013", "Q1318946")
                ),
            ],
            "P2052": [
                quantity("P2052", "+490", "Q128822"),  # knots
                quantity(
                    "P2052", "+850", "Q180154", qualifiers=qualifier_item("P1013", "Q1371418")
                ),
            ],
            "P2073": [quantity("P2073", "+3000", "Q93318")],  # nautical miles
            "P1029": [quantity("P1029", "+2", "1")],
            "P1083": [quantity("P1083", "+180", "1"), quantity("P1083", "+200", "1")],
            "P516": [
                item(
                    "P516",
                    "Q5001",
                    {
                        "P1114": [
                            {
                                "snaktype": "value",
                                "property": "P1114",
                                "datavalue": {
                                    "type": "quantity",
                                    "value": {"amount": "+2", "unit": "1"},
                                },
                            }
                        ]
                    },
                )
            ],
            "P606": [time_claim("P606", "+1967-04-09T00:00:00Z", 11)],
            "P729": [time_claim("P729", "+1968-00-00T00:00:00Z", 9)],
            "P1092": [quantity("P1092", "+1000", "1")],
            "P176": [item("P176", "Q100")],
        },
    ),
    "Q1002": entity("Q1002", "AF-2", {"P176": [item("P176", "Q100"), item("P176", "Q200")]}),
    "Q2001": entity(
        "Q2001",
        "SW-9",
        {
            "P2050": [
                {
                    "mainsnak": {"snaktype": "somevalue", "property": "P2050"},
                    "type": "statement",
                    "rank": "normal",
                }
            ],
            "P176": [item("P176", "Q200")],
        },
    ),
    "Q1005": {
        **entity("Q1005", "New name", {"P176": [item("P176", "Q100")]}),
        "redirects": {"from": "Q1004", "to": "Q1005"},
    },
}


def install(origin: TestOrigin, maxlag_first: bool = False) -> dict[str, int]:
    calls = {"sparql": 0, "api": 0}

    async def sparql(request: web.Request) -> web.StreamResponse:
        calls["sparql"] += 1
        body = json.dumps(sparql_answer(request.query["query"]))
        return web.Response(text=body, content_type="application/sparql-results+json")

    async def api(request: web.Request) -> web.StreamResponse:
        calls["api"] += 1
        if maxlag_first and calls["api"] == 1:
            error = {
                "error": {"code": "maxlag", "info": "Waiting for a database server: 7 s", "lag": 7}
            }
            return web.json_response(error, headers={"Retry-After": "1"})
        entities: dict[str, Any] = {}
        for wanted in request.query["ids"].split("|"):
            if wanted == "Q1003":
                entities[wanted] = {"id": wanted, "missing": ""}
            elif wanted == "Q1004":
                entities["Q1005"] = ENTITIES["Q1005"]
            else:
                entities[wanted] = ENTITIES[wanted]
        return web.json_response({"entities": entities, "success": 1})

    origin.handle("/sparql", sparql)
    origin.handle("/w/api.php", api)
    return calls
