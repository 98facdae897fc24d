"""The `wattline` command: user mistakes are one line and exit 2; `sql` is read-only."""

import json

import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.runner import run_day
from tests.builders import DAY, write_square_fleet


def _run(*args, env=None):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def _one_line_error(result, *fragments):
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0]


def test_bad_date_is_one_line(tmp_path):
    _one_line_error(_run("run", "--date", "2026-13-01", "--data-dir", str(tmp_path)), "bad date '2026-13-01'")


def test_missing_and_empty_data_dir(tmp_path):
    missing = tmp_path / "nope"
    _one_line_error(_run("run", "--date", "2026-11-30", "--data-dir", str(missing)), "does not exist")
    _one_line_error(_run("sql", "select 1", "--data-dir", str(missing)), "does not exist")
    _one_line_error(_run("run", "--date", "2026-11-30", "--data-dir", str(tmp_path)), "no power, requests or job_events Parquet for 2026-11-30")
    _one_line_error(_run("sql", "select 1", "--data-dir", str(tmp_path)), "has no Parquet data yet")
    _one_line_error(_run("ui", "--data-dir", str(missing)), "does not exist")


def test_data_dir_from_environment(tmp_path):
    result = _run("run", "--date", "2026-11-30", env={"WATTLINE_DATA_DIR": str(tmp_path / "env-dir")})
    _one_line_error(result, str(tmp_path / "env-dir"))


@pytest.fixture(scope="module")
def built_dir(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("cli") / "data"
    write_square_fleet(data_dir, seconds=120)
    assert run_day(data_dir, DAY.isoformat()).success
    return data_dir


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


@pytest.mark.parametrize(
    "statement, reason",
    [
        ("create table x as select 1", "CREATE"),
        ("insert into inventory_gpus select * from inventory_gpus", "INSERT"),
        ("delete from inventory_gpus", "DELETE"),
        ("drop view power_1s", "DROP"),
        ("copy (select 1) to 'out.csv'", "COPY"),
        ("attach 'other.duckdb' as o", "ATTACH"),
        ("install httpfs", "LOAD"),
        ("load httpfs", "LOAD"),
        ("set enable_external_access = true", "SET"),
        ("select 1; select 2", "one statement"),
    ],
)
def test_sql_refuses_writes_and_escapes(built_dir, statement, reason):
    _one_line_error(_run("sql", statement, "--data-dir", str(built_dir)), reason)


def test_sql_cannot_read_host_files(built_dir):
    result = _run("sql", "select * from read_csv('/etc/passwd')", "--data-dir", str(built_dir))
    _one_line_error(result, "Permission Error", "/etc/passwd")


def test_sql_unknown_table_is_one_line(built_dir):
    _one_line_error(_run("sql", "select * from no_such_table", "--data-dir", str(built_dir)), "no_such_table")


def test_definitions_load():
    from pipeline.definitions import defs

    job = defs.resolve_job_def("daily_job")
    assert {"power_1s", "fleet_power_1s"} <= set(job.graph.node_names())
    assert defs.resolve_schedule_def("daily_job_schedule") is not None
    assert defs.resolve_sensor_def("new_parquet_sensor") is not None
