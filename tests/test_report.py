"""The daily report on constructed data: with and without each analytics table, known numbers,
the point and size budgets, the asset in the daily job, the `wattline report` command."""

import datetime as dt
import json

import pytest
from click.testing import CliRunner

from pipeline.cli import main
from reports import charts
from reports.daily import build_report, build_sections, write_report
from reports.sections.base import Note, Table
from tests.days import copy_of
from tests.report_fixtures import DATE, foundation_only, with_all_tables
from tests.report_tables import SCHEMAS, SECTION_OF, write_analytics_tables


@pytest.fixture(scope="module")
def built(report_day):
    """The session's square-wave day with requests (read only: a test that writes copies it)."""
    return report_day.data_dir, report_day.outcome


@pytest.fixture(scope="module")
def full(built, tmp_path_factory):
    """`built` plus every analytics table (issues 3 and 8) with its documented columns."""
    return with_all_tables(built[0], tmp_path_factory.mktemp("report-full") / "data")


def _by_key(sections):
    return {s.key: s for s in sections}


def test_report_asset_runs_last_in_the_daily_job(built, report_day):
    data_dir, outcome = built
    assert outcome.materialized[-1] == "daily_report"
    out = report_day.reports_dir  # where that day's run wrote its report
    page = (out / f"{DATE}.html").read_text()
    assert "wattline daily report: 2026-11-30" in page
    summary = json.loads((out / f"{DATE}.json").read_text())
    # 10 minutes: train-0 2 GPUs × 400 W mean, infer-0 2 × 200 W → 1.2 kW for 600 s = 0.2 kWh.
    assert summary["headline"]["fleet_energy_kwh"] == pytest.approx(1200 * 600 / 3.6e6, rel=0.01)


def test_sections_without_analytics_tables_say_not_available(built, tmp_path):
    data_dir = foundation_only(built[0], tmp_path / "data")
    sections = _by_key(build_sections(data_dir, DATE))
    assert all(s.error is None for s in sections.values()), {k: s.error for k, s in sections.items()}
    assert not sections["fleet_power"].missing
    for table, keys in SECTION_OF.items():
        for key in keys:
            assert any(table in why for why in sections[key].missing), (table, sections[key].missing)
    # The foundation tables still give numbers and charts.
    assert [c.name for c in sections["fleet_power"].charts] == ["fleet_power"]
    checks = sections["quality"].headline["checks"]
    assert checks["evaluated"] >= 6 and checks["failed"] >= 1  # gpu_coverage WARNs on a 10-minute day


def test_every_section_complete_with_all_tables(full, tmp_path):
    report = build_report(full, DATE, tmp_path / "out", png=True)
    sections = _by_key(report.sections)
    assert {k: (s.missing, s.error) for k, s in sections.items() if s.missing or s.error} == {}
    names = set(report.points)
    assert {"headline_roles", "headline_headroom", "fleet_power", "swing_distribution", "inference_window", "phase_shares",
            "j_per_token_batch", "correlation_heatmap", "coincidence", "diurnal", "coverage", "swing_projection"} <= names
    assert {p.name for p in report.pngs} == {f"{n}.png" for n in names}
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in report.pngs)
    summary = json.loads(report.json_path.read_text())
    assert all(s["complete"] for s in summary["sections"].values())
    assert summary["headline"]["max_2s_swing_pct"]["role:training"] == 80.0
    assert summary["headline"]["headroom_pct"] == {"c0": 25.0}
    assert summary["headline"]["roles"]["training"]["mean_pct"] == 40.0  # from power_summary
    page = report.html_path.read_text()
    assert "37.5" in page and "not available yet" not in page.lower()


def test_shading_and_diurnal_profile_come_from_their_tables(full):
    sections = _by_key(build_sections(full, DATE))
    window = next(c for c in sections["inference"].charts if c.name == "inference_window")
    spec = window.chart.to_dict()
    assert "rect" in json.dumps(spec)  # prefill/decode shading layer
    # The diurnal_profile table has no date column: its rows are read from the day's partition.
    assert "p5" in json.dumps(sections["diurnal"].charts[0].chart.to_dict())


