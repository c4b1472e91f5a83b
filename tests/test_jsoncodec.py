"""jsoncodec reads and writes JSON as the json module does (the independent implementation
here), faster: the same values, the same errors, the same column text; the differences it
keeps are the ones its module doc names."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from stagecrawl.jsoncodec import canonical, loads
from tests.services import shared_fixture

_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _outcome(read: Any, data: bytes | str) -> tuple[str, Any]:
    try:
        value = read(data)
    except RecursionError:
        return "RecursionError", None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError: its words too
        return type(exc).__name__ if not isinstance(exc, json.JSONDecodeError) else "json", str(exc)
    return "value", value


def _same(left: Any, right: Any) -> bool:
    """Equal values of equal types all the way down (1 is not True, 1.0 is not 1); NaN is
    itself."""
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return list(left) == list(right) and all(_same(left[k], right[k]) for k in left)
    if isinstance(left, list):
        return len(left) == len(right) and all(map(_same, left, right))
    if isinstance(left, float) and math.isnan(left):
        return math.isnan(right)
    return bool(left == right)


def _real_documents() -> list[bytes]:
    """Every JSON document and index line of the real data: crates index files, crates.io API
    answers, PyPI Simple and JSON API pages, OSV records."""
    found: list[bytes] = []
    for part in ("crates-index", "crates-api", "pypi", "osv"):
        for path in sorted(shared_fixture(part).rglob("*")):
            if not path.is_file() or path.stat().st_size > 4_000_000:
                continue
            data = path.read_bytes()
            if part == "crates-index":
                found += [line for line in data.splitlines() if line.startswith(b"{")]
            elif data.lstrip()[:1] in (b"{", b"["):
                found.append(data)
    return found


def test_real_documents_read_and_written_as_json_does() -> None:
    documents = _real_documents()
    assert len(documents) > 1000
    for data in documents:
        expected = _outcome(json.loads, data)
        assert _same(_outcome(loads, data), expected), data[:120]
        if expected[0] == "value":
            assert canonical(expected[1]) == _JSON.encode(expected[1]), data[:120]


@pytest.mark.parametrize(
    "text",
    [
        '{"a":1,"a":2}',  # the last of a repeated key
        ' {"a" : [1, -0, -0.0, 1.0, 1e400, -1e400, 1e-400, 0.1] }\n',
        "NaN", '{"x":Infinity}', "[-Infinity]",  # json reads them; orjson does not
        '"\\ud800"', '"\\udc00\\ud800x"',  # lone surrogates
        '"\\u0000\\u001f\x7f\u2028é"', '"\\/"',
        "[" * 5000 + "]" * 5000,  # deeper than json recurses
        "[" * 900 + "]" * 900,  # deeper than orjson reads, not json
        "", "nul", "[1,]", '{"a":1,}', "01", "1.", ".5", "+1", '"\\x"', "'a'", '{"a" 1}',
        '{"name":"serde","vers":"1.0.0"} trailing', '"\x01"',
    ],
)  # fmt: skip
def test_the_edges_read_as_json_reads_them(text: str) -> None:
    """Values orjson refuses are json's, and every error is json's, word for word (a bad index
    line says where it broke), whether the body came as text or as bytes."""
    for data in (text, text.encode("utf-8", "surrogatepass")):
        assert _same(_outcome(loads, data), _outcome(json.loads, data)), repr(data)[:80]


@pytest.mark.parametrize(
    "data",
    [b"\xef\xbb\xbf[1]", "[1, 2]".encode("utf-16"), "[1]".encode("utf-32-le"), b'"\xff"'],
)
def test_the_encodings_json_detects_or_refuses_are_its_own(data: bytes) -> None:
    assert _same(_outcome(loads, data), _outcome(json.loads, data))


def test_an_integer_beyond_64_bits_is_read_as_the_float_nearest_it() -> None:
    """The one difference in reading, as the module doc says (no protocol field holds one):
    the nearest float; exact where orjson refuses instead and json reads it."""
    big = 123456789012345678901234567890
    assert loads(str(big)) in (float(big), big)
    assert loads(str(2**63 - 1)) == 2**63 - 1 and loads(str(-(2**63))) == -(2**63)


@pytest.mark.parametrize(
    "value",
    [
        {"b": [1, True, None, "x"], "a": {"é": "\u2028", "a\x00": "\x7f", "z": -5}},
        [], {}, "", 0, -(2**63), 2**64 - 1, [1.5, 0.1, 2.0, -0.0, 1e16, 1e300],
        {"features": {"std": [], "default": ["std"]}, "deps": [{"name": "serde"}]},
        2**64, {1: "a key that is not a string"}, "\ud800", ["lone \udc00 surrogate"],
        "".join(map(chr, range(0x20))) + "\"\\/",
    ],
)  # fmt: skip
def test_columns_are_written_as_json_writes_them(value: Any) -> None:
    """Sorted keys, no spaces, UTF-8 as it is; what orjson cannot write (a big integer, a key
    that is not a string, a lone surrogate) is json's own text."""
    assert canonical(value) == _JSON.encode(value)


def test_the_float_differences_in_writing_are_the_ones_documented() -> None:
    assert canonical([1e-7, 1.5e-5]) == "[1e-7,0.000015]"  # json: [1e-07,1.5e-05], equal numbers
    assert json.loads(canonical([1e-7, 1.5e-5])) == [1e-7, 1.5e-5]
    assert canonical({"x": math.nan, "y": math.inf}) == '{"x":null,"y":null}'  # json: NaN


def test_a_stored_column_reads_back_as_written(tmp_path: Path) -> None:
    value = {"deps": [{"name": "séré", "req": "^1", "optional": False}], "n": 2**70}
    (tmp_path / "c.json").write_text(canonical(value), encoding="utf-8")
    assert loads((tmp_path / "c.json").read_bytes()) == value
