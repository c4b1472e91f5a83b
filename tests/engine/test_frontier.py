"""The frontier's own bookkeeping: what `add` and `complete` record, at and past the size of
one INSERT statement."""

from __future__ import annotations

from pathlib import Path

import pytest

from stagecrawl.engine import frontier as frontier_module
from stagecrawl.engine.frontier import DONE, PENDING, Completion, Frontier
from stagecrawl.engine.request import Request


def urls(numbers: range) -> list[Request]:
    return [Request(f"http://h/p?n={n}") for n in numbers]


@pytest.mark.parametrize("per_insert", [1, 7, 500])
def test_new_requests_are_counted_once_across_statements_and_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, per_insert: int
) -> None:
    monkeypatch.setattr(frontier_module, "ROWS_PER_INSERT", per_insert)
    frontier = Frontier(tmp_path / "f.sqlite")
    try:
        # 0..1233 with every tenth offered twice in the same call, then 1000..1499 again
        first = urls(range(1234)) + urls(range(0, 1234, 10))
        assert frontier.add(first) == 1234
        assert frontier.add(urls(range(1000, 1500))) == 266
        claimed = frontier.claim(2000)
        assert len(claimed) == 1500
        assert len({r.key for r in claimed}) == 1500
        # children, some known, in the same transaction as their parents' outcomes
        done = [Completion(claimed[0], urls(range(1490, 1530)))]
        assert frontier.complete(done) == 30
        assert frontier.counts()[DONE] == 1 and frontier.counts()[PENDING] == 30
    finally:
        frontier.close()