def test_diurnal_table_states_each_entitys_peak_over_trough(full):
    """report_tables: mean_w = 1000 + 20 × hour, so the peak (23:00, 1,460 W) over the trough (00:00) is 1.46."""
    from reports.sections.base import Table

    table = next(b for b in _by_key(build_sections(full, DATE))["diurnal"].blocks if isinstance(b, Table))
    col = table.columns.index("power peak/trough")
    assert {row[1]: row[col] for row in table.rows}["inference"] == pytest.approx(1.46)


@pytest.mark.parametrize("table", sorted(SECTION_OF))
def test_each_missing_table_only_marks_its_section(full, tmp_path, table):
    import shutil

    from pipeline import warehouse

    data_dir = tmp_path / "data"
    shutil.copytree(full, data_dir, ignore=shutil.ignore_patterns(".dagster"))
    shutil.rmtree(data_dir / "derived" / table)
    warehouse.publish(data_dir)
    sections = build_sections(data_dir, DATE)
    assert all(s.error is None for s in sections)
    partial = {s.key: s.missing for s in sections if s.missing}
    assert set(partial) == SECTION_OF[table], partial
    for key in SECTION_OF[table]:
        assert any(table in why for why in partial[key])


def test_table_with_a_renamed_column_is_reported_not_raised(full, tmp_path):
    import shutil

    import pyarrow.parquet as pq

    from pipeline import warehouse

    data_dir = tmp_path / "data"
    shutil.copytree(full, data_dir, ignore=shutil.ignore_patterns(".dagster"))
    for path in warehouse.day_parts(data_dir, "swing_stats", DATE):  # the fleet-day's part and each cluster-day's
        t = pq.read_table(path)
        pq.write_table(t.rename_columns(["max_swing_watts" if c == "max_swing_w" else c for c in t.column_names]), path)
    warehouse.publish(data_dir)
    sections = _by_key(build_sections(data_dir, DATE))
    assert sections["swings"].error is None
    assert any("lacks column(s) max_swing_w" in why for why in sections["swings"].missing)


def test_empty_data_dir_gives_a_report_of_missing_sections(tmp_path):
    data_dir = tmp_path / "empty"
    data_dir.mkdir()
    path = write_report(data_dir, DATE, tmp_path / "out", png=False)
    assert path.exists() and "not available yet" in path.read_text().lower()


def test_the_pages_javascript_is_built_once_and_kept_beside_the_reports(tmp_path, monkeypatch):
    """vl-convert's bundle of Vega, Vega-Lite and vega-embed costs ~1.7 s of CPU to build: a later
    report into the same folder (another process, another day) inlines the kept copy, the same bytes."""
    import re

    import vl_convert

    data_dir = tmp_path / "empty"
    data_dir.mkdir()
    out = tmp_path / "out"
    first = write_report(data_dir, DATE, out, png=False).read_text()
    kept = list((out / ".cache").glob("vega-bundle-*.js"))
    assert len(kept) == 1 and kept[0].read_text() in first and kept[0].stat().st_size > 500_000

    def no_build(*args, **kwargs):
        raise AssertionError("the bundle was built again")

    monkeypatch.setattr(vl_convert, "javascript_bundle", no_build)
    second = write_report(data_dir, DATE, out, png=False).read_text()
    generated = re.compile(r"generated \d{4}-\d\d-\d\d \d\d:\d\d UTC")
    assert generated.sub("", second) == generated.sub("", first)
    assert [p.name for p in (out / ".cache").iterdir()] == [kept[0].name]  # no temporary file left


def test_thousand_gpu_fleet_stays_within_budgets(tmp_path):
    """A day of role/cluster power for 125 hosts × 8 GPUs: ≤ 5,000 points per chart, HTML < 5 MB."""
    from tests.scale_fleet import write_scale_fleet

    data_dir = tmp_path / "data"
    hosts, clusters, endpoints, gpus = write_scale_fleet(data_dir, DATE)
    write_analytics_tables(data_dir, DATE, hosts=hosts, clusters=clusters, endpoints=endpoints, gpus=gpus, seconds=3600)
    report = build_report(data_dir, DATE, tmp_path / "out", png=False)
    assert all(s.error is None for s in report.sections), [s.error for s in report.sections]
    assert max(report.points.values()) <= charts.MAX_POINTS, report.points
    assert report.html_path.stat().st_size < 5 * 1024 * 1024
    assert report.points["fleet_power"] > 2000  # a whole day at 1 minute, not a handful of points


