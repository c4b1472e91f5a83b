"""Wikidata in stagecrawl's terms: the class tree, the properties read, units, statements.

Classes: an aircraft model is an item that is an instance of (P31) a subclass (P279*) of
aircraft model (Q15056995) or aircraft family (Q15056993). Manufacturer is P176.

Property and unit ids below come from the project's shared notes on Wikidata (gathered from
its documentation); the ones marked UNVERIFIED could not be checked against the live site from
this machine (no network) and should be confirmed before a production run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

ENTITY = "http://www.wikidata.org/entity/"
AIRCRAFT_CLASSES = ("Q15056995", "Q15056993")  # aircraft model, aircraft family

P_INSTANCE_OF, P_MANUFACTURER = "P31", "P176"
P_COUNTRY, P_INCEPTION, P_WEBSITE = "P17", "P571", "P856"
P_PART_OF, P_USE, P_STATE_OF_USE = "P361", "P366", "P5817"  # UNVERIFIED: P5817
P_FIRST_FLIGHT, P_SERVICE_ENTRY, P_NUMBER_BUILT = "P606", "P729", "P1092"
P_POWERPLANT, P_QUANTITY = "P516", "P1114"
P_CRITERION = "P1013"  # "criterion used": tells empty mass from MTOW, cruise from max speed

# spec field -> (property, dimension, criterion items that select it, or None = no criterion)
QUANTITY_FIELDS: dict[str, tuple[str, str, frozenset[str] | None]] = {
    "wingspan": ("P2050", "length", None),
    "length": ("P2043", "length", None),
    "height": ("P2048", "length", None),
    "wing_area": ("P2112", "area", None),
    # UNVERIFIED criterion items: Q1318946 "empty weight", Q1156263 "maximum takeoff weight",
    # Q1371418 "cruising speed". A mass or speed statement without a criterion is read as the
    # maximum (MTOW, maximum speed), as Wikidata's aviation statements usually are.
    "empty_mass": ("P2067", "mass", frozenset({"Q1318946"})),
    "max_takeoff_mass": ("P2067", "mass", frozenset({"Q1156263", ""})),
    "max_speed": ("P2052", "speed", frozenset({""})),
    "cruise_speed": ("P2052", "speed", frozenset({"Q1371418"})),
    "range": ("P2073", "distance", None),
    "service_ceiling": ("P2254", "length", None),  # UNVERIFIED: maximum operating altitude
}
COUNT_FIELDS = {"crew": "P1029", "passengers": "P1083", "number_built": P_NUMBER_BUILT}

# unit item -> (dimension, output unit, factor to the output unit)
UNITS: dict[str, tuple[str, str, float]] = {
    "Q11573": ("length", "m", 1.0),  # metre
    "Q3710": ("length", "m", 0.3048),  # foot
    "Q218593": ("length", "m", 0.0254),  # inch
    "Q174728": ("length", "m", 0.01),  # centimetre
    "Q828224": ("length", "m", 1000.0),  # kilometre
    "Q25343": ("area", "m²", 1.0),  # square metre
    "Q857027": ("area", "m²", 0.09290304),  # square foot
    "Q11570": ("mass", "kg", 1.0),  # kilogram
    "Q100995": ("mass", "kg", 0.45359237),  # pound
    "Q191118": ("mass", "kg", 1000.0),  # tonne
    "Q180154": ("speed", "km/h", 1.0),  # kilometre per hour
    "Q128822": ("speed", "km/h", 1.852),  # knot
    "Q211256": ("speed", "km/h", 1.609344),  # mile per hour
    "Q182429": ("speed", "km/h", 3.6),  # metre per second
    "Q93318": ("distance", "km", 1.852),  # nautical mile
    "Q253276": ("distance", "km", 1.609344),  # mile
}
DISTANCE_FROM_LENGTH = {"Q828224": 1.0, "Q11573": 0.001, "Q3710": 0.0003048}


def qid(uri_or_id: str) -> str:
    return uri_or_id.rsplit("/", 1)[-1]


def round_sig(value: float, digits: int = 6) -> float:
    """Stable output: six significant digits, so conversions diff cleanly between runs."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))


