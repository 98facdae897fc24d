"""The per-step peak RSS that `wattline run --timings` prints: the mechanism on a known
allocation, then the CLI naming each asset with its peak."""

import platform
import re
import subprocess
import sys

import pytest

from tests.builders import DAY, write_square_fleet
from tests.cli_util import invoke

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and clear_refs are Linux's")


_PEAK_FRAGMENT = """
import numpy as np
from pipeline import process_memory

process_memory.reset_peak()
base = process_memory.peak_mb()
block = np.ones(200 * 2**20 // 8)  # 200 MiB, touched
grown = process_memory.peak_mb()
del block
process_memory.reset_peak()
after = process_memory.peak_mb()
print(base, grown, after)
"""


def test_peak_follows_an_allocation_and_resets():
    """In a fresh process: a test worker's other threads (a finished run's pools) can free memory
    between the reset and the allocation, so the mark would move by less than the block."""
    out = subprocess.run([sys.executable, "-c", _PEAK_FRAGMENT], capture_output=True, text=True, check=True)
    base, grown, after = (float(x) for x in out.stdout.split())
    assert grown - base >= 190
    assert after < grown - 150, "the reset starts a new high-water mark at the current RSS"


@pytest.mark.slow  # runs the daily job (power_1s, energy_curve) on a day of its own
def test_timings_name_each_asset_with_its_peak_rss(tmp_path):
    data_dir = tmp_path / "data"
    write_square_fleet(data_dir, seconds=30)
    result = invoke("run", "--date", DAY.isoformat(), "--data-dir", str(data_dir), "--timings", "--select", "power_1s,energy_curve")
    assert result.exit_code == 0, result.output
    peaks = dict(re.findall(r"^\s+(\S+)\s+[0-9.]+ s\s+([0-9]+) MB peak RSS$", result.output, re.M))
    assert set(peaks) == {"power_1s", "energy_curve"}, result.output
    assert all(50 < int(mb) < 10_000 for mb in peaks.values()), peaks


_FRAGMENT = """
import os
import sys
import numpy as np
from pipeline import process_memory

def rss_mb():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

if sys.argv[1] == "on":
    assert process_memory.return_freed_memory()
big = np.ones(16 * 2**20 // 8)  # a 16 MiB block freed: glibc's own threshold rises to 16 MiB
del big
base = rss_mb()
arrays = [np.ones(4 * 2**20 // 8) for _ in range(100)]  # 400 MiB in 4 MiB arrays, as a kernel's per-GPU columns
kept = arrays[9::10]  # every 10th still held (the last among them): the heap cannot shrink past it
del arrays
print(rss_mb() - base)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's mmap threshold is glibc's")
@pytest.mark.parametrize("mode", ["off", "on"])
def test_freed_arrays_go_back_to_the_os(mode):
    """The 360 MiB freed between held arrays leave the process only with return_freed_memory;
    without it glibc keeps them (the case that made 64 GPU-days peak at 2.98 GB)."""
    out = subprocess.run([sys.executable, "-c", _FRAGMENT, mode], capture_output=True, text=True, check=True)
    retained_mb = float(out.stdout)
    if mode == "on":
        assert retained_mb < 80, retained_mb  # the 40 MiB still held, and little else
    else:
        assert retained_mb > 300, retained_mb


_POOLS_FRAGMENT = """
import os
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline import process_memory, warehouse
from pipeline.scope import Scope

def rss_mb():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

if sys.argv[2] == "off":
    process_memory.release_pools = lambda: None
scope = Scope(date="2026-12-03", cluster="c0")

def step():  # a step of a run: its connection on the database kept for the run's next step
    return warehouse.shared_compute_connection("run", Path(sys.argv[1]), scope.date, {}, scope, threads=2)

base = rss_mb()
with step() as con:  # a hash table of ~150 MiB, freed at the query's end
    con.execute("SELECT count(*) FROM (SELECT i % 3000000 AS k, sum(i), max(i) FROM range(12000000) t(i) GROUP BY k)").fetchall()
duckdb_kept = rss_mb() - base
base = rss_mb()
with step():
    small = pa.array(np.arange(131072))
    parts = [pc.multiply(small, i) for i in range(160)]  # 160 MiB of 1 MiB buffers from Arrow's pool, freed
    del parts
arrow_kept = rss_mb() - base
warehouse.close_shared()
print(duckdb_kept, arrow_kept)
"""


@pytest.mark.skipif(platform.machine() != "x86_64", reason="DuckDB's Linux x86_64 module carries jemalloc")
@pytest.mark.parametrize("mode", ["off", "on"])
def test_a_step_gives_back_what_its_allocators_kept(tmp_path, mode):
    """The end of a step's connection hands the memory DuckDB's and Arrow's allocators keep after
    freeing back to the OS (release_pools): without it they keep what the step freed while the run's
    database stays open, and the next step's peak sits on top of it (between the steps of a 24 h
    run the process held 380-850 MB; with it 330-400 MB)."""
    (tmp_path / "inventory.yaml").write_text(
        "fleets: [{name: f, clusters: [{name: c0, hosts: [{name: h0, role: inference, gpus: [{index: 0, tdp_w: 700}]}]}]}]\n")
    out = subprocess.run([sys.executable, "-c", _POOLS_FRAGMENT, str(tmp_path), mode], capture_output=True, text=True, check=True)
    duckdb_kept, arrow_kept = (float(x) for x in out.stdout.split())
    if mode == "on":
        assert duckdb_kept < 70 and arrow_kept < 30, (duckdb_kept, arrow_kept)
    else:
        assert duckdb_kept > 120 and arrow_kept > 120, (duckdb_kept, arrow_kept)
