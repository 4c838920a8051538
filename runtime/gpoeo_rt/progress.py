"""Progress bars (rich, on stderr) for work that takes more than a few seconds: shown while a terminal watches,
silent otherwise (a pipe, a file, the journal, CI), so logs keep only the results."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import TracebackType
from typing import Any

Advance = Callable[[int, int], None]  # (done, total)


def _quiet(done: int, total: int) -> None:
    """The advance callback when nobody watches."""


class Bars:
    """`with Bars() as bars: work(progress=bars.task("bench"))`: one bar per task, removed when done."""

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._progress: Any = None

    def __enter__(self) -> Bars:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._progress.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def task(self, description: str, total: int | None = None) -> Advance:
        """A new bar; call the returned function with (done, total) as work completes."""
        progress = self._progress
        if progress is None:
            return _quiet
        task_id = progress.add_task(description, total=total)

        def advance(done: int, total: int) -> None:
            progress.update(task_id, completed=done, total=total)

        return advance
