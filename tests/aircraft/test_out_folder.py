"""The parts the aircraft `--out` rests on (issue 34), each on its own: the folder lock, the
frontier's list of what each done request gave, its wish list, its read-only look, and the
store's read without writing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from stagecrawl.engine.filelock import exclusive_folder
from stagecrawl.engine.frontier import DONE, PENDING, Completion, Frontier
from stagecrawl.engine.jsonstore import (
    JsonStore,
    read_store,
    remove_stray_temporaries,
    stray_temporaries,
)
from stagecrawl.engine.request import Item, Request
from stagecrawl.errors import StorageError


def test_the_folder_lock_refuses_another_process_and_creates_nothing(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(StorageError, match="busy"), exclusive_folder(tmp_path, "busy"):
            pass
        assert os.listdir(tmp_path) == []
    finally:
        holder.kill()
        holder.wait()
    with exclusive_folder(tmp_path, "busy"):  # the lock died with its process
        assert os.listdir(tmp_path) == []


HOLD = """
import sys, time
from pathlib import Path
from stagecrawl.engine.filelock import exclusive_folder
with exclusive_folder(Path(sys.argv[1]), "busy"):
    print("held", flush=True)
    time.sleep(60)
"""


def request(key: str) -> Request:
    return Request(f"http://old.example/q?k={key}", key=key)


def done(frontier: Frontier, key: str, *items: str) -> None:
    claimed = frontier.claim(100)
    chosen = next(r for r in claimed if r.key == key)
    frontier.complete([Completion(chosen, [], items=[Item(i, {}, "s") for i in items])])
    frontier.release(r.key for r in claimed if r is not chosen)


def test_the_frontier_lists_what_each_done_request_gave(tmp_path: Path) -> None:
    frontier = Frontier(tmp_path / "f.sqlite", keep_items=True)
    assert frontier.items_listed
    frontier.add([request("a"), request("b")])
    done(frontier, "a", "x", "y")
    done(frontier, "b")
    assert frontier.done_items() == {"a": [("s", "x"), ("s", "y")]}
    assert frontier.redo(["a"]) == 1
    done(frontier, "a", "y")  # done again: what it gives now replaces what it gave
    assert frontier.done_items() == {"a": [("s", "y")]}
    frontier.close()
    # opened without keeping items, it no longer claims to list them all
    Frontier(tmp_path / "f.sqlite").close()
    assert not Frontier(tmp_path / "f.sqlite", keep_items=True).items_listed


def test_a_frontier_written_before_the_list_says_so(tmp_path: Path) -> None:
    old = Frontier(tmp_path / "f.sqlite")
    old.add([request("a")])
    old.close()
    assert not Frontier(tmp_path / "f.sqlite", keep_items=True).items_listed


def test_offer_all_moves_unfinished_requests_and_forgets_unwanted_ones(tmp_path: Path) -> None:
    frontier = Frontier(tmp_path / "f.sqlite", keep_items=True)
    frontier.add([request("a"), request("b"), request("c")])
    done(frontier, "a", "x")
    moved = [Request(f"http://new.example/q?k={k}", key=k) for k in ("a", "b", "d")]
    offered = frontier.offer_all(moved)
    assert (offered.added, offered.retargeted, offered.forgotten) == (1, 1, 1)
    urls = dict(frontier.db.execute("SELECT key, url FROM requests").fetchall())
    assert urls == {
        "a": "http://old.example/q?k=a",  # done: as it was
        "b": "http://new.example/q?k=b",
        "d": "http://new.example/q?k=d",
    }
    assert frontier.counts() == {DONE: 1, PENDING: 2}


def test_a_read_only_look_makes_no_file(tmp_path: Path) -> None:
    path = tmp_path / "f.sqlite"
    frontier = Frontier(path, keep_items=True)
    frontier.add([request("a")])
    done(frontier, "a", "x")
    frontier.close()
    before = sorted(os.listdir(tmp_path))
    view = Frontier(path, read_only=True)
    assert view.counts() == {DONE: 1} and view.done_items() == {"a": [("s", "x")]}
    view.close()
    assert sorted(os.listdir(tmp_path)) == before


def test_read_store_replays_the_journal_without_writing(tmp_path: Path) -> None:
    store = JsonStore(tmp_path / "s.json")
    store.put("a", 1)
    store.checkpoint()
    store.put("b", 2)
    store.flush()  # in the journal only, as a killed run leaves it
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert read_store(tmp_path / "s.json") == {"a": 1, "b": 2}
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    assert read_store(tmp_path / "none.json") == {}
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(StorageError, match="is not a JSON store"):
        read_store(tmp_path / "bad.json")


def test_only_the_temp_files_of_atomic_write_are_stray(tmp_path: Path) -> None:
    target = tmp_path / "specs.json"
    names = [".specs.json.12.34.tmp", ".specs.json.x.tmp", ".models.json.12.34.tmp", "a.tmp"]
    for name in names:
        (tmp_path / name).write_text("")
    assert [p.name for p in stray_temporaries(target)] == [".specs.json.12.34.tmp"]
    assert remove_stray_temporaries(target) == 1
    assert sorted(os.listdir(tmp_path)) == sorted(names[1:])
