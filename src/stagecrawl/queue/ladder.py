"""The one retry ladder and the one "failed in this run → next try is the next run" policy.

Every durable queue of the product climbs the same ladder: a unit that fails goes one rung up,
and its `max_failures`-th failure gives it up (a person requeues it, docs/schema.md). A unit
that failed, or was given back, during a run is not tried again by that run: its next try is
the next run, so a broken unit never turns a run into a loop of retries.

How a table stores its rung differs, the rule does not:
- `LadderCodes`: the rung in the state column itself (the organisation's LIST format:
  0 pending, 30–34 failure 1–5, 39 given up, plus the registry's own finished codes);
- the engine's frontier (engine/frontier.py) keeps a failure count beside its state and asks
  `RetryLadder.gives_up`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RetryLadder:
    """How many failures a unit may have before it is given up."""

    max_failures: int = 6

    def gives_up(self, failures: int) -> bool:
        """After this many failures, is the unit given up?"""
        return failures >= self.max_failures


LADDER = RetryLadder()


@dataclass(frozen=True)
class LadderCodes:
    """The ladder written into one state column: `pending`, failure n (1 … max−1) as
    `first_failure + n − 1`, and `gave_up`; `finished` are the registry's own final codes and
    their meaning (e.g. 1 collected, 2 skipped, 4 not found)."""

    finished: Mapping[int, str] = field(default_factory=dict)
    pending: int = 0
    first_failure: int = 30
    gave_up: int = 39
    ladder: RetryLadder = LADDER

    @property
    def last_failure(self) -> int:
        return self.first_failure + self.ladder.max_failures - 2

    @property
    def failing(self) -> range:
        """The codes of a unit that failed and waits for the next run."""
        return range(self.first_failure, self.last_failure + 1)

    @property
    def claimable(self) -> tuple[int, ...]:
        return (self.pending, *self.failing)

    def failures(self, state: int) -> int:
        """How many times a unit in `state` has failed."""
        if state in self.failing:
            return state - self.first_failure + 1
        if state == self.gave_up:
            return self.ladder.max_failures
        return 0

    def after_failure(self, state: int) -> int:
        """One rung up: pending (or finished, asked again) → failure 1 → … → given up."""
        failures = self.failures(state) + 1
        if self.ladder.gives_up(failures):
            return self.gave_up
        return self.first_failure + failures - 1

    @property
    def names(self) -> dict[int, str]:
        """Every code and what it means (for `status`)."""
        return {
            self.pending: "pending",
            **self.finished,
            **{n: f"transient failure {self.failures(n)}" for n in self.failing},
            self.gave_up: "given up",
        }


class ThisRun:
    """The groups that failed, or were given back, during this run: the run claims them no
    more (their next try is the next run). Live: the claim reads it inside its transaction, so
    a failure added before it is written keeps the group out of the same claim."""

    def __init__(self, groups: Iterable[str] = ()) -> None:
        self._groups: set[str] = set(groups)

    def add(self, group: str) -> None:
        self._groups.add(group)

    def update(self, groups: Iterable[str]) -> None:
        self._groups.update(groups)

    def __contains__(self, group: object) -> bool:
        return group in self._groups

    def __iter__(self) -> Iterator[str]:
        return iter(self._groups)

    def __len__(self) -> int:
        return len(self._groups)

    def snapshot(self) -> list[str]:
        """The groups now, sorted (a copy: other threads may add while a query is built)."""
        return sorted(self._groups.copy())
