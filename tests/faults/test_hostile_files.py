"""Hostile input II (files): symbolic links in the data dir, null required values, files
over the per-file row budget.

Links: an exporter's folder linked in as ``power/date=D/host=ext`` (and one linked file) must come
out of `run`, `check`, `import` and `ingest` byte-identical, with no file added or taken away;
the links are named instead. Nulls: a row with no time, host or GPU is set aside on its own, the
rest of its file used, the original kept. Budget: a file with more rows than
``WATTLINE_MAX_FILE_ROWS`` is judged from its footer and never read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from collectors.contract import POWER
from collectors.nvml.compact import compact_power
from collectors.nvml.flusher import FILE_PREFIX
from collectors.parquet_sink import write_dataset
from collectors.storage import LocalRoot
from pipeline import file_quarantine
from pipeline.readonly import run_query
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.builders import DAY, day_start_ns, power_table, square_wave, write_square_fleet
from tests.cli_util import invoke, one_line_error
from tests.faults import inject
from tests.faults.tiled_parquet import write_tiled

DATE = DAY.isoformat()
WATTLINE = Path(sys.executable).with_name("wattline")
SMI = Path(__file__).resolve().parent.parent / "data" / "nvidia-smi" / "a100-smoke-run-1784415083.csv"
SMI_DATE = "2026-07-18"
MAX_FILE_ROWS_ENV = "WATTLINE_MAX_FILE_ROWS"
DEFAULT_MAX_FILE_ROWS = 50_000_000


def _tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (names and contents): a file added, removed or rewritten shows."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _wave(host: str, gpu: int, seconds: float, start_s: float = 0.0) -> pa.Table:
    t, p = square_wave(seconds, 1.0, 150.0, 250.0, start_ns=day_start_ns() + int(start_s * 1e9))
    return power_table(host, gpu, t, p)


def _exporter(outside: Path) -> None:
    """An exporter's output folder (host ext): two good files, one with naive timestamps (a
    conversion), a truncated one, a drifted one; and a lone file with an extra column."""
    folder = outside / "host=ext"
    folder.mkdir(parents=True)
    for gpu in range(2):
        pq.write_table(_wave("ext", gpu, 5), folder / f"good-{gpu}.parquet")
    naive = _wave("ext", 2, 5)
    pq.write_table(naive.set_column(0, "ts", naive["ts"].cast(pa.timestamp("us"))), folder / "naive.parquet")
    pq.write_table(_wave("ext", 3, 5), folder / "truncated.parquet")
    inject.truncate_footer(folder / "truncated.parquet")
    pq.write_table(_wave("ext", 4, 5), folder / "drifted.parquet")
    inject.retype_column(folder / "drifted.parquet", "power_w", pa.string())
    pq.write_table(_wave("train-0", 0, 5, start_s=20).append_column("fan_pct", pa.array([40] * 50)), outside / "lone.parquet")


@pytest.fixture
def linked(tmp_path):
    """A small day plus the exporter's folder linked in as host ext, and its lone file linked
    into host train-0's folder."""
    data_dir, outside = tmp_path / "data", tmp_path / "exporter"
    write_square_fleet(data_dir, seconds=5)
    _exporter(outside)
    day = data_dir / "power" / f"date={DATE}"
    (day / "host=ext").symlink_to(outside / "host=ext", target_is_directory=True)
    (day / "host=train-0" / "lone.parquet").symlink_to(outside / "lone.parquet")
    return data_dir, outside, _tree(outside)


# ---- finding 1: links


@pytest.mark.slow  # runs the daily job
def test_run_reads_nothing_through_links_and_names_them(linked):
    """Fault: a host folder and a file linked in from outside the data dir. Was: `run` moved the
    exporter's bad files into quarantine/files/ and rewrote the naive one in place. Must survive:
    every outside file, byte-identical, none added or removed; the day (the real files); the
    user's view: an ERROR check and the summary name both links; `sql` still answers. The run
    builds power_1s: the first step to read the power files, and the table of the raw files'
    checks (every step's connection lists and validates the raw datasets as this one's does)."""
    data_dir, outside, before = linked
    result = invoke("run", "--date", DATE, "--select", "power_1s", "--data-dir", str(data_dir))
    assert _tree(outside) == before
    assert result.exit_code == 1, result.output  # the ERROR check files_follow_contract
    host_link = data_dir / "power" / f"date={DATE}" / "host=ext"
    file_link = data_dir / "power" / f"date={DATE}" / "host=train-0" / "lone.parquet"
    for link in (host_link, file_link):
        assert f"link power {link}: a symbolic link (to {os.readlink(link)}), not read" in result.output
    assert "check ERROR: power_1s.files_follow_contract" in result.output and str(host_link) in result.output
    assert host_link.is_symlink() and file_link.is_symlink()
    assert not file_quarantine.entries(data_dir, present_only=False)  # nothing moved or converted
    seconds = read_day(data_dir, "power_1s", DATE)
    assert {(r["host"], r["gpu"]) for r in seconds.select(["host", "gpu"]).to_pylist()} == {
        ("train-0", 0), ("train-0", 1), ("infer-0", 0), ("infer-0", 1)}
    assert run_query(data_dir, "select count(*) as n from power").to_pylist() == [{"n": 4 * 50}]


