"""Building blocks of a section: charts, tables with units, notes and drill-down SQL."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reports.data import Reader, RunHistory


@dataclass
class Chart:
    name: str
    chart: Any  # an Altair top-level chart
    caption: str = ""


@dataclass
class Table:
    columns: list[str]  # header text, units included: "mean (W)"
    rows: list[list]
    caption: str = ""


@dataclass
class Note:
    text: str
    kind: str = "info"  # info | missing | warn


@dataclass
class Code:
    label: str
    sql: str


@dataclass
class Collapsed:
    """Blocks folded under a one-line summary (``<details>``): detail a reader opens only when
    the summary says it matters, such as the checks that passed."""

    summary: str
    blocks: list = field(default_factory=list)


@dataclass
class Section:
    key: str
    title: str
    blocks: list = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    headline: dict = field(default_factory=dict)
    error: str | None = None

    def not_available(self, why: str) -> None:
        """Record (and show) that part of the section waits for a table."""
        self.missing.append(why)
        self.blocks.append(Note(f"Not available yet: {why}.", "missing"))

    def add(self, *blocks) -> None:
        self.blocks.extend(b for b in blocks if b is not None)

    @property
    def charts(self) -> list[Chart]:
        return [b for b in self.blocks if isinstance(b, Chart)]


@dataclass
class Ctx:
    reader: Reader
    data_dir: Path
    date: str
    history: RunHistory

    def sql_date(self) -> str:
        return f"DATE '{self.date}'"

    def endpoint_gpus(self) -> str | None:
        """A relation (endpoint, host, gpu, from_ns, to_ns) of each endpoint's GPUs while it held
        them during the report's day (gpu_assignments; the inventory's lists, held all day, in a
        catalog without it), or None when neither is there. Join samples on their instant."""
        day = f"epoch_ns({self.sql_date()}::TIMESTAMPTZ)"
        if self.reader.has("gpu_assignments", ("kind", "name", "host", "gpu", "from_ns", "to_ns")):
            return (f"SELECT name AS endpoint, host, gpu, from_ns, to_ns FROM gpu_assignments WHERE kind = 'endpoint' "
                    f"AND from_ns < {day} + 86400000000000 AND to_ns > {day}")
        if self.reader.has("inventory_gpus", ("endpoint", "host", "gpu")):
            return ("SELECT endpoint, host, gpu, -(2::BIGINT ** 62)::BIGINT AS from_ns, (2::BIGINT ** 62)::BIGINT AS to_ns "
                    "FROM inventory_gpus WHERE endpoint IS NOT NULL")
        return None


def num(value, digits: int = 1):
    """A float rounded for display and JSON (None and NaN stay None)."""
    if value is None:
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return value
    if math.isnan(f) or math.isinf(f):
        return None
    return round(f, digits)
