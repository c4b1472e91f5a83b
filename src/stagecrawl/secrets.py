"""Secrets never printed: passwords in URLs (user-info and query parameters) and tokens.

Every secret stagecrawl is given (a database or Redis URL's password, a token from the
environment) is registered here when it is read; `redact` replaces each with `***` in any text,
and `RedactingFilter` does the same to every log record, so a message that quotes a URL or
an error that echoes one (a driver's, a library's) cannot leak it. `mask_url` gives the
printable form of a URL.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

MASK = "***"
SECRET_PARAMS = re.compile(r"pass(word)?|passwd|pwd|secret|token|api[-_]?key|auth", re.IGNORECASE)
_known: set[str] = set()


def register(secret: str | None) -> None:
    """Remember a secret so that `redact` removes it wherever it appears."""
    if secret and len(secret) >= 3:  # shorter strings would mask innocent text
        _known.add(secret)
        _known.add(quote(secret, safe=""))


def register_url(url: str | None) -> None:
    """Register the password and secret query parameters of a URL."""
    if not url:
        return
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


def mask_url(url: str) -> str:
    """The URL with its password and secret query parameters replaced by `***`; anything else
    (a SQLite path's slashes included) is left exactly as given."""
    register_url(url)
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
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
    return masked


def redact(text: str) -> str:
    for secret in sorted(_known, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    return text


class RedactingFilter(logging.Filter):
    """Masks known secrets in every record that passes through the handler it is on."""

    def filter(self, record: logging.LogRecord) -> bool:
        if _known:
            message = record.getMessage()
            clean = redact(message)
            if clean != message:
                record.msg, record.args = clean, None
        return True
