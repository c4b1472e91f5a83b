"""A keyed JSON store: one sorted, stably formatted JSON object per file, never half-written.

Inserts append to a JSON-lines journal (fsynced in batches); the JSON file is rewritten only at
checkpoints, atomically (temp file + fsync + rename + fsync of the folder). Checkpoints happen
when the journal has grown past three times the size of the last compacted file, so the bytes
written over a whole run stay a small constant multiple of the final file (O(n), not O(n^2)).
A journal
left by a crash is replayed on open; a torn last line (the crash hit mid-write) is ignored.
`read_store` reads a store the same way without writing anything (a store on read-only media,
an input another pass wrote), and `remove_stray_temporaries` takes away what a write killed
between its temp file and its rename left behind.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from stagecrawl.errors import StorageError

JOURNAL_SUFFIX = ".journal"
MIN_COMPACT_BYTES = 1024 * 1024


def dumps_store(data: dict[str, Any]) -> bytes:
    """The canonical file form: sorted keys, two-space indent, trailing newline."""
    return (json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{time.time_ns()}.tmp")


def stray_temporaries(path: Path) -> list[Path]:
    """The temp files `atomic_write` made for `path` and never renamed: a process killed
    between the two (a live writer's own temp file is one too: hold the output's lock)."""
    pattern = re.compile(rf"\.{re.escape(path.name)}\.[0-9]+\.[0-9]+\.tmp")
    try:
        return sorted(p for p in path.parent.iterdir() if pattern.fullmatch(p.name))
    except OSError:  # no folder: nothing stray
        return []


def remove_stray_temporaries(path: Path) -> int:
    """Remove what `stray_temporaries` finds; how many went. One that cannot be removed (a
    read-only folder) stays: it is never read, only in the way of the eye."""
    removed = 0
    for stray in stray_temporaries(path):
        try:
            stray.unlink()
        except OSError:
            continue
        removed += 1
    return removed


def atomic_write(path: Path, data: bytes) -> None:
    """Write `data` to `path` so a reader sees the old file or the new one, never a mix."""
    tmp = _temporary(path)
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StorageError(f"cannot write {path}: {exc.strerror or exc}") from exc


class JsonStore:
    """A dict persisted as one JSON file plus an append-only journal."""

    def __init__(self, path: Path | str, fsync_every: int = 256) -> None:
        self.path = Path(path)
        self.journal_path = journal_of(self.path)
        self.fsync_every = fsync_every
        self.bytes_written = 0
        self._data: dict[str, Any] = {}
        self._pending: list[bytes] = []
        self._journal_bytes = 0
        self._file_bytes = 0
        self._journal: Any = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create {self.path.parent}: {exc.strerror}") from exc
        self._load()

    # -- reading ------------------------------------------------------------------------------
    def _load(self) -> None:
        self._data, self._file_bytes, replayed = _read(self.path, self.journal_path)
        if replayed:
            self.checkpoint()
        elif self.journal_path.exists():
            self.journal_path.unlink()

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[str]:
        return self.keys()

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def keys(self) -> Iterator[str]:
        return iter(list(self._data))

    def items(self) -> Iterator[tuple[str, Any]]:
        return iter(list(self._data.items()))

    def snapshot(self) -> dict[str, Any]:
        return dict(self._data)

    # -- writing ------------------------------------------------------------------------------
    def put(self, key: str, value: Any) -> None:
        if self._data.get(key, _MISSING) == value:
            return  # writing the same record twice changes nothing, not even the journal
        self._data[key] = value
        self._append({"k": key, "v": value})

    def delete(self, key: str) -> None:
        if key in self._data:
            del self._data[key]
            self._append({"d": key})

    def _append(self, entry: dict[str, Any]) -> None:
        line = (json.dumps(entry, sort_keys=True, ensure_ascii=False) + "\n").encode()
        self._pending.append(line)
        if len(self._pending) >= self.fsync_every:
            self.flush()

    def flush(self) -> None:
        """Make every put so far durable (journal append + fsync); compact when it pays."""
        if self._pending:
            try:
                if self._journal is None:
                    self._journal = open(self.journal_path, "ab")  # noqa: SIM115
                data = b"".join(self._pending)
                self._journal.write(data)
                self._journal.flush()
                os.fsync(self._journal.fileno())
            except OSError as exc:
                raise StorageError(f"cannot write {self.journal_path}: {exc.strerror}") from exc
            self._pending.clear()
            self._journal_bytes += len(data)
            self.bytes_written += len(data)
        if self._journal_bytes > max(MIN_COMPACT_BYTES, 3 * self._file_bytes):
            self.checkpoint()

    def checkpoint(self) -> None:
        """Compact: write the whole store atomically, then drop the journal it now contains."""
        # Pending lines are already in self._data; once the file is rewritten they are
        # redundant, so they need not reach the journal.
        self._pending.clear()
        data = dumps_store(self._data)
        atomic_write(self.path, data)
        self.bytes_written += len(data)
        self._file_bytes = len(data)
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        self.journal_path.unlink(missing_ok=True)
        self._journal_bytes = 0

    @property
    def changed(self) -> bool:
        """Something was put or deleted since the file was last written."""
        return bool(self._pending or self._journal_bytes)

    def close(self, create: bool = True) -> None:
        """Write what changed (nothing else: an unchanged store is not rewritten); a store
        without a file gets one, empty, unless `create` is False and nothing was put."""
        if self.changed or (create and not self.path.exists()):
            self.checkpoint()
        elif self._journal is not None:
            self._journal.close()
            self._journal = None

    def __enter__(self) -> JsonStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_MISSING = object()


def journal_of(path: Path) -> Path:
    return path.with_name(path.name + JOURNAL_SUFFIX)


def read_store(path: Path | str) -> dict[str, Any]:
    """What a JsonStore at `path` holds (its file, then its journal), read without writing
    anything; a missing file is an empty store. StorageError if the file is not a store."""
    path = Path(path)
    data, _size, _replayed = _read(path, journal_of(path))
    return data


def _read(path: Path, journal: Path) -> tuple[dict[str, Any], int, int]:
    """The store's data, the file's size, and how many journal lines were replayed."""
    data: dict[str, Any] = {}
    size = 0
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raw = None
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc.strerror}") from None
    if raw is not None:
        size = len(raw)
        if raw.strip():
            try:
                loaded = json.loads(raw)
            # not JSON, not UTF-8 text, or nested deeper than the decoder recurses
            except (ValueError, RecursionError) as exc:
                raise StorageError(f"{path} is not a JSON store: {exc}") from None
            if not isinstance(loaded, dict):
                raise StorageError(f"{path} does not hold a JSON object")
            data = loaded
    replayed = 0
    try:
        lines = journal.read_bytes().splitlines()
    except FileNotFoundError:
        lines = []
    except OSError as exc:
        raise StorageError(f"cannot read {journal}: {exc.strerror}") from None
    for line in lines:
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            break  # a torn last line: the crash hit while it was being written
        if not isinstance(entry, dict) or not ("d" in entry or "k" in entry):
            break  # not a line this store wrote: read no further, as for a torn one
        if "d" in entry:
            data.pop(entry["d"], None)
        else:
            data[entry["k"]] = entry["v"]
        replayed += 1
    return data, size, replayed