def test_check_does_not_follow_links_inside_a_folder(linked):
    """`wattline check DIR` judges what the pipeline would read: links met inside the folder are
    named (`link`, exit 1), not followed (was: the linked file judged and approved, exit 0)."""
    data_dir, outside, before = linked
    result = invoke("check", str(data_dir / "power"))
    assert _tree(outside) == before
    assert result.exit_code == 1, result.output
    links = [line for line in result.output.splitlines() if line.startswith("link ")]
    assert len(links) == 2 and all("a symbolic link (to " in line for line in links), result.output
    assert "lone.parquet (power)" not in result.output
    assert "symbolic link(s) not followed" in result.output


def test_import_refuses_a_linked_host_folder(tmp_path):
    """Fault: `import nvidia-smi --host h0` where power/date=D/host=h0 is a link to a folder
    elsewhere. Was: the import wrote its file there. Must: one `error:` line naming the link;
    the outside folder unchanged."""
    data_dir, outside = tmp_path / "data", tmp_path / "elsewhere"
    outside.mkdir()
    pq.write_table(_wave("h0", 0, 1), outside / "theirs.parquet")
    before = _tree(outside)
    (data_dir / "power" / f"date={SMI_DATE}").mkdir(parents=True)
    link = data_dir / "power" / f"date={SMI_DATE}" / "host=h0"
    link.symlink_to(outside, target_is_directory=True)
    result = invoke("import", "nvidia-smi", str(SMI), "--host", "h0", "--tz", "UTC", "--data-dir", str(data_dir))
    one_line_error(result, f"{link} is a symbolic link (to {outside})", "does not write through links")
    assert _tree(outside) == before


def test_ingest_refuses_a_linked_day_folder(tmp_path):
    """Fault: requests/date=D is a link to a folder elsewhere. Was: `ingest requests` wrote into
    it. Must: one `error:` line naming the link; the outside folder unchanged."""
    data_dir, outside = tmp_path / "data", tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "notes.txt").write_text("not ours")
    before = _tree(outside)
    (data_dir / "requests").mkdir(parents=True)
    link = data_dir / "requests" / "date=2026-12-01"
    link.symlink_to(outside, target_is_directory=True)
    log = tmp_path / "r.jsonl"
    log.write_text("".join(json.dumps(dict(request_id=f"r{i}", endpoint="e", arrival_ts=f"2026-12-01T00:00:0{i}Z",
                                           end_ts=f"2026-12-01T00:01:0{i}Z", prompt_tokens=10, output_tokens=5)) + "\n"
                           for i in range(3)))
    result = invoke("ingest", "requests", str(log), "--data-dir", str(data_dir), "--allow-unknown-endpoint")
    one_line_error(result, f"{link} is a symbolic link (to {outside})")
    assert _tree(outside) == before


def test_collector_compaction_leaves_a_linked_host_folder_alone(tmp_path):
    """Fault: the collector's hourly compaction on a data dir whose host folder is a link. Was:
    the hour's files were merged into the outside folder and the sources deleted there."""
    data_dir, outside = tmp_path / "data", tmp_path / "elsewhere"
    outside.mkdir()
    for i in range(3):
        pq.write_table(_wave("h0", 0, 1, start_s=i), outside / f"{FILE_PREFIX}20261130T00-{i}.parquet")
    before = _tree(outside)
    (data_dir / "power" / f"date={DATE}").mkdir(parents=True)
    (data_dir / "power" / f"date={DATE}" / "host=h0").symlink_to(outside, target_is_directory=True)
    result = compact_power(data_dir, now_unix_s=day_start_ns() / 1e9 + 86400)
    assert result.hours == 0 and _tree(outside) == before