def test_cli_report_writes_html_json_png(built, tmp_path):
    data_dir, _ = built
    out = tmp_path / "cli-out"
    result = CliRunner().invoke(main, ["report", "--date", DATE, "--out", str(out), "--data-dir", str(data_dir)])
    assert result.exit_code == 0, result.output
    assert (out / f"{DATE}.html").exists() and (out / f"{DATE}.json").exists()
    assert (out / DATE / "fleet_power.png").exists()
    assert f"{DATE}.html" in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["report", "--date", "2026-13-01"], "bad date"),
        (["report", "--date", DATE, "--data-dir", "/nonexistent/wattline"], "does not exist"),
    ],
)
def test_cli_report_user_errors(args, message):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_documented_columns_cover_every_contract_table():
    # The report is built against these; keep them in step with the issues' column lists.
    assert {"phase_segments", "energy_per_token", "swing_stats", "coincidence", "diurnal_profile", "power_headroom"} <= set(SCHEMAS)


@pytest.mark.slow  # a rerun of the day while readers query in a loop (minutes on a busy 2-core machine)
def test_readers_work_while_a_run_writes(report_day, tmp_path):
    """`wattline sql` and the report read the republished catalog read-only, never a writer's lock."""
    import threading

    from pipeline.readonly import run_query
    from pipeline.runner import run_day

    data_dir = copy_of(report_day, tmp_path / "data")  # the rerun writes
    before = run_query(data_dir, "select count(*) as n from power_1s").column("n")[0].as_py()
    done = threading.Event()
    result = {}

    def rerun():
        try:
            result["outcome"] = run_day(data_dir, DATE, selection=["power_1s", "fleet_power_1s"])
        finally:
            done.set()

    thread = threading.Thread(target=rerun)
    thread.start()
    counts = []
    while not done.is_set() or not counts:
        counts.append(run_query(data_dir, "select count(*) as n from power_1s").column("n")[0].as_py())
    thread.join()
    assert result["outcome"].success
    assert set(counts) == {before}  # old day or new day, identical rows, never an error or a half file


def test_diurnal_overlays_the_trailing_days(built, tmp_path):
    """A second day of role power one day earlier: the diurnal chart draws one line per day."""
    import duckdb

    from pipeline import warehouse

    data_dir = foundation_only(built[0], tmp_path / "data")
    src = data_dir / "derived" / "fleet_power_1s" / f"date={DATE}" / "part-0.parquet"
    prev = data_dir / "derived" / "fleet_power_1s" / "date=2026-11-29"
    prev.mkdir()
    duckdb.sql(
        f"""COPY (SELECT * REPLACE (date - 1 AS date, ts - INTERVAL 1 DAY AS ts, power_w * 0.5 AS power_w)
                 FROM read_parquet('{src}')) TO '{prev / "part-0.parquet"}' (FORMAT parquet)"""
    )
    warehouse.publish(data_dir)
    sections = _by_key(build_sections(data_dir, DATE))
    spec = json.dumps(sections["diurnal"].charts[0].chart.to_dict())
    assert "2026-11-29" in spec and "2026-11-30" in spec


