"""The `wattline` command: user mistakes are one line and exit 2.

Missing/empty data dirs and `sql`'s read-only guarantees: tests/faults/test_pipeline_empty_dir.py
and tests/faults/test_pipeline_security.py."""

import json

import pytest

from tests.cli_util import invoke as _run
from tests.cli_util import one_line_error as _one_line_error


def test_bad_date_is_one_line(tmp_path):
    _one_line_error(_run("run", "--date", "2026-13-01", "--data-dir", str(tmp_path)), "bad date '2026-13-01'")


def test_data_dir_from_environment(tmp_path):
    result = _run("run", "--date", "2026-11-30", env={"WATTLINE_DATA_DIR": str(tmp_path / "env-dir")})
    _one_line_error(result, str(tmp_path / "env-dir"))


@pytest.fixture
def built_dir(report_day):
    """The session's ten minutes of the square-wave fleet (tests/days.py): `sql` only reads it."""
    return report_day.data_dir


def test_sql_answers_joins_in_every_format(built_dir, tmp_path):
    q = "select i.role, round(avg(p.mean_w)) as mean_w from power_1s p join inventory_gpus i using (host, gpu) group by all order by 1"
    table = _run("sql", q, "--data-dir", str(built_dir))
    assert table.exit_code == 0 and "inference" in table.output and "(2 rows)" in table.output
    csv = _run("sql", q, "--format", "csv", "--data-dir", str(built_dir))
    assert csv.output.splitlines() == ['"role","mean_w"', '"inference",200', '"training",400']
    js = json.loads(_run("sql", q, "--format", "json", "--data-dir", str(built_dir)).output)
    assert js == [{"role": "inference", "mean_w": 200.0}, {"role": "training", "mean_w": 400.0}]
    out = tmp_path / "r.parquet"
    assert _run("sql", q, "--format", "parquet", "--out", str(out), "--data-dir", str(built_dir)).exit_code == 0
    import pyarrow.parquet as pq

    assert pq.read_table(out).num_rows == 2


def test_sql_prints_a_float_column_as_written_in_every_format(built_dir):
    """A FLOAT (4 bytes: watts, correlations) reads 58.4, not its binary value 58.400001525878906."""
    q = "select 58.4::FLOAT as w, NULL::FLOAT as n, 'NaN'::FLOAT as nan, 3.4e38::FLOAT as big, 1e-7::FLOAT as small, max(mean_w) as mean_w from power_1s"
    js = _run("sql", q, "--format", "json", "--data-dir", str(built_dir)).output
    assert "58.400001525878906" not in js and '"w": 58.4, "n": null, "nan": NaN, "big": 3.4e+38, "small": 1e-07' in js, js
    assert json.loads(js)[0]["mean_w"] == 700.0  # the training square wave's high level
    csv = _run("sql", q, "--format", "csv", "--data-dir", str(built_dir)).output
    assert csv.splitlines()[1].lower().startswith("58.4,,nan,"), csv
    table = _run("sql", q, "--data-dir", str(built_dir)).output
    assert " 58.4 " in table and "58.40000" not in table, table


def test_sql_unknown_table_is_one_line(built_dir):
    _one_line_error(_run("sql", "select * from no_such_table", "--data-dir", str(built_dir)), "no_such_table")


def test_definitions_load():
    from pipeline.definitions import defs

    cluster_job, fleet_job = defs.resolve_job_def("cluster_day_job"), defs.resolve_job_def("fleet_day_job")
    assert {"power_1s", "fleet_power_1s", "swing_stats"} <= set(cluster_job.graph.node_names())
    assert {"fleet__fleet_power_1s", "fleet__swing_stats", "cluster_correlation", "daily_report"} <= set(fleet_job.graph.node_names())
    assert not set(cluster_job.graph.node_names()) & set(fleet_job.graph.node_names())
    assert defs.resolve_schedule_def("daily_schedule") is not None
    assert defs.resolve_sensor_def("new_parquet_sensor") is not None
