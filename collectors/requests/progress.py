"""A byte-count progress bar for bulk ingestion, shown only when stderr is a terminal."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn


@contextmanager
def byte_progress(total_bytes: int, label: str, enabled: bool | None = None) -> Iterator[Callable[[int], None]]:
    """Yields ``advance(n_bytes)``; a no-op when not on a TTY (logs, CI, pipes)."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield lambda n: None
        return
    columns = ("{task.description}", BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total_bytes)
        yield lambda n: bar.advance(task, n)
