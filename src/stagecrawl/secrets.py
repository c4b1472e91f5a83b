"""Secrets never printed: passwords in URLs (user-info and query parameters) and tokens.

Every secret stagecrawl is given (a database or Redis URL's password, a token from the
environment) is registered here when it is read; `redact` replaces each with `***` in any text,
and `RedactingFilter` does the same to every log record, so a message that quotes a URL or
an error that echoes one (a driver's, a library's) cannot leak it. `mask_url` gives the
printable form of a URL.

A URL given slightly wrong is still a secret: `crawler:pw@host/db` (no scheme),
`mysql+pymysql//u:pw@h`, `mysql+pymysql:/u:pw@h`, `:pw@host`, a host `[x` that `urlsplit`
refuses, `u:pa/ss@h` (urlsplit reads a port `pa`), `u:pw` without its `@host`. So the password
is also found by pattern — anything that looks like `user:pass@`, parsed or not — and `redact`
masks that pattern (and `password=`-, `key=`- or `sig=`-like query parameters, and a token
given as the user of an http(s) URL) in every text, registered or not. Written by hand: no
library masks credentials in free text, and the patterns are a few regular expressions.
"""

from __future__ import annotations

import io
import logging
import re
from typing import Any, TextIO
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

MASK = "***"
# The name of a query parameter that holds a secret: a password, a token, a key (`key`,
# `api_key`, `X-Api-Key`; not `keyword`), a signature or credential of a pre-signed download URL
# (`X-Amz-Signature`, `sig`, `X-Goog-Credential`; not `design`).
SECRET_WORDS = (
    r"pass(?:word)?|passwd|pwd|secret|token|auth|credential"
    r"|sig(?:nature)?(?=[-_=]|$)|key(?=[-_=]|$)"
)
SECRET_PARAMS = re.compile(SECRET_WORDS, re.IGNORECASE)
# `[scheme:[//]]user:password@` anywhere in a text. The password runs to the last `@` of its
# word (urlsplit's rule: a password may hold `@`); the user part holds no `:`, `/` or `@`, and
# neither does the password hold a `/` (RFC 3986: userinfo ends where the path begins). Without
# that rule a purl such as `pkg:cargo/time@0.3.10` read as user `pkg`, password `cargo/time`.
USERINFO = re.compile(
    r"(?P<lead>(?:[A-Za-z][A-Za-z0-9+.\-]*:/{0,3})?[^\s:/@'\"<>()\[\]{},]*)"
    r":(?!/)(?P<password>[^\s'\"<>/]+)@"
)
# `scheme://user:pa/ss@host`: after `://` a password may hold a raw `/` (SQLAlchemy reads it so,
# to the `@`); one that starts like a port (`host:8080/path@…`) is a port and a path.
SLASHED_USERINFO = re.compile(
    r"(?P<lead>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@'\"<>]*)"
    r":(?!\d+(?:/|$))(?P<password>[^\s'\"<>@]*/[^\s'\"<>@]*)@"
)
# `?password=…` (or `&token=…`, `;pwd=…`) in a query, parsed or not.
SECRET_QUERY = re.compile(
    rf"(?P<key>[?&;][^=&#\s'\"]*(?:{SECRET_WORDS})[^=&#\s'\"]*=)(?P<value>[^&#\s'\"]+)",
    re.IGNORECASE,
)
# `https://TOKEN@host/…`: a user name alone in an http(s) URL is how GitHub, Gemfury and other
# private registries take a token (a git remote, a private index), so it is masked too. A
# database URL's user alone (`mysql+pymysql://crawler@host/db`) is a name, not a secret.
HTTP_USER = re.compile(r"(?P<scheme>\b(?:git\+)?https?://)[^\s:/@?#'\"<>\[\]]+@", re.IGNORECASE)
_known: set[str] = set()


def register(secret: str | None) -> None:
    """Remember a secret so that `redact` removes it wherever it appears."""
    if secret and len(secret) >= 3:  # shorter strings would mask innocent text
        _known.add(secret)
        _known.add(quote(secret, safe=""))


