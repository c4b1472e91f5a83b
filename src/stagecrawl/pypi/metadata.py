"""PEP 658 core metadata (a wheel's METADATA, email-header format): its header fields, read as
the stdlib email parser reads them (policy compat32, headers only). packaging.metadata would
refuse the real files' old-style fields, and only headers are needed."""

from __future__ import annotations

import re
from dataclasses import dataclass

# The email package's line ends (\r\n, \r, \n); str.splitlines ends lines at these too, and
# gives the same lines where the text has none of them (it is three times as fast).
_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")
_OTHER_LINE_ENDS = re.compile("[\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
# blank lines but \n\n, with the length of their first line end
_OTHER_BLANK_LINES = (("\r\n\r\n", 2), ("\r\r", 1))


@dataclass(frozen=True)
class Declared:
    """What a release says of itself, in its core metadata or the JSON API's `info`."""

    summary: str | None
    requires_dist: tuple[str, ...] | None  # None: not known (not "no dependencies")
    provides_extra: tuple[str, ...] | None
    requires_python: str | None
    license_expression: str | None
    license: str | None
    classifiers: tuple[str, ...]
    project_urls: dict[str, str]
    home_page: str | None


NOTHING_DECLARED = Declared(None, None, None, None, None, None, (), {}, None)


def header_fields(text: str) -> dict[str, list[str]]:
    """The header block's fields, by lower-cased name, each value as `email.message.Message`
    gives it when `email.parser.Parser(policy=compat32)` read `text` with `headersonly`
    (continuation lines kept, the last line end cut): that parser's rules, line for line
    (feedparser's `_parsegen` and `_parse_headers`; tests compare the two on every real file
    and on mutated ones). Written here because the email package took 80-120 µs a file
    (7 % of the bench's PyPI crawl, where half the versions have a metadata file) to build
    a message whose body is never read."""
    blank = text.find("\n\n")  # a blank line ends the block at the latest: no need to read on
    head = text if blank < 0 else text[: blank + 1]
    if "\r" in head:  # where the blank line may be another (searched in the head alone: fast)
        cuts = [at + end for line, end in _OTHER_BLANK_LINES if (at := head.find(line)) >= 0]
        head = head[: min(cuts, default=len(head))]
    if _OTHER_LINE_ENDS.search(head) is None:
        lines = head.splitlines(keepends=True)
    else:
        lines = [match[0] for match in _LINES.finditer(head)]
    fields: dict[str, list[str]] = {}
    field: list[str] = []  # the lines of the field being read
    for line in [*lines, ""]:  # "": the end, which keeps the last field as a new one would
        if line[:1] in (" ", "\t"):
            if field:  # else a continuation of nothing: dropped, as the parser drops it
                field.append(line)
            continue
        if field:
            name, value = field[0].split(":", 1)
            whole = value.lstrip(" \t") + "".join(field[1:])
            fields.setdefault(name.lower(), []).append(whole.rstrip("\r\n"))
            field = []
        if line.startswith("From "):
            continue  # an envelope line (Unix From), or a misplaced one: not a field
        # the email package's header line: a name of printable ASCII but space and `:`, a
        # colon (an empty name: a line it drops); anything else, a blank line too, ends it
        colon = line.find(":")
        name = line[:colon]
        if colon < 0 or not (name.isascii() and name.isprintable()) or " " in name:
            break
        if name:
            field = [line]
    return fields


def _one(fields: dict[str, list[str]], key: str) -> str | None:
    values = fields.get(key)
    text = values[0].strip() if values else ""
    return text or None


def _all(fields: dict[str, list[str]], key: str) -> list[str]:
    return [value.strip() for value in fields.get(key, ())]


def parse_core_metadata(content: bytes) -> Declared:
    """Headers of a METADATA file; a missing field is None or empty, never invented."""
    fields = header_fields(content.decode("utf-8", errors="replace"))
    urls: dict[str, str] = {}
    for entry in _all(fields, "project-url"):
        label, _, url = entry.partition(",")
        if url.strip():
            urls[label.strip()] = url.strip()
    return Declared(
        summary=_one(fields, "summary"),
        requires_dist=tuple(_all(fields, "requires-dist")),
        provides_extra=tuple(dict.fromkeys(_all(fields, "provides-extra"))),
        requires_python=_one(fields, "requires-python"),
        license_expression=_one(fields, "license-expression"),
        license=_one(fields, "license"),
        classifiers=tuple(_all(fields, "classifier")),
        project_urls=urls,
        home_page=_one(fields, "home-page"),
    )
