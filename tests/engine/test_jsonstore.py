"""The JSON store: deterministic, atomic, O(n) writes, crash journal replayed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stagecrawl.engine.jsonstore import JsonStore
from stagecrawl.errors import StorageError


def test_missing_and_empty_files_read_as_empty(tmp_path: Path) -> None:
    assert len(JsonStore(tmp_path / "none.json")) == 0
    (tmp_path / "empty.json").write_bytes(b"")
    assert len(JsonStore(tmp_path / "empty.json")) == 0


def test_output_is_sorted_and_stable_whatever_the_insert_order(tmp_path: Path) -> None:
    records = {f"k{i}": {"z": i, "a": [i, "x"]} for i in range(50)}
    with JsonStore(tmp_path / "one.json") as one:
        for key in sorted(records):
            one.put(key, records[key])
    with JsonStore(tmp_path / "two.json") as two:
        for key in sorted(records, reverse=True):
            two.put(key, records[key])
    first = (tmp_path / "one.json").read_bytes()
    assert first == (tmp_path / "two.json").read_bytes()
    assert list(json.loads(first)) == sorted(records)
    assert first.index(b'"a"') < first.index(b'"z"')


def test_no_temporary_or_journal_files_are_left(tmp_path: Path) -> None:
    with JsonStore(tmp_path / "s.json") as store:
        for i in range(1000):
            store.put(str(i), i)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]


def test_crash_before_checkpoint_is_replayed_from_the_journal(tmp_path: Path) -> None:
    store = JsonStore(tmp_path / "s.json")
    for i in range(10):
        store.put(f"r{i}", {"n": i})
    store.flush()  # durable, but never compacted nor closed: as if killed here
    del store
    with open(tmp_path / "s.json.journal", "ab") as journal:
        journal.write(b'{"k": "torn", "v": {"n"')  # the write the crash interrupted
    reopened = JsonStore(tmp_path / "s.json")
    assert len(reopened) == 10 and reopened.get("r9") == {"n": 9}
    assert "torn" not in reopened
    assert not (tmp_path / "s.json.journal").exists()  # replay compacted it
    assert json.loads((tmp_path / "s.json").read_bytes())["r3"] == {"n": 3}


def test_total_bytes_written_stay_linear(tmp_path: Path) -> None:
    store = JsonStore(tmp_path / "s.json")
    for i in range(10_000):
        store.put(f"record-{i:06d}", {"name": f"thing {i}", "values": [i, i * 2, i * 3]})
    store.close()
    final = (tmp_path / "s.json").stat().st_size
    assert store.bytes_written / final <= 3.0


def test_rewriting_the_same_record_writes_nothing(tmp_path: Path) -> None:
    store = JsonStore(tmp_path / "s.json")
    store.put("a", {"x": 1})
    store.flush()
    written = store.bytes_written
    store.put("a", {"x": 1})
    store.flush()
    assert store.bytes_written == written


def test_a_corrupt_store_is_reported_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text("{not json")
    with pytest.raises(StorageError, match="not a JSON store"):
        JsonStore(path)
    assert path.read_text() == "{not json"


@pytest.mark.parametrize(
    "body",
    [b"[" * 100_000 + b"]" * 100_000, b"\xff\x00\x00\x00not text"],
    ids=["nested too deep", "not UTF-8"],
)
def test_a_store_nested_too_deep_or_not_text_is_reported_not_overwritten(
    tmp_path: Path, body: bytes
) -> None:
    """Were a RecursionError and a UnicodeDecodeError: 'internal error', exit 1."""
    path = tmp_path / "s.json"
    path.write_bytes(body)
    with pytest.raises(StorageError, match="not a JSON store"):
        JsonStore(path)
    assert path.read_bytes() == body


def test_a_journal_line_it_did_not_write_ends_the_replay_like_a_torn_one(tmp_path: Path) -> None:
    """A line of another shape (`[1]`, an object without its key) was a TypeError or a
    KeyError; the replay keeps what came before it, as for a line torn by a crash."""
    path = tmp_path / "s.json"
    path.write_text('{"a": 1}')
    (tmp_path / "s.json.journal").write_text('{"k": "b", "v": 2}\n[1]\n{"k": "c", "v": 3}\n')
    assert sorted(JsonStore(path).items()) == [("a", 1), ("b", 2)]
