"""Storage: bytes per sample of the `power` dataset as written, against the same rows as nvidia-smi CSV."""

from __future__ import annotations

from pathlib import Path

import pyarrow.csv as pacsv
import pyarrow.compute as pc
import pyarrow.dataset as ds

from bench.measure import save
from bench.throughput import DATE, bench_size  # noqa: F401  (same generated data)


def main(data_dir: Path) -> dict:
    files = list((data_dir / "power").rglob("*.parquet"))
    dataset = ds.dataset(files, format="parquet")
    rows = dataset.count_rows()
    parquet_bytes = sum(f.stat().st_size for f in files)
    # The usual site log: nvidia-smi --query-gpu=timestamp,index,uuid,power.draw --format=csv -lms 100
    sample = dataset.head(1_000_000, columns=["ts", "gpu", "gpu_uuid", "power_w"])
    text = sample.set_column(0, "timestamp", pc.strftime(sample.column("ts"), format="%Y/%m/%d %H:%M:%S.%f"))
    csv_path = data_dir.parent / "nvidia-smi-sample.csv"
    pacsv.write_csv(text, csv_path)
    csv_bytes_per_sample = csv_path.stat().st_size / sample.num_rows
    payload = {
        "data_dir": str(data_dir),
        "samples": rows,
        "parquet_bytes": parquet_bytes,
        "parquet_bytes_per_sample": parquet_bytes / rows,
        "nvidia_smi_csv_bytes_per_sample": csv_bytes_per_sample,
        "csv_over_parquet": csv_bytes_per_sample / (parquet_bytes / rows),
    }
    print(f"power dataset: {rows:,} samples, {parquet_bytes / 2**20:.0f} MiB, {payload['parquet_bytes_per_sample']:.2f} B/sample; "
          f"as nvidia-smi CSV {csv_bytes_per_sample:.1f} B/sample ({payload['csv_over_parquet']:.1f}x larger)")
    print(f"written {save('storage', payload)}")
    return payload
