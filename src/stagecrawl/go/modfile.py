"""go.mod and go.work as golang.org/x/mod's modfile reads them (read.go's lexer and comment
attachment, rule.go's directives): quoted paths and versions, blocks with blank lines,
`[low, high]` retract intervals, `// indirect`, and a directive's comment — the lines right
above it (a blank line detaches them) or after it on its line, else its block's — which holds
a retraction's rationale and the module's `Deprecated:` paragraph (case-sensitive).

`strict` is the main module (every directive kept, an error is an error); otherwise a
dependency's go.mod: only module, go, toolchain, require and retract are read, and a
retraction that does not parse is skipped, as cmd/go does."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

_DEPRECATED = re.compile(r"(?s)(?:\A|\n\n)Deprecated: *(.*?)(?:\Z|\n\n)")
_GO_VERSION = re.compile(r"^([1-9][0-9]*)\.(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*))?([a-z]+[0-9]+)?$")
_LAX_GO = re.compile(r"^v?(([1-9][0-9]*)\.(0|[1-9][0-9]*))([^0-9].*)$")
_TOOLCHAIN = re.compile(r"^default$|^go1($|\.)")


@dataclass
class Line:
    tokens: list[str]
    number: int
    before: list[str] = field(default_factory=list)  # comment texts ("" = a blank line)
    suffix: list[str] = field(default_factory=list)

    def comment(self, block: Block | None) -> str:
        """rule.go's parseDirectiveComment: the line's comments, else its block's."""
        texts = self.before + self.suffix
        if block is not None and not any(texts):
            texts = block.before
        return "\n".join(t[2:].strip() for t in texts if t.startswith("//"))


@dataclass
class Block:
    verb: list[str]
    lines: list[Line]
    before: list[str] = field(default_factory=list)


@dataclass
class Require:
    path: str
    version: str
    indirect: bool
    line: int


@dataclass
class Replace:
    path: str
    version: str | None  # None: every version (a wildcard replace)
    new_path: str
    new_version: str | None  # None: a local directory
    line: int


@dataclass
class ModFile:
    module: str | None = None
    deprecated: str | None = None
    go: str | None = None
    toolchain: str | None = None
    requires: list[Require] = field(default_factory=list)
    excludes: list[tuple[str, str]] = field(default_factory=list)
    replaces: list[Replace] = field(default_factory=list)
    retracts: list[tuple[str, str, str]] = field(default_factory=list)  # low, high, rationale
    uses: list[tuple[str, int]] = field(default_factory=list)  # go.work


_TOKEN = re.compile(
    r"(?P<space>[ \t\r]+)|(?P<comment>//.*)|(?P<bad>/\*)|(?P<punct>[()\[\]{},])"
    r'|(?P<string>"(?:[^"\\]|\\.)*"|`[^`]*`)|(?P<ident>(?:(?!//|/\*)[^\s()\[\]{},"`])+)'
)
_WORDS = re.compile(r"[()\[\]{},]|[^\s()\[\]{},]+")


def _tokens(text: str) -> list[tuple[str, str, int]]:
    """read.go's readToken: (kind, text, line), kind a punctuation character or newline, "s" a
    string, "i" an identifier, "c" a comment alone on its line or "e" one after tokens (each
    comment ends its line). A line without quotes is split at once (most of a go.mod); one
    with quotes is scanned token by token."""
    out: list[tuple[str, str, int]] = []
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        start = len(out)
        if '"' in line or "`" in line or "/*" in line:
            pos = 0
            while pos < len(line):
                match = _TOKEN.match(line, pos)
                kind = (match.lastgroup if match else None) or "bad"
                if kind == "bad" or match is None:
                    what = "/* */ comments" if kind == "bad" else repr(line[pos])
                    raise ValueError(
                        f"{number}: unexpected input: {what}, or an unterminated string"
                    )
                if kind == "comment":
                    out.append(("e" if len(out) > start else "c", match[0].rstrip("\r"), number))
                elif kind != "space":
                    out.append((match[0] if kind == "punct" else kind[0], match[0], number))
                pos = match.end()
        else:
            code, slashes, comment = line.partition("//")
            if not code.replace("\t", "").replace("\r", "").isprintable():
                raise ValueError(f"{number}: unexpected input character in {code.strip()!r}")
            out += [
                (w if len(w) == 1 and w in "()[]{}," else "i", w, number)
                for w in _WORDS.findall(code)
            ]
            if slashes:
                kind = "e" if len(out) > start else "c"
                out.append((kind, (slashes + comment).rstrip("\r"), number))
        ends_in_comment = len(out) > start and out[-1][0] in "ce"  # a comment ends its line
        if number < len(lines) and not ends_in_comment:
            out.append(("\n", "\n", number))
    return out


