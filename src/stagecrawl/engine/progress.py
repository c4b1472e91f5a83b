"""Progress for long work: a rich bar on a terminal, periodic log lines otherwise."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

log = logging.getLogger("stagecrawl.progress")


class ProgressReporter:
    def __init__(
        self,
        title: str,
        *,
        console: Console | None = None,
        quiet: bool = False,
        interval: float = 5.0,  # off a terminal: a line this often (the guide: ≤ 10 s)
        force_terminal: bool | None = None,
    ) -> None:
        self.title = title
        self.console = console or Console(stderr=True)
        self.quiet = quiet
        self.interval = interval
        is_tty = sys.stderr.isatty() if force_terminal is None else force_terminal
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._last_log = 0.0
        self.started = time.monotonic()
        if not quiet and is_tty:
            self._bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[detail]}"),
                console=self.console,
                transient=False,
            )

    def __enter__(self) -> ProgressReporter:
        if self._bar is not None:
            self._bar.start()
            self._task = self._bar.add_task(self.title, total=None, detail="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def update(self, done: int, total: int | None, detail: Mapping[str, object]) -> None:
        text = " ".join(f"{k}={v}" for k, v in detail.items() if v not in (0, "", None))
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=done, total=total, detail=text)
            return
        now = time.monotonic()
        if not self.quiet and now - self._last_log >= self.interval:
            self._last_log = now
            of = f"/{total}" if total is not None else ""
            log.info("%s: %d%s done %s", self.title, done, of, text)


def summary_table(title: str, rows: Mapping[str, object]) -> Table:
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value", justify="right")
    for key, value in rows.items():
        table.add_row(escape(key), escape(str(value)))
    return table