def test_every_writer_refuses_a_write_through_a_link(tmp_path):
    """The one place every writer (collectors, importers, simulator) writes a local data dir
    through: a folder or file on the way that is a link raises LinkedPath (an OSError, which each
    command turns into its one `error:` line); nothing is written outside."""
    from collectors.storage import LinkedPath
    data_dir, outside = tmp_path / "data", tmp_path / "elsewhere"
    outside.mkdir()
    data_dir.mkdir()
    (data_dir / "power").symlink_to(outside, target_is_directory=True)
    with pytest.raises(LinkedPath, match="power is a symbolic link"):
        write_dataset(_wave("h0", 0, 1), data_dir, "power")
    with pytest.raises(LinkedPath):
        LocalRoot(data_dir).write_bytes("power/x.json", b"{}")
    assert not any(outside.iterdir())


# ---- finding 3: null required values


def _with_nulls(table: pa.Table, column: str, rows: list[int]) -> pa.Table:
    values = table[column].combine_chunks().to_pylist()
    for i in rows:
        values[i] = None
    table = table.cast(pa.schema([f.with_nullable(True) for f in table.schema]))
    return table.set_column(table.schema.get_field_index(column), table.schema.field(column), pa.array(values, table.schema.field(column).type))


def test_check_reads_null_counts_not_only_the_footer_schema(tmp_path):
    """Fault: a file with the exact schema whose `gpu` is all null (statistics written), and one
    with a few null `ts` and no statistics at all. Was: `ok`, exit 0. Must: `partial`, the rows
    and columns counted, exit 1."""
    folder = tmp_path / "power" / f"date={DATE}" / "host=h0"
    folder.mkdir(parents=True)
    wave = _wave("h0", 0, 5)
    pq.write_table(_with_nulls(wave, "gpu", list(range(50))), folder / "no-gpu.parquet")
    pq.write_table(_with_nulls(wave, "ts", [3, 7]), folder / "no-stats.parquet", write_statistics=False)
    result = invoke("check", str(tmp_path / "power"))
    assert result.exit_code == 1, result.output
    assert f"partial     {folder / 'no-gpu.parquet'} (power): 50 of 50 row(s) set aside: a required value is null ('gpu' null in 50)" in result.output
    assert f"partial     {folder / 'no-stats.parquet'} (power): 2 of 50 row(s) set aside: a required value is null ('ts' null in 2)" in result.output


@pytest.mark.slow  # runs the daily job on a day of its own
def test_null_required_values_are_set_aside_row_by_row(tmp_path):
    """Fault: power files with null gpu (every row of one file; 3 rows of another), null ts and
    null host rows; a requests file with a null endpoint; a job_events file with a null host.
    Was: the cluster-day failed (`cannot convert float NaN to integer`) and null ts/host rows
    vanished without a word. Must: the day computed; each such row left out on its own, the good
    rows of the same files used; the originals (every row) kept in quarantine; a WARN check names
    each file with its null columns; nothing else failed."""
    data_dir = tmp_path / "data"
    write_square_fleet(data_dir, seconds=5)
    inject.write_requests_and_job_events(data_dir)
    folder = data_dir / "power" / f"date={DATE}" / "host=train-0"
    all_null = folder / "all-null-gpu.parquet"
    pq.write_table(_with_nulls(_wave("train-0", 0, 5, start_s=10), "gpu", list(range(50))), all_null)
    mixed = folder / "mixed.parquet"
    mixed_rows = _with_nulls(_with_nulls(_with_nulls(_wave("train-0", 1, 5, start_s=10), "gpu", [0, 1, 2]), "ts", [10]), "host", [20, 21])
    pq.write_table(mixed_rows, mixed)
    requests = data_dir / "requests" / f"date={DATE}" / "requests.parquet"
    pq.write_table(_with_nulls(pq.read_table(requests), "endpoint", [0]), requests)
    steps = data_dir / "job_events" / f"date={DATE}" / "steps.parquet"
    pq.write_table(_with_nulls(pq.read_table(steps), "host", [1]), steps)

    outcome = run_day(data_dir, DATE)
    assert outcome.success, outcome.error
    failed = {c.check: c for c in outcome.failed_checks}
    assert not outcome.error_checks, outcome.failed_checks
    check = failed["rows_with_null_required_values"]
    assert check.severity == "WARN" and check.description.startswith("4 file(s) with rows left out"), check.description
    converted = {e["path"]: e for e in outcome.converted}
    assert set(converted) == {str(all_null), str(mixed), str(requests), str(steps)}
    assert "50 of 50 row(s) set aside: a required value is null ('gpu' null in 50)" in converted[str(all_null)]["reason"]
    assert "6 of 50 row(s) set aside: a required value is null ('ts' null in 1, 'host' null in 2, 'gpu' null in 3)" in converted[str(mixed)]["reason"]
    assert "1 of 2 row(s) set aside: a required value is null ('endpoint' null in 1)" in converted[str(requests)]["reason"]
    assert "1 of 2 row(s) set aside: a required value is null ('host' null in 1)" in converted[str(steps)]["reason"]
    # every row kept: the used rows in the dataset, the others in the original in quarantine
    assert pq.read_table(mixed).num_rows == 44 and pq.read_table(all_null).num_rows == 0
    assert pq.read_table(converted[str(mixed)]["quarantined_path"]).num_rows == 50
    assert pq.read_table(converted[str(all_null)]["quarantined_path"]).num_rows == 50
    seconds = read_day(data_dir, "power_1s", DATE)
    gpu1_late = [r for r in seconds.to_pylist() if r["host"] == "train-0" and r["gpu"] == 1 and r["ts"].second >= 10]
    assert sum(r["samples"] for r in gpu1_late) == 44
    assert run_query(data_dir, "select (select count(*) from requests) as r, (select count(*) from job_events) as j").to_pylist() == [{"r": 1, "j": 1}]