def _syntax(text: str) -> list[Line | Block]:
    """read.go's parseFile, parseStmt and parseLineBlock, comments attached."""
    toks, i = _tokens(text), 0
    stmts_: list[Line | Block] = []
    pending: list[str] = []  # a comment block right above the next statement

    def line_at(start: int) -> tuple[Line, int]:
        j, words = start, []
        while j < len(toks) and toks[j][0] not in "\nce":
            words.append(toks[j][1])
            j += 1
        found = Line(words, toks[start][2])
        if j < len(toks) and toks[j][0] == "e":
            found.suffix.append(toks[j][1])
        return found, j + 1

    while i < len(toks):
        kind = toks[i][0]
        if kind == "\n":
            pending, i = [], i + 1
        elif kind in "ce":
            pending.append(toks[i][1])
            i += 1
        else:
            first, after = line_at(i)
            if first.tokens[-1:] == ["("] and toks[after - 1][0] in "\ne":
                block, i = Block(first.tokens[:-1], [], pending), after
                comments: list[str] = []
                while True:
                    if i >= len(toks):
                        raise ValueError(f"{first.number}: syntax error (unterminated block)")
                    kind = toks[i][0]
                    if kind == ")":
                        i += 1
                        if i < len(toks) and toks[i][0] not in "\ne":
                            raise ValueError(f"{toks[i][2]}: expected newline after ')'")
                        i += 1
                        break
                    if kind == "\n":
                        if comments[-1:] != [""] and (comments or block.lines):
                            comments.append("")
                        i += 1
                    elif kind in "ce":
                        comments.append(toks[i][1])
                        i += 1
                    else:
                        inner, i = line_at(i)
                        inner.before, comments = comments, []
                        block.lines.append(inner)
                stmts_.append(block)
            else:
                if first.tokens[-2:] == ["(", ")"]:
                    first.tokens = first.tokens[:-2]
                    stmts_.append(Block(first.tokens, [], pending))
                else:
                    first.before = pending
                    stmts_.append(first)
                i = after
            pending = []
    return stmts_


def _unquote(token: str) -> str:
    if token[0] == "`":
        return token[1:-1]
    if token[0] != '"':
        if "'" in token:
            raise ValueError(f"unquoted string cannot contain quote: {token}")
        return token
    try:
        return str(json.loads(token))
    except ValueError:
        raise ValueError(f"invalid quoted string {token}") from None


def auto_quote(text: str) -> str:
    """x/mod's AutoQuote: quoted when the text would not read back as one token."""
    special = any(c in " \"'`" or not c.isprintable() for c in text) or (
        len(text) > 1 and any(c in "()[]{}," for c in text)
    )
    return json.dumps(text) if special or not text or "//" in text or "/*" in text else text


def is_local_path(path: str) -> bool:
    """x/mod's IsDirectoryPath: a replacement that is a directory, not a module."""
    local = path in (".", "..") or path.startswith(("./", "../", "/", ".\\", "..\\", "\\"))
    return local or bool(re.match(r"^[A-Za-z]:[/\\]", path))


