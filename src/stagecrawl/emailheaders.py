"""Email-style header fields (RFC 822 as Python's email package reads it) at a fraction of its
cost, with its answers: `header_fields` gives what `email.parser.Parser(policy=compat32)` gives
for a text's header block (`headersonly`), by the same rules, line for line.

Written here, beside jsoncodec and for the same reason, because the email package built a
whole message (and split every line of a body that is never read) where only the header
block is wanted: 80-120 µs a file, 7 % of the bench's PyPI crawl, where every other version
has a PEP 658 METADATA file to read (bench/metadata_headers.py; tests/test_emailheaders.py
compares the two on every real METADATA file in ../shared and on mutated ones).
"""

from __future__ import annotations

import re

# The email package's line ends (\r\n, \r, \n); str.splitlines ends lines at these too, and
# gives the same lines where the text has none of them (it is three times as fast).
_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")
_OTHER_LINE_ENDS = re.compile("[\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
# blank lines but \n\n, with the length of their first line end
_OTHER_BLANK_LINES = (("\r\n\r\n", 2), ("\r\r", 1))


def header_fields(text: str) -> dict[str, list[str]]:
    """The header block's fields, by lower-cased name, each value as `email.message.Message`
    gives it when `email.parser.Parser(policy=compat32)` read `text` with `headersonly`
    (continuation lines kept, the last line end cut): that parser's rules, line for line
    (feedparser's `_parsegen` and `_parse_headers`)."""
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
