"""Why a request could not go yet, in one vocabulary for the pacing (engine/ratelimit.py) and
the stops (engine/shutdown.py): its own module so neither imports the other for it."""

from __future__ import annotations

import enum


class WaitReason(enum.StrEnum):
    """Why a request could not go yet. Ours (the lane's rate, a budget) is not the server's
    (a 429 cooldown): logs and stop summaries say which, and a unit given back keeps it.
    A host's cooldown also keeps who asked for it (`RETRY_AFTER`: the server; `BACKOFF`:
    our backoff after a 429 that named no time): stored reasons and summaries name it."""

    LANE_RATE = "lane_rate"  # our own pacing: the lane's token bucket
    BUDGET = "budget"  # our own budget window (e.g. 600 requests per 10 minutes) is spent
    COOLDOWN = "cooldown"  # the host answered 429: its Retry-After, or our backoff after it
    BACKOFF = "backoff"  # our backoff: after a transient failure, or a 429 without a time
    RETRY_AFTER = "retry_after"  # the source of a cooldown the server asked for (Retry-After)
    STOP = "stop"  # no wait: the stop came before the request was sent

    @property
    def text(self) -> str:
        return _REASON_TEXT[self]


_REASON_TEXT = {
    WaitReason.LANE_RATE: "our lane's rate",
    WaitReason.BUDGET: "our request budget",
    WaitReason.COOLDOWN: "the server's 429 cooldown",
    WaitReason.BACKOFF: "our backoff",
    WaitReason.RETRY_AFTER: "the server's Retry-After",
    WaitReason.STOP: "nothing (stopped before sending)",
}
