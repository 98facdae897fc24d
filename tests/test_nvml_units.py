"""Unit tests of the collector's parts that need no NVML: buffer de-dup, energy resets, rows, files."""

from __future__ import annotations

import errno
import json
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from collectors.atomic import write_parquet_atomic
from collectors.contract import POWER, check_file_schema, epoch_ns
from collectors.nvml.buffer_drain import BufferCursor
from collectors.nvml.cli import CollectError, parse_gpus, parse_seconds
from collectors.nvml.compact import META_KEY, compact_power, roll_forward
from collectors.nvml.counters import Counters
from collectors.nvml.energy import EnergyCounter
from collectors.nvml.flusher import Flusher
from collectors.nvml.rows import BUFFER, FIELD, rows_to_table

HOUR_NS = 3_600_000_000_000


def _row(ts_ns, gpu=0, w=300.0, source=FIELD, energy=None):
    return (ts_ns, gpu, w, 290.0 if source == FIELD else None, energy, None, None, None, None, None, source)


def _table(ts_list, gpu=0, source=FIELD):
    return rows_to_table([_row(t, gpu, source=source) for t in ts_list], "h", {gpu: f"GPU-{gpu}"})


# -- driver buffer ------------------------------------------------------------------------------
def test_buffer_cursor_drops_samples_already_seen():
    c = BufferCursor()
    first, _, _ = c.accept([(1_000_000 + 20_000 * i, 100.0) for i in range(10)])
    again, overrun, _ = c.accept([(1_000_000 + 20_000 * i, 100.0) for i in range(5, 15)])
    assert len(first) == 10
    assert [s[0] for s in again] == [1_000_000 + 20_000 * i for i in range(10, 15)]
    assert overrun == 0


def test_buffer_cursor_counts_an_overrun_and_estimates_the_loss():
    c = BufferCursor()
    c.accept([(20_000 * i, 1.0) for i in range(1, 11)])  # last seen 200 ms
    _, overrun, lost = c.accept([(200_000 + 1_000_000 + 20_000 * i, 1.0) for i in range(10)])  # 1 s later
    assert overrun == 1
    assert 45 <= lost <= 50


# -- energy counter -----------------------------------------------------------------------------
def test_energy_reset_continues_the_series_without_negative_steps():
    e = EnergyCounter()
    out = [e.update(v) for v in (1000.0, 1100.0, 5.0, 50.0)]
    values = [v for v, _ in out]
    assert values == [1000.0, 1100.0, 1105.0, 1150.0]
    assert [ev for _, ev in out] == [None, None, "energy_resets", None]


def test_energy_small_backwards_step_is_held_not_negative():
    e = EnergyCounter()
    values = [e.update(v) for v in (1000.0, 995.0, 1010.0)]
    assert [v for v, _ in values] == [1000.0, 1000.0, 1015.0]
    assert values[1][1] == "energy_backwards"


# -- rows and files ------------------------------------------------------------------------------
def test_rows_follow_the_power_contract_and_are_sorted():
    rows = [_row(3000, 1), _row(2000, 0, source=BUFFER), _row(1000, 0)]
    t = rows_to_table(rows, "h", {0: "GPU-0", 1: "GPU-1"})
    assert t.schema == POWER
    assert [(r["gpu"], r["source"]) for r in t.to_pylist()] == [(0, "nvml-buffer"), (0, "nvml-field"), (1, "nvml-field")]
    assert t.column("gpu_uuid").to_pylist() == ["GPU-0", "GPU-0", "GPU-1"]


def test_flush_splits_files_at_hour_boundaries(tmp_path):
    c = Counters()
    f = Flusher(tmp_path, "h", c)
    h = 491_000 * HOUR_NS  # an hour boundary
    f.add(_table([h - 2_000_000_000, h - 1_000_000_000, h + 1_000_000_000]))
    assert f.flush()
    files = sorted(p.name for p in (tmp_path / "power").rglob("*.parquet"))
    hours = sorted({n.split("-")[1] for n in files})
    assert len(files) == 2 and len(hours) == 2
    assert c.get("rows_written") == 3


