"""Bytes per sample of a real NVML capture laid out as the collector writes it (no GPU needed).

    python bench/capture_storage.py ../shared/data/h200-capture-2

The capture's ``power_samples.csv`` (NVML field reads, ~10 ms apart) is thinned to the collector's
100 ms field rows and its ``driver_buffer.csv`` becomes the buffer rows, then the table is encoded
with the collector's Parquet options, and with floats always dictionary-encoded for comparison.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from bench.storage import column_bytes  # noqa: E402
from collectors.atomic import parquet_options  # noqa: E402
from collectors.nvml.rows import BUFFER, FIELD, rows_to_table  # noqa: E402

FIELD_INTERVAL_NS = 100_000_000
SLOW_EVERY = 10
"""The collector reads clocks, utilisation, memory and temperature once a second."""


def collector_rows(capture: Path) -> list[tuple]:
    rows = []
    last = None
    with open(capture / "power_samples.csv") as fh:
        for r in csv.DictReader(fh):
            t = int(r["t_ns"])
            if last is not None and t - last < FIELD_INTERVAL_NS:
                continue
            last = t
            slow = (float(r["sm_clock_mhz"]), float(r["util_gpu_pct"]), float(r["mem_used_mib"]),
                    float(r["temp_c"]), None) if len(rows) % SLOW_EVERY == 0 else (None,) * 5
            rows.append((t, int(r["gpu"]), int(r["power_instant_mw"]) / 1000, int(r["power_average_mw"]) / 1000,
                         None, *slow, FIELD))
    with open(capture / "driver_buffer.csv") as fh:
        rows += [(int(r["driver_ts_us"]) * 1000, int(r["gpu"]), int(r["power_mw"]) / 1000,
                  None, None, None, None, None, None, None, BUFFER) for r in csv.DictReader(fh)]
    return rows


def encoded_bytes(table: pa.Table, options: dict) -> tuple[int, Counter]:
    """File size and compressed bytes per column of ``table`` written with ``options``."""
    buf = io.BytesIO()
    pq.write_table(table, buf, **options)
    return len(buf.getvalue()), column_bytes([io.BytesIO(buf.getvalue())])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("capture", type=Path)
    a = ap.parse_args()
    table = rows_to_table(collector_rows(a.capture), "capture", {})
    n = table.num_rows
    result = {"capture": a.capture.name, "rows": n}
    for label, options in (("collector_layout", parquet_options(table.schema, table)),
                           ("floats_as_dictionary", parquet_options(table.schema))):
        total, per = encoded_bytes(table, options)
        result[label] = {"bytes_per_sample": total / n,
                         "column_bytes_per_sample": {k: v / n for k, v in per.most_common()}}
        print(f"{label:<22} {total / n:.3f} B/sample  " + ", ".join(f"{k} {v / n:.3f}" for k, v in per.most_common(3)))
    from bench.measure import save

    print(f"written {save('capture-storage', result)}")


if __name__ == "__main__":
    main()
