"""Core metadata's header fields are read as the stdlib email parser reads them (policy
compat32, headers only: the independent implementation here), on every real METADATA file in
../shared, on the email format's corner cases and on mutated files: the same fields, in the
same order, with the same values."""

from __future__ import annotations

import email.parser
import email.policy
import random

import pytest

from stagecrawl.emailheaders import header_fields
from stagecrawl.pypi.metadata import parse_core_metadata
from tests.services import shared_fixture


def _as_email_reads(text: str) -> dict[str, list[str]]:
    message = email.parser.Parser(policy=email.policy.compat32).parsestr(text, headersonly=True)
    fields: dict[str, list[str]] = {}
    for name, value in message.items():
        fields.setdefault(name.lower(), []).append(str(value))
    return fields


def _real_files() -> list[str]:
    folder = shared_fixture("pypi")
    return [
        path.read_bytes().decode("utf-8", errors="replace")
        for path in sorted(folder.rglob("*.metadata"))
    ]


def test_every_real_metadata_file_reads_as_email_reads_it() -> None:
    files = _real_files()
    assert len(files) > 20  # ../shared's real METADATA files
    for text in files:
        assert header_fields(text) == _as_email_reads(text)
        assert parse_core_metadata(text.encode()).requires_dist is not None


CORNERS = [
    "",
    "\n",
    "Name: a",  # no line end at all
    "Name: a\nVersion: 1\n\nName: body\n",  # a field after the separator is the body's
    "Name: a\r\nLicense: MIT\r\n  and more\r\n\r\nbody",  # continuation, CRLF
    "Name: a\rVersion: 1\r\rbody",  # CR alone
    "Name: a\n\r\nVersion: 2\n",  # LF then CRLF: the blank line ends the block
    " starts as a continuation\nName: a\n",  # a continuation of nothing is dropped
    "From someone Mon Jan 1\nName: a\n",  # the Unix envelope line
    "Name: a\nFrom here\nVersion: 1\n",  # a misplaced envelope line: dropped
    "Name: a\nFrom here\n  continued\nVersion: 1\n",  # ... and a continuation after it
    "Name: a\nFrom the last line",  # the last envelope line goes to the body
    ": no name\nName: a\n",  # no field name: dropped
    "Name: a\nnot a header line\nVersion: 1\n",  # a body with no separator
    "Bad Name: x\nName: a\n",  # a space in a name: the body begins
    "Name:\nSummary:   \n",  # empty values
    "Name:a\tb\nSummary:\t\tindented\n",  # tabs after the colon
    "Classifier: A\nclassifier: B\nCLASSIFIER: C\n",  # names in any case, one field
    "Name: é\nSummary: ☃ snow\n",  # beyond ASCII
    "Requires-Dist: a\n\tb\n \n",  # a continuation of spaces only
    "Name: a\x0bb\x0cc\x1cd\u2028e\n",  # what str.splitlines would split, email does not
    "Name: a\n" + "Description: x\n" + "        |" * 3000 + "\n",  # past 8 KiB in one field
    "Name: a\r",
    "Name: a\r\n",
]


@pytest.mark.parametrize("text", CORNERS)
def test_corner_cases_read_as_email_reads_them(text: str) -> None:
    assert header_fields(text) == _as_email_reads(text)


def test_mutated_files_read_as_email_reads_them() -> None:
    """Real files with lines cut, doubled, joined, re-ended and prefixed (seeded)."""
    rng = random.Random(658)
    pieces = ["\n", "\r\n", "\r", " ", "\t", ":", "From ", "X: y", "", "é"]
    files = _real_files()[:10] or ["Name: a\nVersion: 1\nRequires-Dist: b\n\nbody\n"]
    for _ in range(3000):
        lines = rng.choice(files).splitlines(keepends=True)[:40]
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(lines) + 1)
            choice = rng.random()
            if choice < 0.3 and lines:
                del lines[min(at, len(lines) - 1)]
            elif choice < 0.6:
                lines.insert(at, rng.choice(pieces) + rng.choice(pieces))
            elif lines:
                index = min(at, len(lines) - 1)
                lines[index] = rng.choice(pieces) + lines[index].rstrip("\r\n") + rng.choice(pieces)
        text = "".join(lines)
        assert header_fields(text) == _as_email_reads(text), repr(text)