def register_url(url: str | None) -> None:
    """Register the password and secret query parameters of a URL, well-formed or not."""
    if not url:
        return
    for match in USERINFO.finditer(url):  # whatever urlsplit makes of it
        password = match["password"]
        for candidate in (password, password.split("@", 1)[0]):
            register(candidate)
            register(unquote(candidate))
    for candidate in _password_read_as_port(url):
        register(candidate)
        register(unquote(candidate))
    for match in SECRET_QUERY.finditer(url):
        register(match["value"])
        register(unquote(match["value"]))
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return
    if password:
        register(unquote(password))
        register(password)
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if SECRET_PARAMS.search(key):
            register(value)


def _password_read_as_port(url: str) -> list[str]:
    """The password of `scheme://user:pa/ss@host` (a raw `/` in it: urlsplit ends the host
    there, SQLAlchemy reads on to the `@`) or of `scheme://user:password` (the `@host` left
    out): where urlsplit sees no user-info but a port that is not a number, that "port" and
    whatever runs from it to the URL's last `@` are the password."""
    _scheme, sep, rest = url.partition("://")
    netloc = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if not sep or "@" in netloc or netloc.startswith("[") or ":" not in netloc:
        return []
    port = netloc.rsplit(":", 1)[1]
    if not port or port.isdigit():
        return []
    found = [port]
    to_last_at = re.match(r"[^:/@\s]*:(?P<password>\S*)@", rest)  # greedy: to the last @
    if to_last_at:
        found.append(to_last_at["password"])
    return found


def mask_url(url: str) -> str:
    """The URL with its password and secret query parameters replaced by `***`; anything else
    (a SQLite path's slashes included) is left exactly as given."""
    register_url(url)
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return redact(url)
    if "://" not in url:  # not a URL urlsplit understands: mask by pattern only
        return redact(url)
    masked = url
    if password is not None:
        userinfo, at, rest = masked.partition("@")
        scheme, sep, credentials = userinfo.partition("://")
        user = credentials.split(":", 1)[0]
        masked = f"{scheme}{sep}{user}:{MASK}{at}{rest}"
    if parts.query:
        base, _, query = masked.partition("?")
        query, hash_, fragment = query.partition("#")
        pairs = [
            (k, MASK if SECRET_PARAMS.search(k) else v)
            for k, v in parse_qsl(query, keep_blank_values=True)
        ]
        if any(v == MASK for _, v in pairs):
            masked = f"{base}?{urlencode(pairs, safe='*')}{hash_}{fragment}"
    return redact(masked)


def redact(text: str) -> str:
    """`text` with every registered secret, every `user:password@` and every secret query
    parameter replaced by `***`."""
    for secret in sorted(_known, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    if "@" in text:
        text = SLASHED_USERINFO.sub(lambda m: f"{m['lead']}:{MASK}@", text)
        text = USERINFO.sub(lambda m: f"{m['lead']}:{MASK}@", text)
        text = HTTP_USER.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    if "=" in text:
        text = SECRET_QUERY.sub(lambda m: f"{m['key']}{MASK}", text)
    return text


def redact_data(value: Any) -> Any:
    """`redact` over every string in nested dicts and lists (a document before it is shown:
    a table may wrap a long value across lines, where the rendered text no longer holds the
    secret in one piece)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_data(v) for v in value]
    return value


class RedactingFormatter(logging.Formatter):
    """Masks known secrets in the whole formatted record: the message and also a traceback
    or stack attached to it (which the filter below cannot reach)."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class RedactingStream(io.TextIOBase):
    """A text stream that masks known secrets in everything written to `stream` (the real
    stderr, fixed when made: a progress display that swaps sys.stderr for a proxy writing back
    through this stream must not make it write to itself)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def _target(self) -> TextIO:
        return self._stream

    def write(self, text: str) -> int:
        self._target().write(redact(text))
        return len(text)

    def flush(self) -> None:
        self._target().flush()

    def isatty(self) -> bool:
        return self._target().isatty()

    def fileno(self) -> int:
        return self._target().fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._target(), "encoding", None) or "utf-8"

    def writable(self) -> bool:
        return True


class RedactingFilter(logging.Filter):
    """Masks known secrets in every record that passes through the handler it is on."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True