def test_disk_full_keeps_rows_in_memory_then_resumes(tmp_path):
    full = {"on": True}

    def write(table, path):
        if full["on"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return write_parquet_atomic(table, path)

    c = Counters()
    f = Flusher(tmp_path, "h", c, max_pending_rows=10_000, write=write)
    base = 491_000 * HOUR_NS + 10**9
    for k in range(3):
        f.add(_table([base + (k * 10 + i) * 10**8 for i in range(10)]))
        assert not f.flush()
    assert f.pending_rows == 30 and c.get("write_errors") == 3
    assert not list((tmp_path / "power").rglob("*.parquet")) if (tmp_path / "power").exists() else True
    full["on"] = False
    f.add(_table([base + 40 * 10**8]))
    assert f.flush()
    files = list((tmp_path / "power").rglob("*.parquet"))
    assert sum(pq.read_metadata(p).num_rows for p in files) == 31
    assert f.pending_rows == 0


def test_disk_full_memory_is_bounded_and_the_drop_is_counted(tmp_path):
    def write(table, path):
        raise OSError(errno.ENOSPC, "No space left on device")

    c = Counters()
    f = Flusher(tmp_path, "h", c, max_pending_rows=25, write=write)
    base = 491_000 * HOUR_NS + 10**9
    for k in range(5):
        f.add(_table([base + (k * 10 + i) * 10**8 for i in range(10)]))
        f.flush()
    assert f.pending_rows <= 25
    assert c.get("rows_dropped") == 50 - f.pending_rows
    # the oldest were dropped: what is kept is the newest
    kept = epoch_ns(pa.concat_tables([t for _, t in f.pending]).column("ts")).to_pylist()
    assert min(kept) >= base + 20 * 10**8


# -- compaction -------------------------------------------------------------------------------
def _write_hour_files(tmp_path, hour_index, n_files, rows_per_file=5):
    c = Counters()
    f = Flusher(tmp_path, "h", c)
    for k in range(n_files):
        f.add(_table([hour_index * HOUR_NS + (k * rows_per_file + i) * 10**8 for i in range(rows_per_file)]))
        f.flush()
    return sorted((tmp_path / "power").rglob("*.parquet"))


def test_compaction_merges_closed_hours_only(tmp_path):
    now = time.time()  # one reading, passed to the compaction: the current hour stays open however long this takes
    closed = int(now // 3600) - 3
    current = int(now // 3600)
    _write_hour_files(tmp_path, closed, 4)
    _write_hour_files(tmp_path, current, 3)
    before = sorted(r["ts"] for p in (tmp_path / "power").rglob("*.parquet") for r in pq.read_table(p).to_pylist())
    res = compact_power(tmp_path, "h", now_unix_s=now)
    assert res.hours == 1 and res.files_in == 4 and res.rows == 20
    files = sorted((tmp_path / "power").rglob("*.parquet"))
    assert len(files) == 1 + 3
    for p in files:
        check_file_schema(p, POWER)
    after = sorted(r["ts"] for p in files for r in pq.read_table(p).to_pylist())
    assert after == before  # nothing lost, nothing duplicated
    assert compact_power(tmp_path, "h", now_unix_s=now).hours == 0  # idempotent
    merged = next(p for p in files if "-compacted-" in p.name)
    column = {pq.ParquetFile(merged).metadata.row_group(0).column(i).path_in_schema: i for i in range(len(POWER))}
    encodings = lambda name: pq.ParquetFile(merged).metadata.row_group(0).column(column[name]).encodings  # noqa: E731
    assert "DELTA_BINARY_PACKED" in encodings("ts")  # the collector's own layout, not the writer default
    assert "RLE_DICTIONARY" in encodings("power_w")


def test_compaction_splits_the_real_average_it_cannot_dictionary(tmp_path):
    """On the real H200 capture, NVML's 1 s average almost never repeats at 10 Hz: the compacted file
    byte-stream-splits it (smaller than a dictionary of it) and keeps the instant power's dictionary."""
    import csv
    from pathlib import Path

    from collectors.atomic import parquet_options

    with open(Path(__file__).parent / "data" / "h200_capture_2" / "power_100ms.csv") as fh:
        real = list(csv.DictReader(fh))
    start = (int(time.time() // 3600) - 3) * HOUR_NS
    rows = [(start + i * 10**8, 0, int(r["power_instant_mw"]) / 1000, int(r["power_usage_mw"]) / 1000,
             None, None, None, None, None, None, FIELD) for i, r in enumerate(real)]
    f = Flusher(tmp_path, "h", Counters())
    for k in range(0, len(rows), 300):
        f.add(rows_to_table(rows[k:k + 300], "h", {0: "GPU-0"}))
        f.flush()
    assert compact_power(tmp_path, "h").rows == len(rows)
    merged = next((tmp_path / "power").rglob("*-compacted-*.parquet"))
    meta = pq.ParquetFile(merged).metadata.row_group(0)
    column = {meta.column(i).path_in_schema: meta.column(i) for i in range(meta.num_columns)}
    assert "BYTE_STREAM_SPLIT" in column["power_avg_w"].encodings
    assert "RLE_DICTIONARY" in column["power_w"].encodings
    as_dictionary = tmp_path / "dictionary.parquet"
    table = pq.read_table(merged)
    pq.write_table(table, as_dictionary, **parquet_options(table.schema))
    dictionary_avg = pq.ParquetFile(as_dictionary).metadata.row_group(0).column(table.schema.get_field_index("power_avg_w"))
    assert dictionary_avg.path_in_schema == "power_avg_w" and "RLE_DICTIONARY" in dictionary_avg.encodings
    assert column["power_avg_w"].total_compressed_size < 0.8 * dictionary_avg.total_compressed_size


def test_interrupted_compaction_is_rolled_forward(tmp_path):
    closed = int(time.time() // 3600) - 3
    sources = _write_hour_files(tmp_path, closed, 3)
    folder = sources[0].parent
    # simulate a crash after the merged file was renamed into place but before the deletes
    merged = pa.concat_tables([pq.read_table(p) for p in sources])
    merged = merged.replace_schema_metadata({META_KEY: json.dumps([p.name for p in sources]).encode()})
    write_parquet_atomic(merged, folder / f"nvml-{sources[0].name[5:16]}-compacted-abcdef.parquet")
    assert roll_forward(folder) == 3
    left = list(folder.glob("*.parquet"))
    assert len(left) == 1 and pq.read_metadata(left[0]).num_rows == 15


# -- options -------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,seconds", [("100ms", 0.1), ("0.5s", 0.5), ("2", 2.0), ("1m", 60.0)])
def test_parse_seconds(text, seconds):
    assert parse_seconds(text) == pytest.approx(seconds)


def test_bad_options_are_user_errors():
    with pytest.raises(CollectError):
        parse_seconds("fast")
    with pytest.raises(CollectError):
        parse_gpus("0,a")
    assert parse_gpus("1,0,1") == [0, 1]


def test_compact_only_command_merges_closed_hours(tmp_path):
    from click.testing import CliRunner

    from collectors.nvml.cli import command

    _write_hour_files(tmp_path, int(time.time() // 3600) - 2, 3)
    r = CliRunner().invoke(command, ["--compact-only", "--data-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("compacted 1 hour(s): 3 files → 1")
    assert len(list((tmp_path / "power").rglob("*.parquet"))) == 1
