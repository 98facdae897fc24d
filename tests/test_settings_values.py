"""Settings are values: resolved once where work starts (a CLI command, the Dagster code location,
``runner.run_day``) and passed down as typed arguments and resource fields. Below those entry
points no module reads the environment or a DuckDB variable back for them, and a run's worker
processes get their DuckDB bound, threads and grid step as an argument, not through os.environ."""

from __future__ import annotations

import ast
import multiprocessing
import re
from pathlib import Path

import duckdb

from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from collectors.settings import DUCKDB_MEMORY_ENV, DUCKDB_THREADS_ENV, GRID_STEP_MS_ENV, Settings
from pipeline import warehouse
from pipeline.tables import Table
from tests.builders import DAY, power_table, square_wave

REPO = Path(__file__).resolve().parents[1]
PIPELINE = REPO / "pipeline"
DATE = DAY.isoformat()

ENTRY_POINTS = {
    "cli": "every command resolves the settings it runs with",
    "definitions.py": "the Dagster code location (`wattline ui`, `dagster dev`): build_definitions without settings",
    "schedules.py": "the code location's schedule (hour, automation)",
    "partitions.py": "the code location's daily partitions (first day)",
    "runner.py": "run_day without settings (the library's way in): the only load() there",
}
OTHER_SETTINGS = {"file_quarantine.py": {"max_file_rows"}, "remote.py": {"work_dir"}}
"""Modules below the entry points that still read a setting of their own (not the DuckDB bound,
threads, grid step, data dir, job_events lookback or caps): only that attribute."""


def _modules():
    return sorted(p for p in PIPELINE.rglob("*.py") if "__pycache__" not in p.parts)


def _entry(path: Path) -> bool:
    rel = path.relative_to(PIPELINE)
    return rel.parts[0] in ENTRY_POINTS or rel.as_posix() in ENTRY_POINTS


def test_no_module_reads_the_environment_for_a_setting():
    """os.environ only where Dagster needs its own DAGSTER_HOME, and in `wattline ui`, which starts
    `dagster dev` (another program: its environment is the only way in)."""
    found = []
    for path in _modules():
        rel = path.relative_to(PIPELINE).as_posix()
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"os\.environ|getenv\(", line) and "DAGSTER_HOME" not in line and rel != "cli/ui.py":
                found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


def test_settings_are_loaded_only_where_work_starts():
    found = []
    for path in _modules():
        rel = path.relative_to(PIPELINE).as_posix()
        tree = ast.parse(path.read_text())
        loads = [node for node in ast.walk(tree)
                 if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute)
                 and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr) == "load" and not node.args]
        if not loads or _entry(path) and rel != "runner.py":
            continue
        if rel == "runner.py":
            funcs = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                     and any(c in ast.walk(f) for c in loads)]
            if [f.name for f in funcs] != ["run_day"] or len(loads) != 1:
                found.append(f"runner.py: load() in {[f.name for f in funcs]}, expected once in run_day")
            continue
        attrs = re.findall(r"\bload\(\)\.(\w+)", path.read_text())
        if len(attrs) != len(loads) or not set(attrs) <= OTHER_SETTINGS.get(rel, set()):
            found.append(f"{rel}: load() below the entry points ({sorted(set(attrs)) or 'the whole settings'})")
    assert not found, "\n".join(found)


def test_the_grid_step_is_read_back_nowhere():
    """getvariable('grid_step_ms') only in the SQL of the tables declared on the grid (they set it
    once, from the resource); no Python reads it back, and one default."""
    py = [p.relative_to(REPO).as_posix() for p in [*_modules(), *(REPO / "reports").rglob("*.py")]
          if "getvariable('grid_step_ms')" in p.read_text()]
    assert not py
    from pipeline.assets import swing_stats  # noqa: F401  (declares the grid's tables)

    on_grid = {t.name for t in _tables() if t.grid_step}
    assert on_grid == {"fleet_power_grid"}  # swing_stats, a Python table, gets the step as TableRun.grid_step_ms
    sql = {p.relative_to(REPO / "sql").parts[0] for p in (REPO / "sql").rglob("*.sql") if "getvariable('grid_step_ms')" in p.read_text()}
    assert sql == on_grid
    assert not [p for p in (REPO / "sql").rglob("*.sql") if re.search(r"coalesce\(getvariable\('grid_step_ms'\)", p.read_text())]
    defaults = [p for p in [*_modules(), REPO / "collectors" / "settings.py"] if re.search(r"^DEFAULT_GRID_STEP_MS\s*=", p.read_text(), re.M)]
    assert [p.name for p in defaults] == ["settings.py"]


def _tables() -> list[Table]:
    import importlib
    import pkgutil

    import pipeline.assets

    out = []
    for info in pkgutil.iter_modules(pipeline.assets.__path__):
        module = importlib.import_module(f"pipeline.assets.{info.name}")
        out += [v for v in vars(module).values() if isinstance(v, Table)]
    return out