def time_value(value: dict[str, Any]) -> str | None:
    """A Wikibase time as ISO text cut to its precision (9 year, 10 month, 11 day)."""
    text = str(value.get("time", ""))
    if not text:
        return None
    sign = "-" if text.startswith("-") else ""
    date = text.lstrip("+-").split("T")[0]
    precision = int(value.get("precision", 11))
    if precision <= 9:
        return sign + date[:4]
    if precision == 10:
        return sign + date[:7]
    return sign + date


@dataclass(frozen=True)
class Statement:
    value: Any
    rank: str
    qualifiers: dict[str, list[Any]]


def statements(entity: dict[str, Any], prop: str) -> list[Statement]:
    """The statements to use: preferred ones if any, else normal; deprecated never.
    somevalue/novalue snaks carry no value and are left out."""
    claims = entity.get("claims", {}).get(prop, [])
    usable = [c for c in claims if c.get("rank") != "deprecated"]
    preferred = [c for c in usable if c.get("rank") == "preferred"]
    chosen = preferred or usable
    result = []
    for claim in chosen:
        snak = claim.get("mainsnak", {})
        if snak.get("snaktype") != "value" or "datavalue" not in snak:
            continue
        qualifiers: dict[str, list[Any]] = {}
        for qprop, qsnaks in (claim.get("qualifiers") or {}).items():
            qualifiers[qprop] = [
                q["datavalue"]["value"] for q in qsnaks if q.get("snaktype") == "value"
            ]
        result.append(
            Statement(snak["datavalue"]["value"], claim.get("rank", "normal"), qualifiers)
        )
    return result


def quantity(value: dict[str, Any], dimension: str) -> dict[str, Any] | None:
    amount = float(str(value["amount"]))
    unit = qid(str(value.get("unit", "1")))
    if dimension == "distance" and unit in DISTANCE_FROM_LENGTH:
        factor, symbol = DISTANCE_FROM_LENGTH[unit], "km"
    elif unit in UNITS and UNITS[unit][0] == dimension:
        _, symbol, factor = UNITS[unit]
    else:
        return {"value": None, "unit": None, "original": {"amount": amount, "unit": unit}}
    return {
        "value": round_sig(amount * factor),
        "unit": symbol,
        "original": {"amount": amount, "unit": unit},
    }


def item_ids(entity: dict[str, Any], prop: str) -> list[str]:
    return sorted(
        {
            str(s.value["id"])
            for s in statements(entity, prop)
            if isinstance(s.value, dict) and "id" in s.value
        }
    )


def label(entity: dict[str, Any]) -> str | None:
    labels = entity.get("labels", {})
    for language in ("en", "mul", *sorted(labels)):
        if language in labels:
            return str(labels[language]["value"])
    return None


def spec_record(requested: str, entity: dict[str, Any]) -> dict[str, Any]:
    """The specs pass's record of one model entity."""
    record: dict[str, Any] = {
        "qid": requested,
        "label": label(entity),
        "url": f"https://www.wikidata.org/wiki/{entity.get('id')}",
    }
    if entity.get("id") != requested:
        record["redirected_to"] = entity.get("id")
    for field, (prop, dimension, criteria) in QUANTITY_FIELDS.items():
        values = []
        for statement in statements(entity, prop):
            used = {str(v.get("id")) for v in statement.qualifiers.get(P_CRITERION, [])}
            if criteria is not None and not (used & criteria or (not used and "" in criteria)):
                continue
            converted = quantity(statement.value, dimension)
            if converted is not None:
                values.append(converted)
        record[field] = sorted(values, key=lambda v: (v["value"] is None, v["value"] or 0))
    for field, prop in COUNT_FIELDS.items():
        record[field] = sorted(float(str(s.value["amount"])) for s in statements(entity, prop))
    engines = statements(entity, P_POWERPLANT)
    record["engine_models"] = sorted({str(s.value["id"]) for s in engines})
    counts = [float(str(q["amount"])) for s in engines for q in s.qualifiers.get(P_QUANTITY, [])]
    record["engine_count"] = sum(counts) if counts else None
    for field, prop in (("first_flight", P_FIRST_FLIGHT), ("service_entry", P_SERVICE_ENTRY)):
        record[field] = sorted(t for s in statements(entity, prop) if (t := time_value(s.value)))
    record["manufacturers"] = item_ids(entity, P_MANUFACTURER)
    return record