@pytest.mark.slow  # a second run of the day's power_1s
def test_quality_counts_quarantined_files_and_rows(built, tmp_path):
    """A damaged power file quarantined by the pipeline and two ingestion rejects show up in the
    data-quality section and the JSON."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.runner import run_day

    data_dir = tmp_path / "data"
    shutil.copytree(built[0], data_dir)
    victim = sorted((data_dir / "power" / f"date={DATE}" / "host=infer-0").glob("*.parquet"))[0]
    victim.write_bytes(victim.read_bytes()[:100])  # truncated: unreadable
    rejects = data_dir / "quarantine" / "requests" / f"date={DATE}"
    rejects.mkdir(parents=True)
    pq.write_table(pa.table({"reason": ["bad json: line 3", "bad json: line 9"], "raw": [b"{", b"}"]}), rejects / "part.parquet")
    run_day(data_dir, DATE, selection=["power_1s"])  # the first step to read the power files quarantines the truncated one
    quality = _by_key(build_sections(data_dir, DATE))["quality"]
    assert quality.error is None
    assert quality.headline["quarantined_rows"] == {"requests": 2}
    assert quality.headline["quarantined_files"] == {"power:unreadable": 1}


def test_swing_events_slide_the_grid_exactly_as_swing_stats(built):
    """The events table's largest swing of each cluster, role and host equals swing_stats' max 2 s
    swing of that entity (both slide 2 s windows over the complete slots of the same grid), and
    each event's from → to are the extremes inside its window."""
    from reports.data import Reader, RunHistory
    from reports.sections import swings
    from reports.sections.base import Ctx

    data_dir = built[0]
    reader = Reader.open(data_dir)
    try:
        ctx = Ctx(reader=reader, data_dir=data_dir, date=DATE, history=RunHistory(available=False))
        events = swings.top_events(ctx, ("cluster", "role")) + swings.top_events(ctx, ("host",))
        stats = {(x["level"], x["entity"]): x["max_swing_w"] for x in reader.rows(
            f"SELECT level, entity, max_swing_w FROM swing_stats WHERE date = DATE '{DATE}' AND window_s = 2 "
            "AND series = 'instant' AND level IN ('cluster', 'role', 'host')")}
    finally:
        reader.close()
    assert events and stats
    best: dict = {}
    for ev in events:
        best[(ev["level"], ev["entity"])] = max(best.get((ev["level"], ev["entity"]), 0.0), ev["swing_w"])
        assert abs(ev["to_w"] - ev["from_w"]) == pytest.approx(ev["swing_w"], rel=1e-9)
        assert ev["grid_step_ms"] == 100 and ev["table"] == "fleet_power_100ms"
    for key, swing in best.items():
        assert swing == pytest.approx(stats[key], rel=1e-6), key
    assert [e["swing_pct"] for e in events[:10]] == sorted((e["swing_pct"] for e in events[:10]), reverse=True)


def test_swing_events_known_answer_on_a_constructed_grid(tmp_path):
    """A cluster ramps 10 W per 100 ms slot for 10 s: the largest change inside a 2 s window (20
    slots) is 190 W (a 1 s window would see 90 W, a 1 s series less). A 5 kW jump through an
    incomplete slot is not a swing of the grid. Its event ends at the ramp's last slot inside the
    window, from the window's first slot."""
    from pipeline import warehouse
    from reports.data import Reader, RunHistory
    from reports.sections import swings
    from reports.sections.base import Ctx
    from tests.report_tables import _schema, _ts, write_table

    rows = []
    for k in range(600):  # 60 s of slots; ramp from slot 100 to 200, flat elsewhere
        w = 1000.0 + 10.0 * min(max(k - 100, 0), 100)
        complete = k != 400
        if k == 400:
            w = 7000.0  # one incomplete slot: partial sums are left out of swings
        rows.append({"date": dt.date.fromisoformat(DATE), "level": "cluster", "entity": "c9", "ts": _ts(DATE, k / 10),
                     "power_w": w, "power_avg_w": None, "gpus_reporting": 8, "complete": complete})
    schema = _schema("date:d", "level:s", "entity:s", "ts:t", "power_w:f", "power_avg_w:f", "gpus_reporting:i", "complete:b")
    data_dir = tmp_path / "data"
    write_table(data_dir, "fleet_power_100ms", DATE, rows, schema)
    write_table(data_dir, "fleet_power_1s", DATE, [
        {"date": dt.date.fromisoformat(DATE), "level": "cluster", "entity": "c9", "ts": _ts(DATE, 0), "power_w": 1000.0, "provisioned_w": 5600.0}
    ], _schema("date:d", "level:s", "entity:s", "ts:t", "power_w:f", "provisioned_w:f"))
    warehouse.publish(data_dir)
    reader = Reader.open(data_dir)
    try:
        events = swings.top_events(Ctx(reader=reader, data_dir=data_dir, date=DATE, history=RunHistory(available=False)), ("cluster", "role"))
    finally:
        reader.close()
    assert events, events
    top = events[0]
    assert top["swing_w"] == pytest.approx(190.0) and top["swing_pct"] == pytest.approx(100 * 190 / 5600)
    # the first window holding 20 ramp slots ends at slot 119 (11.9 s): from slot 100's 1000 W to 1190 W
    assert top["t_ms"] == int(_ts(DATE, 11.9).timestamp() * 1000)
    assert (top["from_w"], top["to_w"]) == (pytest.approx(1000.0), pytest.approx(1190.0))
    assert len(events) == 1  # one event per entity and minute; the incomplete 7 kW slot is in no window


