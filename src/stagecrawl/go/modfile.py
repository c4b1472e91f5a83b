"""go.mod and go.work as golang.org/x/mod's modfile reads them (read.go's lexer and comment
attachment, rule.go's directives), a directive's comment holding a retraction's rationale and
the module's `Deprecated:` paragraph. `strict`: the main module; otherwise a dependency's
go.mod, of which cmd/go reads only module, go, toolchain, require and retract."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache

_DEPRECATED = re.compile(r"(?s)(?:\A|\n\n)Deprecated: *(.*?)(?:\Z|\n\n)")
_GO_VERSION = re.compile(r"^([1-9][0-9]*)\.(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*))?([a-z]+[0-9]+)?$")
_LAX_GO = re.compile(r"^v?(([1-9][0-9]*)\.(0|[1-9][0-9]*))([^0-9].*)$")
_TOOLCHAIN = re.compile(r"^default$|^go1($|\.)")


@dataclass(slots=True)
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


@dataclass(slots=True)
class Block:
    verb: list[str]
    lines: list[Line]
    before: list[str] = field(default_factory=list)


@dataclass(slots=True)
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


_PUNCT = re.compile(r"[()\[\]{},]")


def _split(line: str, number: int, plain: bool = False) -> tuple[list[str], str]:
    """read.go's readToken over one line: its tokens and its `//` comment ("" for none). A
    line without quotes is split at once (most of a go.mod); one with quotes is scanned.
    `plain`: the whole text has no quote, no `/*` and no unprintable character (checked once
    for the file: a go.mod parse is most of a Go version's collect)."""
    if plain or ('"' not in line and "`" not in line and "/*" not in line):
        code, slashes, comment = line.partition("//")
        if not plain and not code.replace("\t", "").replace("\r", "").isprintable():
            raise ValueError(f"{number}: unexpected input character in {code.strip()!r}")
        tokens = _WORDS.findall(code) if _PUNCT.search(code) else code.split()
        return tokens, (slashes + comment).rstrip("\r") if slashes else ""
    words: list[str] = []
    pos = 0
    while pos < len(line):
        match = _TOKEN.match(line, pos)
        kind = (match.lastgroup if match else None) or "bad"
        if kind == "bad" or match is None:
            what = "/* */ comments" if kind == "bad" else repr(line[pos])
            raise ValueError(f"{number}: unexpected input: {what}, or an unterminated string")
        if kind == "comment":
            return words, match[0].rstrip("\r")
        if kind != "space":
            words.append(match[0])
        pos = match.end()
    return words, ""


def _syntax(text: str) -> list[Line | Block]:
    """read.go's parseFile and parseLineBlock: statements and blocks, comments attached (the
    comment lines right above, a blank line detaching them; the comment on the line)."""
    stmts: list[Line | Block] = []
    pending: list[str] = []  # the comment lines right above the next statement
    plain = not any(c in text for c in ('"', "`", "/*")) and (
        text.replace("\t", "").replace("\r", "").replace("\n", "").isprintable()
    )
    lines = ((*_split(line, n, plain), n) for n, line in enumerate(text.split("\n"), start=1))
    for words, comment, number in lines:
        if not words:
            pending = [*pending, comment] if comment else []
            continue
        line, pending = Line(words, number, pending, [comment] if comment else []), []
        if words[-1] != "(":
            stmts.append(Block(words[:-2], [], line.before) if words[-2:] == ["(", ")"] else line)
            continue
        block, inside = Block(words[:-1], [], line.before), list[str]()  # after "(": not its
        for words, comment, number in lines:
            if words[:1] == [")"]:
                if len(words) > 1:
                    raise ValueError(f"{number}: syntax error (expected newline after ')')")
                break
            if words:
                block.lines.append(Line(words, number, inside, [comment] if comment else []))
                inside = []
            elif comment or (inside[-1:] != [""] and (inside or block.lines)):
                inside.append(comment)  # "": a blank line, kept as read.go keeps it
        else:
            raise ValueError(f"{line.number}: syntax error (unterminated block)")
        stmts.append(block)
    return stmts


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
            if len(verb_prefix) == 1:  # `require (`: a line's tokens are its arguments as read
                verb, args = verb_prefix[0], line.tokens
            elif words := verb_prefix + line.tokens:
                verb, args = words[0], words[1:]
            else:
                continue
            try:
                _directive(mod, verb, args, line, block, strict, work)
            except ValueError as exc:
                if strict or verb in ("module", "go", "require"):
                    raise ValueError(f"{line.number}: {verb}: {exc}") from None
    return mod


@lru_cache(maxsize=128)  # ~10 texts a unit of 30 versions, for the units in flight at once
def parse_dependency(text: str) -> ModFile:
    """A dependency's go.mod as `parse(text, strict=False)` reads it, once while it recurs: a
    module's versions repeat their go.mod (prometheus on the proxy: 212 versions, 69 distinct
    texts; golang.org/x/mod: 41, 20), and the parse was most of a version's collect. Shared:
    nobody may change what it returns."""
    return parse(text, strict=False)


_WORK_VERBS = frozenset(("go", "toolchain", "use", "replace", "godebug"))
_MOD_VERBS = frozenset(
    ("go", "toolchain", "module", "require", "exclude", "replace", "retract", "godebug", "tool",
     "ignore")
)  # fmt: skip


def _directive(
    mod: ModFile, verb: str, args: list[str], line: Line, block: Block | None, strict: bool,
    work: bool,
) -> None:  # fmt: skip
    if verb == "require" and not work and len(args) == 2:  # most lines of a go.mod: at once
        words = line.suffix[0][2:].split() if line.suffix else []
        indirect = words == ["indirect"] or (words[:1] == ["indirect;"] and len(words) > 1)
        mod.requires.append(Require(_unquote(args[0]), _unquote(args[1]), indirect, line.number))
        return
    known = _WORK_VERBS if work else _MOD_VERBS
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
    elif verb in ("require", "exclude"):  # a require of two arguments was read above
        if len(args) != 2:
            raise ValueError(f"usage: {verb} module/path v1.2.3")
        mod.excludes.append((_unquote(args[0]), _unquote(args[1])))
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
