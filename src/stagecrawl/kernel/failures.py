"""A unit's failure in words, the same for every registry: what is stored in LAST_ERROR and
shown by the command and by `status` (secrets masked, one line)."""

from __future__ import annotations

from stagecrawl.engine.ratelimit import origin_of
from stagecrawl.errors import FetchError, TransientError, UnreadableAnswer
from stagecrawl.secrets import redact

REASON_MAX = 2000  # a stored reason's length at most (LAST_ERROR is TEXT; a line, not a page)


def explain_failure(exc: BaseException) -> str:
    """A failure as the user should read it: an origin that cannot be reached at all says so
    first (`cannot reach index.crates.io: ClientConnectorDNSError: …`), an unreadable answer
    (a ValueError of a parser) says what it was, anything else is named as unexpected (a
    bug, on the ladder all the same)."""
    if isinstance(exc, TransientError) and (
        exc.last_status is None
        and exc.reason.startswith(("ClientConnector", "ClientProxyConnection"))
    ):
        host = origin_of(exc.url).split("://", 1)[-1]
        text = f"cannot reach {host}: {exc.reason} (after {exc.attempts} attempt(s)): {exc.url}"
    elif isinstance(exc, FetchError):
        text = str(exc)
    elif isinstance(exc, UnreadableAnswer):
        text = f"{exc.prefix}{exc}"
    elif isinstance(exc, ValueError):  # an answer a parser could not read (JSON, a shape)
        text = str(exc)
    else:
        text = f"unexpected {type(exc).__name__}: {exc}"
    return redact(" ".join(text.split()))[:REASON_MAX]