def _naive_top_events(slots: dict, provisioned: dict, limit: int = 10) -> list[tuple]:
    """top_events' rule, slot by slot: each complete slot t's window (t − 2 s, t]; per entity and
    minute the largest swing at its earliest slot; ranked by % of provisioned (none last), W, time;
    from → to the window's first maximum and first minimum in time order."""
    found = []
    for key, series in slots.items():  # key: (level, entity); series: [(t_ms, w)] of complete slots, in time order
        best: dict = {}
        for i, (t, _) in enumerate(series):
            inside = [(u, w) for u, w in series[: i + 1] if u > t - 2000]
            ws = [w for _, w in inside]
            swing = max(ws) - min(ws)
            if swing > 0 and (t // 60_000 not in best or swing > best[t // 60_000][1]):
                hi, lo = inside[ws.index(max(ws))], inside[ws.index(min(ws))]
                best[t // 60_000] = (t, swing, *(w for _, w in sorted([lo, hi])))
        p = provisioned.get(key)
        found += [(key, t, swing, None if p is None else 100 * swing / p, a, b) for t, swing, a, b in best.values()]
    found.sort(key=lambda e: (e[3] is None, -(e[3] or 0), -e[2], e[1], e[0]))
    return found[:limit]


def test_swing_events_equal_a_slot_by_slot_reference_with_ties_gaps_and_no_provisioned(tmp_path):
    """Random steps and plateaus (many windows tie for a minute's largest swing), incomplete slots,
    a missing slot and an entity without provisioned power: the events table equals the rule
    evaluated slot by slot (the instant, swing, % and from → to of each)."""
    import random

    from pipeline import warehouse
    from reports.data import Reader, RunHistory
    from reports.sections import swings
    from reports.sections.base import Ctx
    from tests.report_tables import _schema, _ts, write_table

    rng = random.Random(7)
    day = dt.date.fromisoformat(DATE)
    rows, slots = [], {}
    for level, entity in (("cluster", "c1"), ("cluster", "c2"), ("role", "inference"), ("role", "training")):
        w, series = 1000.0, []
        for k in range(1800):  # 3 minutes of 100 ms slots
            if rng.random() < 0.03:
                w = float(rng.choice([600, 800, 1000, 1200, 1400]))  # steps: plateaus tie
            if k == 900 and entity == "c2":
                continue  # a missing slot
            complete = rng.random() > 0.02
            rows.append({"date": day, "level": level, "entity": entity, "ts": _ts(DATE, k / 10), "power_w": w if complete else 9000.0,
                         "power_avg_w": None, "gpus_reporting": 8, "complete": complete})
            if complete:
                series.append((int(_ts(DATE, k / 10).timestamp() * 1000), w))
        slots[(level, entity)] = series
    provisioned = {("cluster", "c1"): 2000.0, ("cluster", "c2"): 2000.0, ("role", "inference"): 4000.0}  # training: none
    write_table(tmp_path / "data", "fleet_power_100ms", DATE, rows,
                _schema("date:d", "level:s", "entity:s", "ts:t", "power_w:f", "power_avg_w:f", "gpus_reporting:i", "complete:b"))
    write_table(tmp_path / "data", "fleet_power_1s", DATE, [
        {"date": day, "level": lv, "entity": e, "ts": _ts(DATE, 0), "power_w": 1.0, "provisioned_w": p} for (lv, e), p in provisioned.items()
    ], _schema("date:d", "level:s", "entity:s", "ts:t", "power_w:f", "provisioned_w:f"))
    warehouse.publish(tmp_path / "data")
    reader = Reader.open(tmp_path / "data")
    try:
        ctx = Ctx(reader=reader, data_dir=tmp_path / "data", date=DATE, history=RunHistory(available=False))
        for limit in (12, 5):  # every minute of every entity; the top 5 only
            events = swings.top_events(ctx, ("cluster", "role"), limit=limit)
            got = [((e["level"], e["entity"]), e["t_ms"], e["swing_w"], e["swing_pct"], e["from_w"], e["to_w"]) for e in events]
            assert got == _naive_top_events(slots, provisioned, limit=limit)
    finally:
        reader.close()
    assert len(got) == 5 and got[0][3] is not None


def test_failed_checks_listed_first_passed_ones_folded_under_a_count(built, tmp_path):
    from reports.daily import _block
    from reports.sections.base import Collapsed, Table

    data_dir = foundation_only(built[0], tmp_path / "data")
    quality = _by_key(build_sections(data_dir, DATE))["quality"]
    checks = quality.headline["checks"]
    tables = [b for b in quality.blocks if isinstance(b, Table) and "check" in b.columns]
    folded = [b for b in quality.blocks if isinstance(b, Collapsed)]
    # Only failed checks are in the open table; the passed ones sit under one summary with their count.
    assert len(tables) == 1 and {row[2] for row in tables[0].rows} == {"FAILED"}
    assert len(tables[0].rows) == checks["failed"] >= 1
    assert len(folded) == 1 and folded[0].summary.startswith(f"{checks['evaluated'] - checks['failed']} passed check")
    assert quality.blocks.index(tables[0]) < quality.blocks.index(folded[0])
    assert {row[2] for row in folded[0].blocks[0].rows} == {"passed"}
    page = _block(folded[0])
    assert page.startswith('<details class="collapsed"><summary>') and "<table>" in page and " open" not in page.split(">")[0]


def _axis_titles(spec, found):
    """Every quantitative or temporal position encoding's axis title in a Vega-Lite spec."""
    if isinstance(spec, dict):
        enc = spec.get("encoding")
        if isinstance(enc, dict):
            for channel in ("x", "y"):
                e = enc.get(channel)
                if isinstance(e, dict) and e.get("type") in ("quantitative", "temporal") and "field" in e:
                    title = e.get("title", (e.get("axis") or {}).get("title") if isinstance(e.get("axis"), dict) else None)
                    found.append((channel, e["field"], title))
        for key, value in spec.items():
            if key not in ("datasets", "data"):
                _axis_titles(value, found)
    elif isinstance(spec, list):
        for item in spec:
            _axis_titles(item, found)
    return found


def test_every_chart_axis_names_its_unit(full):
    import re

    sections = build_sections(full, DATE)
    titled, unitless = [], []
    for s in sections:
        for c in s.charts:
            for channel, field, title in _axis_titles(c.chart.to_dict(), []):
                if title is None:  # a layer sharing the first layer's axis
                    continue
                titled.append(c.name)
                # A unit in parentheses ("power (kW, 1 min means)", "(0–1)", "(UTC)") or a percentage.
                if not (re.search(r"\([^)]+\)", title) or "%" in title):
                    unitless.append((c.name, channel, field, title))
    assert unitless == []
    assert {"fleet_power", "j_per_token_batch", "phase_shares", "swing_distribution", "coincidence"} <= set(titled)
    fleet = next(c for s in sections for c in s.charts if c.name == "fleet_power")
    assert any(re.fullmatch(r"power \(k?W, \d+ (min|s) means\)", t or "") for _, _, t in _axis_titles(fleet.chart.to_dict(), []))


def test_batch_buckets_without_energy_or_with_few_requests_left_out_with_a_count(full):
    inference = _by_key(build_sections(full, DATE))["inference"]
    chart = next(c for c in inference.charts if c.name == "j_per_token_batch")
    spec = chart.chart.to_dict()
    values = [v for d in spec.get("datasets", {}).values() for v in d] or spec["data"]["values"]
    buckets = {v["bucket"] for v in values}
    # "32+" holds one request cut off by the day's end at 0 J: never plotted as 0 J per token.
    assert "32+" not in buckets and {"1", "2-3", "4-7", "8-15", "16+"} <= buckets
    assert all(v["j"] > 0 for v in values)
    endpoints = {v["endpoint"] for v in values}
    left_out = 2 * len(endpoints)  # prompt and output point of each endpoint's "32+" bucket
    assert inference.headline["j_per_token_batch_points_left_out"] == left_out
    assert f"{left_out} bucket point(s) left out" in chart.caption


def test_batch_points_keep_only_buckets_with_energy_and_enough_requests():
    from reports.sections.inference import MIN_BUCKET_REQUESTS, batch_points

    rows = [
        {"endpoint": "a", "bucket": "1", "j_per_prompt_token": 0.3, "j_per_output_token": 5.0, "requests_with_power": MIN_BUCKET_REQUESTS},
        {"endpoint": "a", "bucket": "2-3", "j_per_prompt_token": 0.2, "j_per_output_token": 4.0, "requests_with_power": MIN_BUCKET_REQUESTS - 1},
        {"endpoint": "a", "bucket": "4-7", "j_per_prompt_token": 0.0, "j_per_output_token": None, "requests_with_power": 50},
        {"endpoint": "b", "bucket": "1", "j_per_prompt_token": 0.4, "j_per_output_token": 6.0, "requests_with_power": None},  # no count column
    ]
    points, left_out = batch_points(rows)
    kept = {(p["endpoint"], p["bucket"], p["token"]) for p in points}
    assert kept == {("a", "1", "prompt"), ("a", "1", "output"), ("b", "1", "prompt"), ("b", "1", "output")}
    assert left_out == 4


def test_spike_lift_and_swing_projection_reach_the_report(full):
    sections = _by_key(build_sections(full, DATE))
    corr = next(b for b in sections["correlation"].blocks if isinstance(b, Table) and any("lift" in c for c in b.columns))
    lift = next(i for i, c in enumerate(corr.columns) if "lift" in c)
    assert {row[lift] for row in corr.rows} == {1.02}
    swings = sections["swings"]
    table = next(b for b in swings.blocks if isinstance(b, Table) and "band (% prov.)" in b.columns)
    pub = {(row[0], row[3]): row for row in table.rows if row[-1] is not None}
    assert set(pub) == {("inference", 2048.0), ("training", 1024.0)}
    assert pub[("inference", 2048.0)][-1] == 9.0 and pub[("training", 1024.0)][4] == 80.0  # training stays in step
    # The headline's small-fleet note carries the projection's value at the published scale.
    notes = " ".join(b.text for b in sections["headline"].blocks if isinstance(b, Note))
    assert "Projected from this day's own series to 1,024 GPUs" in notes and "job-a 80.0%" in notes


def test_swing_projection_missing_marks_the_swings_section_partial(built, tmp_path):
    swings = _by_key(build_sections(foundation_only(built[0], tmp_path / "data"), DATE))["swings"]
    assert any("swing_projection" in why for why in swings.missing)


def _page_specs(html: str) -> dict[str, dict]:
    """The chart specs a built report's page embeds (what vega-embed draws)."""
    import re

    found = re.search(r"const SPECS = (\{.*?\});\n", html, re.S)
    assert found, "no SPECS in the page"
    return json.loads(found.group(1))


def _drawn_text(node, in_title=False):
    """Every title, subtitle and tooltip title of a spec, and every string value of its inline
    data (shown by tooltips and text marks)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("data", "datasets"):
                yield from (v for v in _strings(value))
            else:
                yield from _drawn_text(value, in_title or key in ("title", "subtitle"))
    elif isinstance(node, list):
        for value in node:
            yield from _drawn_text(value, in_title)
    elif in_title and isinstance(node, str):
        yield node


def _strings(node):
    if isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)
    elif isinstance(node, str):
        yield node


def test_no_chart_title_or_tooltip_in_the_built_report_shows_a_backtick(full, tmp_path):
    """Vega draws titles and tooltips as plain text: a backtick there would show as one."""
    report = build_report(full, DATE, tmp_path / "out", png=False)
    specs = _page_specs(report.html_path.read_text())
    assert set(report.points) == set(specs) and len(specs) >= 12
    shown = {name: [t for t in _drawn_text(spec) if "`" in t] for name, spec in specs.items()}
    assert {name: texts for name, texts in shown.items() if texts} == {}
    assert sum(1 for spec in specs.values() for _ in _drawn_text(spec)) > 100  # titles and data were read


def test_chart_titles_lose_the_captions_code_backticks_and_keep_their_data():
    import altair as alt

    chart = alt.Chart(alt.Data(values=[{"x": 1, "y": 2, "name": "power_1s"}]), title=alt.TitleParams(
        "From `swing_stats`", subtitle=["the `fleet_power_100ms` grid", "as `power_headroom` resamples"])).mark_point().encode(
        x=alt.X("x:Q", title="swing (`%` of provisioned)"), color=alt.Color("name:N", title="`table`"),
        tooltip=[alt.Tooltip("y:Q", title="`y` (W)"), "name:N"])
    spec = charts.plain_titles(chart.to_dict())
    titles = list(_drawn_text({k: v for k, v in spec.items() if k not in ("data", "datasets")}))
    assert "From swing_stats" in titles and "the fleet_power_100ms grid" in titles and "y (W)" in titles
    assert "swing (% of provisioned)" in titles and "table" in titles
    assert not any("`" in t for t in titles)
    assert spec["data"] == chart.to_dict()["data"]


def _chart_names_in_sections() -> set[str]:
    """Every chart name a section can add: the first argument of each ``Chart(...)`` in reports/sections/."""
    import ast
    from pathlib import Path

    import reports.sections

    names = set()
    for path in Path(reports.sections.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Chart" and node.args \
                    and isinstance(node.args[0], ast.Constant):
                names.add(node.args[0].value)
    return names


def test_every_chart_the_report_builds_follows_the_vega_lite_schema(full, tmp_path):
    """A run builds and renders its charts without altair's schema validation (most of what a chart
    cost): here every chart a report can build, exactly as its page embeds it, is validated against
    the Vega-Lite schema, so a spec error still fails a test."""
    import jsonschema
    from altair.vegalite.v6.schema.core import Root

    from tests.test_report_serving import serving_day

    specs = _page_specs(build_report(full, DATE, tmp_path / "out", png=False).html_path.read_text())
    specs |= _page_specs(build_report(serving_day(tmp_path / "serving"), DATE, tmp_path / "out-serving", png=False).html_path.read_text())
    assert set(specs) == _chart_names_in_sections() and len(specs) >= 14
    invalid = {}
    for name, spec in specs.items():
        try:
            Root.validate(spec)
        except jsonschema.ValidationError as exc:
            invalid[name] = exc.message
    assert invalid == {}
    broken = json.loads(json.dumps(specs["fleet_power"]))
    broken["width"] = "wide"
    with pytest.raises(jsonschema.ValidationError):  # the validator does see a bad value
        Root.validate(broken)


@pytest.mark.parametrize("batch", [100, 1])
def test_latest_materialization_per_partition_with_one_query_per_asset(batch, monkeypatch):
    """The quality section lists each asset's newest materialization of the day and of each
    cluster-day: read with one query per asset (and one per partition the first records did
    not reach, here forced with a batch of 1), the same records as one query per partition."""
    from dagster import AssetKey, AssetMaterialization, DagsterInstance

    from pipeline.constants import CLUSTER_DIM
    from pipeline.partitions import cluster_day_key
    from reports import data

    real = data._latest_materializations
    monkeypatch.setattr(data, "_latest_materializations", lambda i, k, p: real(i, k, p, batch=batch))
    with DagsterInstance.ephemeral() as instance:
        instance.add_dynamic_partitions(CLUSTER_DIM, ["c0", "c1"])
        for rows, partition in [(1, DATE), (2, cluster_day_key(DATE, "c0")), (3, DATE), (4, cluster_day_key(DATE, "c1")),
                                (5, cluster_day_key(DATE, "c0")), (6, "2026-11-29"), (7, cluster_day_key(DATE, "c0"))]:
            instance.report_runless_asset_event(AssetMaterialization("power_1s", partition=partition, metadata={"dagster/row_count": rows}))
        instance.report_runless_asset_event(AssetMaterialization("swing_stats", partition=cluster_day_key(DATE, "c1"),
                                                                 metadata={"dagster/row_count": 8}))
        history = data._history_from(instance, DATE, ["power_1s", "swing_stats", "energy_curve"])
        assert instance.get_asset_keys() and AssetKey("power_1s") in instance.get_asset_keys()
    assert [(m.asset, m.rows) for m in history.materializations] == [
        ("power_1s", 3), ("power_1s [c0]", 7), ("power_1s [c1]", 4), ("swing_stats [c1]", 8)]
