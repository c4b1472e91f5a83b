"""A plain HTTP GET for the origin tests (urllib, redirects not followed): what a client sees."""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def get(url: str, accept: str | None = None, agent: str | None = None, **headers: str) -> Reply:
    from tests.pypi.conftest import CONTACT_UA

    sent = {"User-Agent": agent if agent is not None else CONTACT_UA, **headers}
    if accept:
        sent["Accept"] = accept
    request = urllib.request.Request(url, headers=sent)
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=10) as response:
            return Reply(
                response.status,
                {k.lower(): v for k, v in response.headers.items()},
                response.read(),
            )
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read())
