"""Storage of the `power` dataset as the NVML collector writes it, on a real GPU (run on the GPU host).

    python bench/collector_storage.py --out OUTDIR [--seconds 150] [--gpu 0]

Runs ``python -m collectors.nvml`` at its defaults (100 ms field reads, the driver's ~20 ms buffer
drained) while PyTorch alternates bf16 matmuls and idle (bench/device_proof.py's load), stops it with
SIGTERM, compacts the hour as the running collector would once it closes, and reports bytes per
sample of the compacted files per source and per column, with the order-0 entropy of ts, power_w
and power_avg_w (bench/storage.py). Needs pyarrow, numpy, torch and pynvml only. Reads no GPU
setting it could change; sets none.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from bench.device_proof import run_load  # noqa: E402
from bench.storage import column_bytes, entropy_bits  # noqa: E402
from collectors.nvml.compact import compact_power  # noqa: E402


def _read(files: list[Path], columns: list[str] | None = None) -> pa.Table:
    """The files' own columns (no hive keys inferred from the folders)."""
    return pa.concat_tables([pq.ParquetFile(f).read(columns=columns) for f in files]).unify_dictionaries()


def measure(data: Path) -> dict:
    files = sorted((data / "power").rglob("*.parquet"))
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    table = _read(files, ["source", "ts"]) if files else None
    by_source = {}
    if table is not None:
        counts = table.group_by("source").aggregate([("ts", "count")])
        by_source = dict(zip(counts["source"].cast("string").to_pylist(), counts["ts_count"].to_pylist(), strict=False))
    total = sum(f.stat().st_size for f in files)
    per_column = {k: v / rows for k, v in column_bytes(files).most_common()}
    return {
        "files": [str(f.relative_to(data)) for f in files],
        "rows": rows,
        "rows_by_source": by_source,
        "bytes": total,
        "bytes_per_sample": total / rows if rows else None,
        "column_bytes_per_sample": per_column,
        "entropy_bytes_per_sample": {c: b / 8 for c, b in entropy_bits_by_source(files).items()},
        "ts_type": str(pq.read_schema(files[0]).field("ts").type) if files else None,
    }


def entropy_bits_by_source(files: list[Path]) -> dict[str, float]:
    """bench.storage.entropy_bits per source (each source is its own trace), keyed 'source:column'."""
    out = {}
    table = _read(files)
    for source in pc.unique(table["source"].cast("string")).to_pylist():
        part = table.filter(pc.equal(table["source"].cast("string"), source))
        tmp = Path(f"/tmp/collector-storage-{source}.parquet")
        pq.write_table(part, tmp)
        out |= {f"{source}:{c}": b for c, b in entropy_bits([tmp]).items()}
        tmp.unlink()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=150)
    ap.add_argument("--gpu", type=int, default=0)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    data = Path("/tmp/wattline-storage/data")
    shutil.rmtree(data, ignore_errors=True)  # this run's files only
    env = dict(os.environ, PYTHONPATH=f"{REPO}:{os.environ.get('PYTHONPATH', '')}", PYTHONUNBUFFERED="1")
    log = open(a.out / "collector-storage.log", "w")
    col = subprocess.Popen([sys.executable, "-m", "collectors.nvml", "--host", "h200", "--gpus", str(a.gpu),
                            "--data-dir", str(data)], env=env, cwd=REPO, stderr=log, stdout=log)
    time.sleep(4.0)
    run_load(a.gpu, a.seconds, 3.0, 2.0)
    time.sleep(2.0)
    col.send_signal(signal.SIGTERM)
    exit_code = col.wait(timeout=60)
    before = measure(data)
    compacted = compact_power(data, "h200", now_unix_s=time.time() + 7200)  # as if the hour had closed
    after = measure(data)
    result = {"collector_exit_code": exit_code, "load_s": a.seconds, "as_flushed": before,
              "compacted_hours": compacted.hours, "after_compaction": after}
    (a.out / "collector-storage.json").write_text(json.dumps(result, indent=1))
    for f in after["files"]:  # the compacted file itself, for a closer look anywhere
        shutil.copy(data / f, a.out / Path(f).name)
    print(json.dumps({k: v for k, v in result.items() if k != "as_flushed"} | {"as_flushed_bytes_per_sample": before["bytes_per_sample"]}, indent=1))


if __name__ == "__main__":
    main()
