"""JSON in and out at the speed of orjson, with the standard library's answers.

orjson reads the real documents about twice as fast as the json module and writes them 7 to 11
times as fast (bench/json_codec.py; a crates crawl reads an index line and writes a few JSON
columns a version: a tenth of its CPU went to json). Where the two differ, json's behaviour
is kept:
- reading: what orjson refuses (NaN and Infinity, a lone surrogate, UTF-16, a UTF-8 BOM,
  nesting past 1024) is read again by `json.loads`, which decides, and words an error, as
  before. One difference stays: an integer beyond 64 bits (no field of these protocols holds
  one, and no column takes one) is read as the float nearest it, not exactly.
- writing (`canonical`: sorted keys, no spaces, UTF-8 not escaped, the JSON columns' form):
  what orjson cannot write (an integer beyond 64 bits, a key that is not a string, a lone
  surrogate) is written by json's encoder. Two differences stay, for floats, which the JSON
  columns do not hold but hostile input could: a float may be spelled otherwise (`1e-7` and
  `0.000015` where json wrote `1e-07` and `1.5e-05`: the same numbers), and NaN or infinity is
  written `null` (json wrote `NaN`, which is not JSON).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["canonical", "loads", "text", "texts"]

# json's form of the JSON columns, for what orjson cannot write
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def loads(data: bytes | str) -> Any:
    """`json.loads(data)`, faster: the same value and the same errors (see the module doc)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)  # decides: a value orjson refuses, or the error as json words it


def canonical(value: Any) -> str:
    """Sorted keys, no spaces, UTF-8 not escaped (see the module doc)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        return _ENCODER.encode(value)


def text(value: Any, strip: bool = False) -> str | None:
    """A decoded document's optional text field (an answer's JSON, a lock's TOML): the string
    when it holds more than blanks (`strip`: without them), else None (missing, null, "", a
    number where text belongs)."""
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip() if strip else value


def texts(value: Any) -> tuple[str, ...] | None:
    """An answer's optional list of strings: the strings in it; None when it is no list."""
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else None
