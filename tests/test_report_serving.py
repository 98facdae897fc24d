"""The report's serving-efficiency section: the energy-latency frontier from energy_per_token's
latency columns (skipped, saying so, where the table has none), the power-cap table and chart
from power_cap_whatif, and the headline's J per token."""

import json
from pathlib import Path

import pyarrow as pa
import pytest

from pipeline import warehouse
from reports.daily import build_report, build_sections
from reports.sections.base import Note, Table
from reports.sections.serving import frontier
from tests.builders import DAY, two_host_inventory
from tests.report_serving import CAP_SCHEMA, EPT_SERVING_SCHEMA, cap_rows, ept_serving_rows
from tests.report_tables import write_table

DATE = DAY.isoformat()
ENDPOINTS = {"ep-a": ("llama-8b", 1, "H200"), "ep-b": ("llama-70b", 4, "H100")}


def serving_day(data_dir: Path, *, latency: bool = True, caps: bool = True) -> Path:
    """A data dir with only the serving section's tables (no pipeline run: the section reads tables)."""
    two_host_inventory(data_dir)
    rows = ept_serving_rows(DATE, ENDPOINTS)
    schema = EPT_SERVING_SCHEMA
    if not latency:
        keep = [f.name for f in schema if not f.name.endswith("_ms") and f.name != "output_tokens_per_s_per_gpu"]
        schema = pa.schema([schema.field(n) for n in keep])
        rows = [{k: r[k] for k in keep} for r in rows]
    write_table(data_dir, "energy_per_token", DATE, rows, schema)
    if caps:
        write_table(data_dir, "power_cap_whatif", DATE, cap_rows(DATE, [("endpoint", e) for e in ENDPOINTS] + [("job", "job-a")], ["c0"]),
                    CAP_SCHEMA)
    warehouse.publish(data_dir)
    return data_dir


def _serving(data_dir):
    return next(s for s in build_sections(data_dir, DATE) if s.key == "serving")


def test_frontier_keeps_the_points_nothing_beats():
    pts = [{"x": 10, "j": 5.0}, {"x": 12, "j": 4.0}, {"x": 11, "j": 6.0}, {"x": 20, "j": 4.0}, {"x": 30, "j": 1.0}]
    assert frontier(pts, "x") == {0, 1, 4}


def test_frontier_chart_by_model_replica_and_gpu(tmp_path):
    s = _serving(serving_day(tmp_path / "data"))
    assert s.error is None and not s.missing
    assert [c.name for c in s.charts] == ["serving_frontier", "power_cap_tradeoff"]
    spec = s.charts[0].chart.to_dict()
    text = json.dumps(spec)
    assert "tpot" in text and "ttft" in text and "J per output token" in text
    values = next(v for v in _data_values(spec))
    series = {p["series"] for p in values}
    assert series == {"llama-8b · 1 GPU/replica · H200", "llama-70b · 4 GPU/replica · H100"}
    # ep-b is slower and costlier at every batch bucket: the frontier is ep-a's five buckets
    on = {(p["series"].split(" ")[0], p["bucket"]) for p in values if p["frontier_tpot"]}
    assert on == {("llama-8b", b) for b in ("1", "2-3", "4-7", "8-15", "16+")}
    table = next(b for b in s.blocks if isinstance(b, Table) and "TPOT p50 (ms)" in b.columns)
    row = next(r for r in table.rows if r[0].startswith("llama-8b") and r[1] == "4-7")
    assert row[2:5] == [pytest.approx(5 / 5 ** 0.5, rel=1e-4), 30.0, 175.0]  # batch 5: J = 5/√5, TPOT 20 + 10, TTFT 100 + 75


def _data_values(spec):
    if isinstance(spec, dict):
        if isinstance(spec.get("data"), dict) and "values" in spec["data"]:
            yield spec["data"]["values"]
        for v in spec.values():
            yield from _data_values(v)
    elif isinstance(spec, list):
        for v in spec:
            yield from _data_values(v)