def parse(text: str, strict: bool = True, work: bool = False) -> ModFile:
    """A go.mod (or, with `work`, a go.work). ValueError "LINE: what" when it cannot be read
    (strict), or for a syntax error (any mode)."""
    mod = ModFile()
    for stmt in _syntax(text):
        block = stmt if isinstance(stmt, Block) else None
        lines = stmt.lines if isinstance(stmt, Block) else [stmt]
        verb_prefix = stmt.verb if isinstance(stmt, Block) else []
        for line in lines:
            words = verb_prefix + line.tokens
            if not words:
                continue
            try:
                _directive(mod, words[0], words[1:], line, block, strict, work)
            except ValueError as exc:
                if strict or words[0] in ("module", "go", "require"):
                    raise ValueError(f"{line.number}: {words[0]}: {exc}") from None
    return mod


def _directive(
    mod: ModFile, verb: str, args: list[str], line: Line, block: Block | None, strict: bool,
    work: bool,
) -> None:  # fmt: skip
    known = ("go", "toolchain", "use", "replace", "godebug") if work else (
        "go", "toolchain", "module", "require", "exclude", "replace", "retract", "godebug",
        "tool", "ignore",
    )  # fmt: skip
    if verb not in known and strict:
        raise ValueError("unknown directive")
    if verb not in known or (
        not strict and verb not in ("go", "toolchain", "module", "require", "retract")
    ):
        return
    if verb == "module":
        if mod.module is not None or len(args) != 1:
            raise ValueError("repeated module statement or usage: module module/path")
        mod.module = _unquote(args[0])
        found = _DEPRECATED.search(line.comment(block))
        mod.deprecated = found[1] if found else None
    elif verb == "go":
        if mod.go is not None or len(args) != 1:
            raise ValueError("repeated go statement or not one argument")
        lax = None if strict else _LAX_GO.match(args[0])
        if not _GO_VERSION.match(args[0]) and lax is None:
            raise ValueError(f"invalid go version {args[0]!r}: must match format 1.23.0")
        mod.go = args[0] if _GO_VERSION.match(args[0]) or lax is None else lax[1]
    elif verb == "toolchain":
        if mod.toolchain is not None or len(args) != 1 or not _TOOLCHAIN.match(args[0]):
            raise ValueError("repeated or invalid toolchain: must match format go1.23.0")
        mod.toolchain = args[0]
    elif verb in ("require", "exclude"):
        if len(args) != 2:
            raise ValueError(f"usage: {verb} module/path v1.2.3")
        path, version = _unquote(args[0]), _unquote(args[1])
        if verb == "exclude":
            mod.excludes.append((path, version))
        else:
            words = line.suffix[0][2:].split() if line.suffix else []
            indirect = words == ["indirect"] or (words[:1] == ["indirect;"] and len(words) > 1)
            mod.requires.append(Require(path, version, indirect, line.number))
    elif verb == "replace":
        arrow = args.index("=>") if "=>" in args else -1
        old, new = args[:arrow], args[arrow + 1 :]
        if arrow < 0 or len(old) not in (1, 2) or len(new) not in (1, 2):
            raise ValueError("usage: replace module/path [v1.2.3] => other/module v1.4")
        new_path = _unquote(new[0])
        if len(new) == 1 and not is_local_path(new_path):
            raise ValueError(f"replacement module {new_path!r} without version")
        versions = [_unquote(old[1]) if old[1:] else None, _unquote(new[1]) if new[1:] else None]
        mod.replaces.append(
            Replace(_unquote(old[0]), versions[0], new_path, versions[1], line.number)
        )
    elif verb == "retract":
        if args[:1] == ["["]:
            if len(args) != 5 or args[2] != "," or args[4] != "]":
                raise ValueError("expected '[' low ',' high ']'")
            low, high = _unquote(args[1]), _unquote(args[3])
        elif len(args) != 1:
            raise ValueError("expected '[' or version")
        else:
            low = high = _unquote(args[0])
        mod.retracts.append((low, high, line.comment(block)))
    elif verb == "use":
        if len(args) != 1:
            raise ValueError("usage: use local/dir")
        mod.uses.append((_unquote(args[0]), line.number))
