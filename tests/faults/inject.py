"""Fault injectors: each turns a good file (or data dir) into one specific kind of bad input.

Shared by every ``tests/faults/test_*.py``; add collector or request-log injectors here too.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from collectors.contract import TS, epoch_ns
from collectors.parquet_sink import write_dataset
from tests.builders import day_start_ns


def truncate_footer(path: Path, cut: int = 20) -> bytes:
    """Cut the last ``cut`` bytes (the footer's length and magic), as a writer killed mid-close
    or a partial copy would; returns the bytes left."""
    data = path.read_bytes()[:-cut]
    path.write_bytes(data)
    return data


def retype_column(path: Path, column: str, to: pa.DataType) -> None:
    """Rewrite the file with ``column`` cast to ``to`` (e.g. float32 power written as int32)."""
    table = pq.read_table(path)
    i = table.schema.get_field_index(column)
    pq.write_table(table.set_column(i, column, table.column(column).cast(to)), path)


def add_column(path: Path, name: str, value=0) -> None:
    """Rewrite the file with one more column than the contract has (a newer writer's field)."""
    table = pq.read_table(path)
    pq.write_table(table.append_column(name, pa.array([value] * table.num_rows)), path)


def copy_beside(path: Path, name: str) -> Path:
    """A byte-identical copy in the same partition (an importer or `cp` run twice)."""
    target = path.with_name(name)
    shutil.copyfile(path, target)
    return target


def rewrite_same_rows(path: Path, name: str) -> Path:
    """The same rows in a new file with different bytes (re-imported with other writer settings)."""
    target = path.with_name(name)
    pq.write_table(pq.read_table(path), target, compression="snappy", row_group_size=100)
    return target


def write_requests_and_job_events(data_dir):
    """Clean input: two requests and two training steps on tests.builders.DAY, so every raw
    dataset has a file (requests/.../requests.parquet, job_events/.../steps.parquet)."""
    t0 = day_start_ns()
    ts = lambda offsets_s: pa.array([t0 + int(o * 1e9) for o in offsets_s], pa.int64()).cast(TS)  # noqa: E731
    requests = pa.table({
        "request_id": ["r1", "r2"], "endpoint": ["ep-a", "ep-a"], "arrival_ts": ts([1, 2]),
        "prefill_start_ts": ts([1.1, 2.1]), "first_token_ts": ts([1.5, 2.5]), "end_ts": ts([3, 4]),
        "prompt_tokens": pa.array([1000, 2000], pa.int32()), "output_tokens": pa.array([100, 200], pa.int32()),
        "status": ["ok", "ok"],
    })
    steps = pa.table({
        "job": ["job-a"] * 2, "host": ["train-0"] * 2, "step": pa.array([1, 2], pa.int64()), "kind": ["step"] * 2,
        "start_ts": ts([0, 2]), "end_ts": ts([2, 4]), "tokens": pa.array([4096, 4096], pa.int64()),
    })
    write_dataset(requests, data_dir, "requests", prefix="requests", unique_names=False)
    write_dataset(steps, data_dir, "job_events", prefix="steps", unique_names=False)


def damage_data_pages(path: Path, column: str = "power_w") -> None:
    """Flip the bytes of one column's data pages, leaving the footer intact (bit rot, a bad
    disk block): the file passes a footer check and fails only when the data is read."""
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(pq.read_schema(path).get_field_index(column))
    data = bytearray(path.read_bytes())
    for i in range(chunk.data_page_offset + 5, chunk.data_page_offset + chunk.total_compressed_size - 2):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


# -- collector faults (items 1-3) ----------------------------------------------------------------
SOURCE_OF = {"field": "nvml-field", "buffer": "nvml-buffer"}


def served_samples(log: Path) -> dict[tuple[int, str, int], float]:
    """What the fake NVML handed out (its ``served_log``): {(gpu, source, ts_ns): wall time served}."""
    out: dict[tuple[int, str, int], float] = {}
    if not Path(log).exists():
        return out
    for line in Path(log).read_text().splitlines():
        kind, gpu, ts_us, wall = line.split()
        out.setdefault((int(gpu), SOURCE_OF[kind], int(ts_us) * 1000), float(wall))
    return out


def power_keys(table: pa.Table) -> list[tuple[int, str, int]]:
    """(gpu, source, ts_ns) of every row of a power table, repeats included."""
    ts = epoch_ns(table.column("ts")).to_pylist()
    return list(zip(table.column("gpu").to_pylist(), table.column("source").cast(pa.string()).to_pylist(), ts, strict=False))


def hidden_power_files(data_dir: Path) -> list[Path]:
    """Temporary files a killed writer left (``.tmp-*``): readers never glob them."""
    root = Path(data_dir) / "power"
    return [p for p in root.rglob(".*") if p.is_file()] if root.exists() else []


@contextlib.contextmanager
def tiny_tmpfs(where: Path, size: str = "4m"):
    """A real small filesystem (tmpfs) at ``where``; yields None when it cannot be mounted (not root,
    no CAP_SYS_ADMIN), so the caller can fall back to a patched writer."""
    where.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        yield None
        return
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill_disk(folder: Path, name: str = "filler.bin") -> Path:
    """Write zeros into ``folder`` until the filesystem answers ENOSPC; returns the filler file."""
    path = Path(folder) / name
    block = b"\0" * 65536
    with open(path, "ab", buffering=0) as fh:
        try:
            while True:
                fh.write(block)
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
        try:  # the last partial block
            while True:
                fh.write(b"\0" * 512)
        except OSError:
            pass
    return path