def _two_clusters(d: Path, seconds: int = 20) -> Path:
    """Clusters c0 and c1, one host of one GPU each, ``seconds`` of a square wave at 10 Hz."""
    def host(name, role):
        extra = {"jobs": [{"name": "job-a", "gpus": [0]}]} if role == "training" else {"endpoints": [{"name": "ep-a", "gpus": [0]}]}
        return {"name": name, "role": role, "gpus": [{"index": 0, "tdp_w": 700.0}], **extra}

    clusters = [{"name": "c0", "provisioned_w": 2000, "hosts": [host("train-0", "training")]},
                {"name": "c1", "provisioned_w": 2000, "hosts": [host("infer-0", "inference")]}]
    d.mkdir(parents=True)
    dump_inventory(parse_inventory({"fleets": [{"name": "test", "clusters": clusters}]}), d / "inventory.yaml")
    t, p = square_wave(seconds, 4, 100, 700)
    for name in ("train-0", "infer-0"):
        write_dataset(power_table(name, 0, t, p), d, "power", prefix=f"{name}-0")
    return d


def worker_duckdb(args: tuple[str, Settings]) -> tuple[str, str, int]:
    """In a spawned process, as a run's worker builds it: the code location from the settings
    argument, the warehouse resource's compute connection, and what its DuckDB says."""
    from pipeline.definitions import build_definitions

    data_dir, settings = args
    resource = build_definitions(data_dir, settings).resources["warehouse"]
    with resource.connection(DATE) as con:
        memory, threads = con.execute("SELECT current_setting('memory_limit'), current_setting('threads')").fetchone()
    return memory, str(resource.grid_step_ms), threads


def test_a_worker_gets_its_bound_threads_and_grid_step_as_arguments(tmp_path, monkeypatch):
    from pipeline.runner import worker_settings

    d = _two_clusters(tmp_path / "data")
    # what a worker would inherit if it read the environment: other values, all valid
    monkeypatch.setenv(DUCKDB_MEMORY_ENV, "900MB")
    monkeypatch.setenv(DUCKDB_THREADS_ENV, "3")
    monkeypatch.setenv(GRID_STEP_MS_ENV, "20")
    share = worker_settings(Settings(duckdb_memory="300MB", duckdb_threads=1, grid_step_ms=50), 2)
    assert (share.duckdb_memory, share.duckdb_threads) == ("300MB", 1)  # given: each worker uses what one would
    ctx = multiprocessing.get_context("spawn")  # as the runner starts its workers
    with ctx.Pool(1) as pool:
        memory, step, threads = pool.map(worker_duckdb, [(str(d), share)])[0]
    reference = duckdb.connect(config={"memory_limit": "300MB"})
    assert memory == reference.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    reference.close()
    assert (step, threads) == ("50", 1)


def test_default_shares_split_the_default_bound_and_the_cores(monkeypatch):
    from pipeline.runner import worker_settings

    monkeypatch.setattr(warehouse, "default_memory_mb", lambda: 2048)
    monkeypatch.setattr("pipeline.runner.os.cpu_count", lambda: 8)
    share = worker_settings(Settings(), 4)
    assert (share.duckdb_memory, share.duckdb_threads) == ("512MB", 2)
    assert worker_settings(Settings(), 1) == Settings()  # one worker: the defaults, as a single run


# A whole day built by two workers given the settings as a value, while the environment holds
# a memory bound DuckDB refuses and another grid step: tests/test_scale_out.py's parallel build
# (test_run_day_with_two_workers_takes_the_settings_it_is_given), equal table for table to the
# single process's.


def test_the_report_reads_no_setting_of_its_own():
    """reports/ gets its output folder and PNG switch as arguments: no environment, no load()."""
    found = []
    for path in sorted((REPO / "reports").rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if (re.search(r"os\.environ|getenv\(", line) and "DAGSTER_HOME" not in line) or re.search(r"\bload\(\)|collectors\.settings", line):
                found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


def test_the_report_asset_writes_where_its_settings_say_not_where_the_environment_says_later(report_day, tmp_path, monkeypatch):
    """The daily report asset takes its folder and PNG switch from the resource the run started
    with: the environment changed afterwards (another folder, PNGs on) is not read again."""
    from dagster import DagsterInstance, materialize

    from collectors.settings import REPORT_PNG_ENV, REPORTS_DIR_ENV
    from pipeline.daily_report import daily_report
    from pipeline.resources import WarehouseResource
    from tests.days import copy_of

    data = copy_of(report_day, tmp_path / "data")
    resource = WarehouseResource.from_settings(Settings(reports_dir=str(tmp_path / "resolved"), report_png=False), data)
    monkeypatch.setenv(REPORTS_DIR_ENV, str(tmp_path / "later"))
    monkeypatch.setenv(REPORT_PNG_ENV, "on")
    with DagsterInstance.ephemeral() as instance:
        result = materialize([daily_report], partition_key=report_day.date, resources={"warehouse": resource}, instance=instance)
    assert result.success
    assert (tmp_path / "resolved" / f"{report_day.date}.html").is_file()
    assert not (tmp_path / "resolved" / report_day.date).exists()  # no PNG folder
    assert not (tmp_path / "later").exists()


def test_a_relative_reports_dir_is_resolved_where_the_settings_are(tmp_path, monkeypatch):
    from pipeline.constants import REPORTS_DIR
    from pipeline.resources import reports_dir

    monkeypatch.chdir(tmp_path)
    assert reports_dir(Settings(reports_dir="out")) == tmp_path.resolve() / "out"
    assert reports_dir(Settings()) == REPORTS_DIR