# ---- finding 4: the per-file row budget


@pytest.mark.slow  # runs the daily job on a day of its own
def test_file_over_a_row_budget_is_quarantined_from_its_footer(tmp_path, monkeypatch):
    """The budget with a small setting: a 500-row file against WATTLINE_MAX_FILE_ROWS=100 is
    quarantined (kind too_large, the budget and the setting named) by `run` and by `check`."""
    data_dir = tmp_path / "data"
    write_square_fleet(data_dir, seconds=5)
    big = data_dir / "power" / f"date={DATE}" / "host=train-0" / "big.parquet"
    pq.write_table(_wave("train-0", 0, 50, start_s=10), big)
    monkeypatch.setenv(MAX_FILE_ROWS_ENV, "100")
    result = invoke("check", str(big))
    assert result.exit_code == 1
    assert f"quarantine  {big} (power): 500 rows, over the per-file budget of 100 rows ({MAX_FILE_ROWS_ENV} raises it" in result.output
    outcome = run_day(data_dir, DATE, selection=["power_1s"])  # the first step to read the power files
    [entry] = outcome.quarantined
    assert entry["kind"] == "too_large" and entry["path"] == str(big) and "over the per-file budget of 100 rows" in entry["reason"]
    assert "files_follow_contract" in {c.check for c in outcome.error_checks}
    monkeypatch.setenv(MAX_FILE_ROWS_ENV, "many")
    one_line_error(invoke("check", str(data_dir / "power")), MAX_FILE_ROWS_ENV, "positive number of rows")


BILLION = 10**9
GROUP_ROWS = 1_000_000
RSS_LIMIT = 3 * 10**9