def test_cap_table_states_observed_and_estimated_with_ranges(tmp_path):
    s = _serving(serving_day(tmp_path / "data"))
    table = next(b for b in s.blocks if isinstance(b, Table) and "α source" in b.columns)
    col = {c: i for i, c in enumerate(table.columns)}
    rows = {(r[col["entity"]], r[col["cap (% of limit)"]]): r for r in table.rows}
    assert len(table.rows) == 3 * 5  # two endpoints and a job, five caps
    at_limit = rows[("ep-a", "100%")]
    assert at_limit[col["est. energy change (%)"]] == 0.0 and at_limit[col["time above cap (%)"]] == 10.0
    low = rows[("ep-a", "80%")]
    # 560 W cap: 50 % of the time above, each such second 650 W of demand → 560 × (650/560)^α J
    want = 100 * (0.5 * 560 * (650 / 560) ** 0.2 + 0.5 * 400) / 400 - 100
    assert low[col["est. energy change (%)"]] == pytest.approx(want, abs=0.051)
    assert low[col["α (low–high)"]] == "0.2 (0.1–0.5)" and low[col["α source"]] == "uncalibrated"
    lo, hi = (float(v) for v in low[col["energy range (%)"]].split(" to "))
    assert lo < low[col["est. energy change (%)"]] < hi
    clusters = next(b for b in s.blocks if isinstance(b, Table) and "extra hosts at cap" in b.columns)
    assert [r[1] for r in clusters.rows] == ["100%", "90%", "80%", "70%", "60%"]
    assert clusters.rows[-1][4] == 1440.0 and clusters.rows[-1][5] == 3


def test_without_latency_columns_the_section_says_so_and_skips_the_chart(tmp_path):
    s = _serving(serving_day(tmp_path / "data", latency=False))
    assert s.error is None and not s.missing
    assert [c.name for c in s.charts] == ["power_cap_tradeoff"]
    notes = [b.text for b in s.blocks if isinstance(b, Note)]
    assert any("no latency columns (tpot_p50_ms, ttft_p50_ms)" in n for n in notes), notes


def test_without_the_cap_table_the_section_says_it_is_not_available(tmp_path):
    s = _serving(serving_day(tmp_path / "data", caps=False))
    assert s.error is None
    assert any("power_cap_whatif" in why for why in s.missing)
    assert [c.name for c in s.charts] == ["serving_frontier"]


def test_headline_j_per_token_is_token_weighted(tmp_path):
    report = build_report(serving_day(tmp_path / "data"), DATE, tmp_path / "out", png=False)
    head = json.loads(report.json_path.read_text())["headline"]
    # 'all' rows (batch 6): ep-a 1000 prompt / 200 output tokens, ep-b twice that, ep-b's J per output token × 1.1
    assert head["j_per_prompt_token"] == pytest.approx(0.3 / 6 ** 0.5, abs=1e-4)
    assert head["j_per_output_token"] == pytest.approx((5 / 6 ** 0.5) * (1 + 2 * 1.1) / 3, abs=1e-4)
    assert "serving" in json.loads(report.json_path.read_text())["sections"]


def test_frontier_leaves_out_buckets_without_energy_or_with_few_requests(tmp_path):
    data_dir = tmp_path / "data"
    two_host_inventory(data_dir)
    rows = ept_serving_rows(DATE, ENDPOINTS)
    for row in rows:
        row["requests_with_power"] = 40
    cheap = [dict(r, bucket="32+", j_per_output_token=0.0) for r in rows if r["bucket"] == "16+"]  # cut off: 0 J
    few = [dict(r, bucket="64+", j_per_output_token=0.01, requests_with_power=2) for r in rows if r["bucket"] == "16+"]
    schema = EPT_SERVING_SCHEMA.append(pa.field("requests_with_power", pa.int64()))
    write_table(data_dir, "energy_per_token", DATE, rows + cheap + few, schema)
    warehouse.publish(data_dir)
    s = _serving(data_dir)
    chart = next(c for c in s.charts if c.name == "serving_frontier")
    values = next(v for v in _data_values(chart.chart.to_dict()))
    assert {p["bucket"] for p in values} == {"1", "2-3", "4-7", "8-15", "16+"}
    assert "4 bucket(s) left out" in chart.caption
