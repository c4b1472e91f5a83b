"""Where an SCA command's report goes, for every registry's SCA commands.

The report goes to stdout whatever its format (a table included) or to `--output FILE`
(written atomically: a reader never sees half a report); logs and progress stay on stderr.
In a terminal a table is drawn to the terminal's width, cells folded, never cut; in a pipe or
a file it is tab-separated whole lines. `-q` prints nothing when the command succeeds.
"""

from __future__ import annotations

import errno
import io
import os
import secrets
import shutil
import stat
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from stagecrawl.cli.common import state
from stagecrawl.errors import InputError, StorageError
from stagecrawl.secrets import redact

OutputOption = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        help="Write the report to FILE (atomically) instead of stdout.",
        metavar="FILE",
    ),
]


def check_format(fmt: str, allowed: Sequence[str]) -> str:
    if fmt not in allowed:
        raise InputError(f"--format must be one of {', '.join(allowed)}, not {fmt!r}")
    return fmt


def table_text(
    columns: Sequence[str], rows: Sequence[Sequence[str]], to_terminal: bool | None = None
) -> str:
    """A table for people in a terminal; tab-separated whole lines anywhere else."""
    if to_terminal is None:
        to_terminal = sys.stdout.isatty()
    if not to_terminal:
        lines = ["\t".join(columns), *("\t".join(c.replace("\t", " ") for c in r) for r in rows)]
        return "\n".join(lines) + "\n"
    table = Table()
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    buffer = io.StringIO()
    width = shutil.get_terminal_size().columns
    Console(file=buffer, width=width, color_system=None, highlight=False).print(table)
    return buffer.getvalue()


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder and a rename. The
    file gets the permissions `> FILE` would give it: a new one follows the umask (and a
    folder's default ACL), one already there keeps its own mode."""
    folder = path.parent if str(path.parent) else Path(".")
    try:
        kept = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:  # not there yet (or unreadable: then the umask decides)
        kept = None
    try:
        handle, temporary = _create_beside(folder, path.name)
        if kept is not None:
            os.fchmod(handle, kept)
    except OSError as exc:  # the error would name the temporary file, not --output
        raise StorageError(f"cannot write --output {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise StorageError(f"cannot write --output {path}: {exc.strerror or exc}") from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _create_beside(folder: Path, name: str) -> tuple[int, str]:
    """A new file of a name nobody has, opened for writing: made with mode 0666 for the kernel
    to apply the umask to (tempfile.mkstemp makes 0600 files, whatever the umask)."""
    for _ in range(100):
        temporary = str(folder / f".{name}.{secrets.token_hex(6)}.tmp")
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
            return os.open(temporary, flags, 0o666), temporary
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(folder))


def check_output(path: Path | None) -> None:
    """Refuse an --output whose folder does not exist before any work is done."""
    if path is not None and not (path.parent if str(path.parent) else Path(".")).is_dir():
        raise InputError(f"--output {path}: the folder {path.parent} does not exist")
    if path is not None and path.is_dir():
        raise InputError(f"--output {path} is a folder: give the report's file name")


def deliver(text: str, output: Path | None, code: int) -> None:
    """The report to --output, or to stdout unless -q and the command succeeded."""
    text = redact(text)
    if output is not None:
        atomic_write(output, text)
        return
    if state["quiet"] and code == 0:
        return
    sys.stdout.write(text)
    sys.stdout.flush()