def _constant_group(n: int) -> pa.Table:
    """``n`` rows of the exact contract, all the same sample."""
    return pa.table({
        "ts": pa.array(np.full(n, day_start_ns() // 1000), pa.int64()).cast(POWER.field("ts").type),
        "host": pa.array(["train-0"] * n, pa.string()),
        "gpu": pa.array(np.zeros(n, np.uint8)),
        **{f.name: pa.nulls(n, f.type) for f in POWER if f.name not in ("ts", "host", "gpu", "power_w", "source")},
        "power_w": pa.array(np.full(n, 300.0, np.float32)),
        "source": pa.array(["simulated"] * n).dictionary_encode(),
    }).select(POWER.names).cast(POWER)


def _billion_row_file(path: Path, rows: int = BILLION) -> None:
    """``rows`` rows of the exact contract in row groups of one constant million-row group (for
    10**9: 1,000 row groups, ~30 MB), the group encoded once and its bytes written over and over
    (``tiled_parquet``: the file pyarrow's writer writes, in a second instead of ~50 s)."""
    write_tiled(path, _constant_group(GROUP_ROWS), rows // GROUP_ROWS)


def test_the_billion_row_file_is_the_one_pyarrows_writer_writes(tmp_path, monkeypatch):
    """The fast build of the file below, at 3 row groups, is byte for byte what ParquetWriter
    writes given the group 3 times (the footer repeated at the right offsets), and `check`
    accepts it under a budget it fits: the row count is the big file's only fault."""
    tiled = tmp_path / "power" / f"date={DATE}" / "host=train-0" / "tiled.parquet"
    _billion_row_file(tiled, 3 * GROUP_ROWS)
    written = tmp_path / "written.parquet"
    with pq.ParquetWriter(written, POWER) as writer:
        for _ in range(3):
            writer.write_table(_constant_group(GROUP_ROWS))
    assert tiled.read_bytes() == written.read_bytes()
    assert pq.ParquetFile(tiled).metadata.num_row_groups == 3
    monkeypatch.setenv(MAX_FILE_ROWS_ENV, str(3 * GROUP_ROWS))
    result = invoke("check", str(tiled))
    assert result.exit_code == 0 and result.output.startswith("ok "), result.output


def _measured(*args: str, timeout_s: float = 300) -> tuple[int, str, float, float]:
    """(exit code, output, peak RSS in bytes of the process and its children, seconds) of the
    console script; killed past RSS_LIMIT (the finding: > 6 GB) or ``timeout_s``."""

    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen([str(WATTLINE), *args], stdout=out, stderr=subprocess.STDOUT, text=True)
        watched = psutil.Process(proc.pid)
        peak = 0
        while proc.poll() is None:
            try:
                rss = sum(p.memory_info().rss for p in [watched, *watched.children(recursive=True)])
            except psutil.Error:
                rss = 0
            peak = max(peak, rss)
            if peak > RSS_LIMIT or time.monotonic() - started > timeout_s:
                for p in [*watched.children(recursive=True), watched]:
                    with contextlib.suppress(psutil.Error):
                        p.kill()
                proc.wait()
                break
            time.sleep(0.05)
        seconds = time.monotonic() - started
        out.seek(0)
        return proc.returncode, out.read(), peak, seconds


@pytest.mark.slow
def test_a_billion_row_file_is_refused_in_bounded_memory_and_time(tmp_path):
    """Fault: a 30 MB Parquet file of 10**9 rows (exact types). Was: `check` approved it (footer
    schema only) and `run` passed 6 GB RSS. Must: both say why in one line (the budget, the
    setting), peak RSS < 3 GB, and `run` takes under 10 s more than the same day without it."""
    data_dir = tmp_path / "data"
    write_square_fleet(data_dir, seconds=5)
    started = time.monotonic()
    _billion_row_file(tmp_path / "built.parquet")
    print(f"built the file in {time.monotonic() - started:.1f} s, {(tmp_path / 'built.parquet').stat().st_size / 1e6:.1f} MB")
    # The run of the first step to read the power files (the one that meets the file; it is in
    # quarantine before any later step), with and without the file.
    run = ("run", "--date", DATE, "--select", "power_1s", "--data-dir", str(data_dir))
    baseline = _measured(*run)
    assert baseline[0] == 0, baseline[1]
    huge = data_dir / "power" / f"date={DATE}" / "host=train-0" / "huge.parquet"
    (tmp_path / "built.parquet").rename(huge)
    budget = f"1,000,000,000 rows, over the per-file budget of {DEFAULT_MAX_FILE_ROWS:,} rows ({MAX_FILE_ROWS_ENV} raises it"

    code, output, peak, seconds = _measured("check", str(huge))
    print(f"check: {seconds:.1f} s, peak RSS {peak / 2**20:.0f} MiB")
    assert code == 1 and peak < RSS_LIMIT and seconds < 10, (code, peak, seconds, output)
    assert f"quarantine  {huge} (power): {budget}" in output

    code, output, peak, seconds = _measured(*run)
    print(f"run: {seconds:.1f} s (without the file {baseline[3]:.1f} s), peak RSS {peak / 2**20:.0f} MiB (without {baseline[2] / 2**20:.0f})")
    assert code == 1 and peak < RSS_LIMIT, (code, peak, seconds, output)
    assert seconds < baseline[3] + 10, (seconds, baseline[3])
    assert f"quarantined power file {huge}: {budget}" in output
    assert not huge.exists() and pq.ParquetFile(file_quarantine.files_dir(data_dir) / huge.relative_to(data_dir)).metadata.num_rows == BILLION


def test_the_default_budget_is_the_documented_one():
    """The literal above is the setting's default (docs/data-contract.md names it)."""
    from collectors.settings import DEFAULT_MAX_FILE_ROWS as default
    from collectors.settings import MAX_FILE_ROWS_ENV as name

    assert (name, default) == (MAX_FILE_ROWS_ENV, DEFAULT_MAX_FILE_ROWS)
