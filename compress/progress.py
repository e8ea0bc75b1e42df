"""Rich progress on stderr (stdout stays clean for --json): a line per phase, bars for long loops."""
from __future__ import annotations

import contextlib
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

import sys

# Rich falls back to 80 columns when stderr is not a terminal (CI logs, pipes): the run table needs more.
console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)


class Progress:
    def __init__(self, enabled: bool = True):
        self.enabled = enabled

    @contextlib.contextmanager
    def phase(self, name: str):
        t = time.perf_counter()
        if self.enabled:
            console.print(f"[bold cyan]>[/] {name} ...")
        yield
        if self.enabled:
            console.print(f"  [green]done[/] {name} in {time.perf_counter() - t:.1f} s")

    def note(self, text: str) -> None:
        if self.enabled:
            console.print(f"  [yellow]note[/] {text}")

    @contextlib.contextmanager
    def task(self, description: str, total: int):
        """Yields `advance()`; shows a bar with count, elapsed and remaining time."""
        if not self.enabled:
            yield lambda: None
            return
        if not console.is_terminal:
            count = [0]
            line = _LogLine(description)

            def advance() -> None:
                count[0] += 1
                line.maybe(f"{count[0]}/{total}")

            yield advance
            return
        with RichProgress(
            TextColumn("  {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        ) as bar:
            tid = bar.add_task(description, total=total)
            yield lambda: bar.advance(tid)

    @contextlib.contextmanager
    def callback(self, description: str):
        """Yields `update(done, total, message="")` for algorithms that report their own progress."""
        if not self.enabled:
            yield lambda *args, **kwargs: None
            return
        if not console.is_terminal:
            line = _LogLine(description)
            yield lambda done, total, message="": line.maybe(f"{done}/{total} {message}".rstrip())
            return
        with RichProgress(
            TextColumn("  {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        ) as bar:
            tid = bar.add_task(description, total=None)

            def update(done: int, total: int, message: str = "") -> None:
                bar.update(tid, completed=done, total=total, description=f"{description}: {message}"[:90])

            yield update


class _LogLine:
    """Bars need a terminal: in a log (pipe, file, CI) rich shows nothing until a loop ends, which for a
    VPTQ fit is many minutes of silence. There, one plain line at most every LOG_EVERY_S seconds instead."""

    LOG_EVERY_S = 30.0

    def __init__(self, description: str):
        self.description = description
        self.start = self.last = time.perf_counter()

    def maybe(self, state: str) -> None:
        now = time.perf_counter()
        if now - self.last >= self.LOG_EVERY_S:
            self.last = now
            console.print(f"  {self.description}: {state} ({now - self.start:.0f} s)", markup=False, highlight=False)
