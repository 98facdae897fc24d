"""In-memory rows between samples and Parquet: plain tuples appended by sampler threads, a table at flush.

Tuples keep the per-sample cost of the hot loop to one ``list.append``; the columnar conversion
happens once per flush on the main thread.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.compute as pc

from collectors.contract import POWER, TS, conform

FIELD = "nvml-field"
BUFFER = "nvml-buffer"

# Row tuple layout; the contract's other columns (host, gpu_uuid) are added per flush.
ROW_COLUMNS = (
    "ts", "gpu", "power_w", "power_avg_w", "energy_j",
    "sm_clock_mhz", "gpu_util_pct", "mem_used_mib", "temp_c", "power_limit_w", "source",
)
_TYPES = {f.name: f.type for f in POWER} | {"ts": TS}  # rows carry ns ints; conform() converts


class RowBuffer:
    """Append-only list of row tuples, swapped out whole by the flusher."""

    def __init__(self) -> None:
        self._rows: list[tuple] = []
        self._lock = threading.Lock()

    def append(self, row: tuple) -> None:
        # under the lock: else a row appended to the list take() just swapped out could be lost
        with self._lock:
            self._rows.append(row)

    def extend(self, rows: list[tuple]) -> None:
        with self._lock:
            self._rows.extend(rows)

    def take(self) -> list[tuple]:
        with self._lock:
            rows, self._rows = self._rows, []
        return rows

    def __len__(self) -> int:
        return len(self._rows)


def rows_to_table(rows: list[tuple], host: str, uuids: dict[int, str]) -> pa.Table:
    """Row tuples → a table that follows the `power` contract (sorted by gpu, source, ts)."""
    cols = list(zip(*rows, strict=False)) if rows else [[] for _ in ROW_COLUMNS]
    arrays = {}
    for name, values in zip(ROW_COLUMNS, cols, strict=False):
        if name == "source":
            arrays[name] = pa.array(values, pa.string()).dictionary_encode()
        else:
            arrays[name] = pa.array(values, _TYPES[name])
    n = len(rows)
    arrays["host"] = pa.array([host] * n, pa.string())
    arrays["gpu_uuid"] = pa.array([uuids.get(g) for g in cols[1]] if n else [], pa.string())
    table = pa.table(arrays)
    table = conform(table, POWER, where="nvml collector rows")
    return sort_power(table)


def sort_power(table: pa.Table) -> pa.Table:
    """Sort by (gpu, source, ts): the order readers filter on. (Arrow cannot sort dictionary columns directly.)"""
    if table.num_rows == 0:
        return table
    keys = pa.table({"gpu": table.column("gpu"), "source": table.column("source").cast(pa.string()),
                     "ts": table.column("ts")})
    order = pc.sort_indices(keys, sort_keys=[("gpu", "ascending"), ("source", "ascending"), ("ts", "ascending")])
    return table.take(order)
