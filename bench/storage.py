"""Storage: bytes per sample of the `power` dataset as written, against the same rows as nvidia-smi CSV.

Also per column: the bytes each takes in the files, and the order-0 entropy of its values or of
their successive differences (whichever is lower), measured on a few GPU-days: what an ideal
entropy coder without a signal model would need. It tells how far the encoding is from the
information in the data, rather than from a number.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from collectors.contract import epoch_ns

ENTROPY_FILES = 4
"""Files (one GPU-day each from the simulator) the entropy is measured on."""

SIGNAL_COLUMNS = ("ts", "power_w", "power_avg_w")


def column_bytes(files: list) -> Counter:
    """Compressed bytes of each column over ``files``, paths or open buffers (from the footers)."""
    sizes: Counter = Counter()
    for f in files:
        md = pq.ParquetFile(f).metadata
        for rg in range(md.num_row_groups):
            group = md.row_group(rg)
            for c in range(group.num_columns):
                sizes[group.column(c).path_in_schema] += group.column(c).total_compressed_size
    return sizes


def _entropy_bits(values: np.ndarray) -> float:
    _, counts = np.unique(values, return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum())


def entropy_bits(files: list[Path]) -> dict[str, float]:
    """Per signal column: min(order-0 entropy of values, of differences), bits per sample,
    over each (file, GPU) trace in time order, weighted by rows."""
    acc = {c: [0.0, 0] for c in SIGNAL_COLUMNS}
    for f in files:
        table = pq.read_table(f, columns=["gpu", *SIGNAL_COLUMNS])
        for gpu in pc.unique(table["gpu"]).to_pylist():
            t = table.filter(pc.equal(table["gpu"], gpu)).sort_by("ts")
            for c in SIGNAL_COLUMNS:
                v = epoch_ns(t[c]).to_numpy() if c == "ts" else t[c].drop_null().to_numpy()
                if len(v) < 2:
                    continue
                bits = _entropy_bits(np.diff(v)) if c == "ts" else min(_entropy_bits(v), _entropy_bits(np.diff(v)))
                acc[c][0] += bits * len(v)
                acc[c][1] += len(v)
    return {c: s / n for c, (s, n) in acc.items() if n}


def main(data_dir: Path) -> dict:
    from bench.measure import save  # psutil: not needed by the helpers a GPU host imports

    files = sorted((data_dir / "power").rglob("*.parquet"))
    dataset = ds.dataset(files, format="parquet")
    rows = dataset.count_rows()
    parquet_bytes = sum(f.stat().st_size for f in files)
    per_column = {k: v / rows for k, v in column_bytes(files).most_common()}
    bits = entropy_bits(files[:ENTROPY_FILES])
    # The usual site log: nvidia-smi --query-gpu=timestamp,index,uuid,power.draw --format=csv -lms 100
    sample = dataset.head(1_000_000, columns=["ts", "gpu", "gpu_uuid", "power_w"])
    text = sample.set_column(0, "timestamp", pc.strftime(sample.column("ts"), format="%Y/%m/%d %H:%M:%S.%f"))
    csv_path = data_dir.parent / "nvidia-smi-sample.csv"
    pacsv.write_csv(text, csv_path)
    csv_bytes_per_sample = csv_path.stat().st_size / sample.num_rows
    payload = {
        "data_dir": str(data_dir),
        "samples": rows,
        "ts_type": str(pq.read_schema(files[0]).field("ts").type),
        "parquet_bytes": parquet_bytes,
        "parquet_bytes_per_sample": parquet_bytes / rows,
        "column_bytes_per_sample": per_column,
        "entropy_bytes_per_sample": {c: b / 8 for c, b in bits.items()},
        "nvidia_smi_csv_bytes_per_sample": csv_bytes_per_sample,
        "csv_over_parquet": csv_bytes_per_sample / (parquet_bytes / rows),
    }
    print(f"power dataset: {rows:,} samples, {parquet_bytes / 2**20:.0f} MiB, {payload['parquet_bytes_per_sample']:.2f} B/sample; "
          f"as nvidia-smi CSV {csv_bytes_per_sample:.1f} B/sample ({payload['csv_over_parquet']:.1f}x larger)")
    print(f"{'column':<16} {'B/sample':>9} {'entropy B':>10}")
    for name, b in per_column.items():
        e = payload["entropy_bytes_per_sample"].get(name)
        print(f"{name:<16} {b:>9.3f} {'' if e is None else f'{e:>10.3f}'}")
    floor = sum(payload["entropy_bytes_per_sample"].values()) + sum(b for c, b in per_column.items() if c not in SIGNAL_COLUMNS)
    payload["entropy_floor_bytes_per_sample"] = floor
    print(f"order-0 entropy of ts, power_w, power_avg_w plus the other columns as stored: {floor:.2f} B/sample")
    print(f"written {save('storage', payload)}")
    return payload
