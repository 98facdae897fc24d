"""`wattline import nvidia-smi` on the real A100/H100 logs and on crafted bad input."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from collectors.contract import POWER, check_file_schema
from collectors.nvidia_smi import ImportError_, import_files, normalize_header, resolve_tz
from tests.nvml_helpers import read_power

DATA = Path(__file__).resolve().parent / "data" / "nvidia-smi"
H100 = DATA / "h100-qwen3-8b.csv"
A100 = DATA / "a100-smoke-run-1784415083.csv"
BURST = DATA / "a100-burstgpt.csv"
UTC = dt.UTC


def _quarantine(data_dir):
    files = list((data_dir / "quarantine" / "power").glob("*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files]).to_pylist() if files else []


def test_h100_power_draw_is_a_1s_average_and_time_is_converted_to_utc(tmp_path):
    res = import_files([H100], tmp_path, "h100-0", tz="-07:00")
    t = read_power(tmp_path)
    assert res.rows == t.num_rows == 265 and res.quarantined == 0
    rows = t.to_pylist()
    assert all(r["power_w"] is None and r["source"] == "nvidia-smi-average" for r in rows)
    first = min(rows, key=lambda r: r["ts"])
    # file line 2: "2026/07/18 17:57:49.469,0,GPU-171e...,122.85,1830,..." in UTC−7
    assert first["ts"] == dt.datetime(2026, 7, 19, 0, 57, 49, 469000, tzinfo=UTC)
    assert first["power_avg_w"] == pytest.approx(122.85) and first["sm_clock_mhz"] == 1830
    assert first["gpu_uuid"] == "GPU-171e341c-4c74-fca8-094f-1cbff4dbdd21" and first["host"] == "h100-0"
    assert first["temp_c"] == 48 and first["mem_used_mib"] == 74153 and first["gpu_util_pct"] == 0
    assert "power_avg_w" in res.summary("h100-0") and "UTC-07:00" in res.summary("h100-0")


def test_iana_zone_and_offset_agree(tmp_path):
    import_files([A100], tmp_path / "a", "a", tz="America/Phoenix", power_draw="instant")
    import_files([A100], tmp_path / "b", "a", tz="-07:00", power_draw="instant")
    ta, tb = read_power(tmp_path / "a"), read_power(tmp_path / "b")
    assert ta.column("ts").to_pylist() == tb.column("ts").to_pylist()
    # the serving benchmark logged the first request at Unix 1784415083 (22:51:23 UTC): power starts 2 s later
    assert min(ta.column("ts").to_pylist()) == dt.datetime(2026, 7, 18, 22, 51, 25, 606000, tzinfo=UTC)


def test_a100_power_draw_override_to_instant(tmp_path):
    res = import_files([A100, BURST], tmp_path, "a100-0", tz="-07:00", power_draw="instant")
    t = read_power(tmp_path)
    assert res.rows == 27 + 452 == t.num_rows
    assert set(t.column("source").to_pylist()) == {"nvidia-smi"}
    assert max(t.column("power_w").to_pylist()) > 490 and t.column("power_avg_w").null_count == t.num_rows


def test_name_column_selects_instant_for_ga100_and_average_otherwise(tmp_path):
    head = "timestamp, name, index, power.draw [W]\n"
    a = tmp_path / "a.csv"
    a.write_text(head + "2026/12/01 10:00:00.000, NVIDIA A100-SXM4-80GB, 0, 85.00 W\n")
    h = tmp_path / "h.csv"
    h.write_text(head + "2026/12/01 10:00:00.000, NVIDIA H200, 0, 120.00 W\n")
    import_files([a], tmp_path / "da", "x", tz="UTC")
    import_files([h], tmp_path / "dh", "x", tz="UTC")
    ra, rh = read_power(tmp_path / "da").to_pylist()[0], read_power(tmp_path / "dh").to_pylist()[0]
    assert (ra["power_w"], ra["power_avg_w"]) == (85.0, None)
    assert (rh["power_w"], rh["power_avg_w"]) == (None, 120.0)


def test_instant_column_wins_and_units_or_nounits_give_the_same_rows(tmp_path):
    units = tmp_path / "units.csv"
    units.write_text("timestamp, index, uuid, power.draw [W], power.draw.instant [W], clocks.sm [MHz], "
                     "utilization.gpu [%], memory.used [MiB], temperature.gpu, enforced.power.limit [W]\n"
                     "2026/12/01 10:00:00.100, 1, GPU-x, 300.50 W, 812.25 W, 1980 MHz, 97 %, 40995 MiB, 41, 700.00 W\n"
                     "2026/12/01 10:00:00.200, 1, GPU-x, 301.00 W, [N/A], 1980 MHz, 97 %, 40995 MiB, [N/A], 700.00 W\n")
    nounits = tmp_path / "nounits.csv"
    nounits.write_text("timestamp,index,uuid,power.draw,power.draw.instant,clocks.sm,utilization.gpu,memory.used,"
                       "temperature.gpu,enforced.power.limit\n"
                       "2026/12/01 10:00:00.100,1,GPU-x,300.50,812.25,1980,97,40995,41,700.00\n"
                       "2026/12/01 10:00:00.200,1,GPU-x,301.00,[N/A],1980,97,40995,[N/A],700.00\n")
    import_files([units], tmp_path / "u", "x", tz="UTC")
    import_files([nounits], tmp_path / "n", "x", tz="UTC")
    u, n = read_power(tmp_path / "u").to_pylist(), read_power(tmp_path / "n").to_pylist()
    assert u == n
    assert (u[0]["power_w"], u[0]["power_avg_w"], u[0]["power_limit_w"], u[0]["gpu"]) == (812.25, 300.5, 700.0, 1)
    assert u[1]["power_w"] is None and u[1]["power_avg_w"] == 301.0 and u[1]["temp_c"] is None  # [N/A] → null


def test_bad_lines_are_quarantined_with_reasons_and_good_lines_all_kept(tmp_path):
    f = tmp_path / "bad.csv"
    f.write_bytes(
        b"timestamp, index, power.draw.instant [W], temperature.gpu\n"
        b"2026/12/01 10:00:00.100, 0, 812.25 W, 40\n"      # 2 ok
        b"2026/12/01 10:00:00.200, 0, [N/A], 40\n"          # 3 no power
        b"yesterday, 0, 100, 40\n"                          # 4 bad timestamp
        b"2026/12/01 10:00:00.300, 0, 100\n"                # 5 wrong field count
        b"2026/12/01 10:00:00.100, 0, 812.25 W, 40\n"      # 6 duplicate of 2
        b"2026/12/01 10:00:00.400, gpu0, 100, 40\n"         # 7 bad index
        b"2026/12/01 10:00:00.500, 0, lots, 40\n"           # 8 bad number
        b"2026/12/01 10:00:00.600, 0, \xff\xfe, 40\n"       # 9 not UTF-8
        b"2026/12/01 10:00:00.700, 0, -5, 40\n"             # 10 out of range
        b"\n"
        b"2026/12/01 10:00:00.800, 0, 90.5 W, 39\n"         # 12 ok
    )
    res = import_files([f], tmp_path / "d", "x", tz="UTC")
    assert res.rows == 2 and res.quarantined == 8
    q = {r["line_no"]: r for r in _quarantine(tmp_path / "d")}
    assert sorted(q) == [3, 4, 5, 6, 7, 8, 9, 10]
    assert q[3]["reason"].startswith("no power reading")
    assert q[4]["reason"].startswith("bad timestamp") and q[4]["raw_line"].startswith("yesterday")
    assert q[5]["reason"].startswith("wrong field count")
    assert q[6]["reason"] == "duplicate of line 2 (same GPU and timestamp)"
    assert q[7]["reason"].startswith("bad GPU index") and q[8]["reason"].startswith("bad number in power.draw.instant")
    assert q[9]["reason"] == "not UTF-8" and q[10]["reason"].startswith("power out of range")
    assert all(r["file"] == str(f) for r in q.values())
    assert "quarantined 8 line(s)" in res.summary("x")


def test_reimport_replaces_instead_of_duplicating(tmp_path):
    import_files([H100], tmp_path, "h", tz="-07:00")
    files1 = sorted(p.name for p in (tmp_path / "power").rglob("*.parquet"))
    import_files([H100], tmp_path, "h", tz="-07:00")
    files2 = sorted(p.name for p in (tmp_path / "power").rglob("*.parquet"))
    assert files1 == files2 and read_power(tmp_path).num_rows == 265
    for p in (tmp_path / "power").rglob("*.parquet"):
        check_file_schema(p, POWER)


def test_default_zone_is_the_machines_and_is_printed(tmp_path, monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    zone, name = resolve_tz(None)
    assert "Asia/Kolkata" in name
    res = import_files([A100], tmp_path, "a", power_draw="instant")
    assert "Asia/Kolkata" in res.summary("a")
    first = min(read_power(tmp_path).column("ts").to_pylist())
    assert first == dt.datetime(2026, 7, 18, 10, 21, 25, 606000, tzinfo=UTC)  # 15:51 IST = 10:21 UTC


def test_unusable_files_and_zones_are_user_errors(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ImportError_, match="empty file"):
        import_files([empty], tmp_path, "x", tz="UTC")
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(ImportError_, match="not an nvidia-smi CSV header"):
        import_files([other], tmp_path, "x", tz="UTC")
    with pytest.raises(ImportError_, match="unknown time zone"):
        import_files([H100], tmp_path, "x", tz="Mars/Olympus")


def test_header_names_with_and_without_units():
    assert normalize_header(" power.draw [W]") == "power.draw"
    assert normalize_header("utilization.gpu [%]") == "utilization.gpu"
    assert normalize_header("clocks.current.sm [MHz]") == "clocks.sm"
    assert normalize_header("temperature.gpu") == "temperature.gpu"


def test_cli_prints_one_summary_line_and_errors_are_one_line(tmp_path):
    from pipeline.cli import main

    r = CliRunner().invoke(main, ["import", "nvidia-smi", str(H100), "--host", "h", "--tz", "-07:00",
                                  "--data-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert r.output.count("\n") == 1 and r.output.startswith("imported 265 rows from 1 file(s) for host h")
    r = CliRunner().invoke(main, ["import", "nvidia-smi", str(H100), "--host", "h", "--tz", "Nowhere/Land",
                                  "--data-dir", str(tmp_path)])
    assert r.exit_code == 2 and r.output.startswith("error: unknown time zone")
