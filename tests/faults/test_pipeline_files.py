"""Issue 5, item 5: bad raw files in a day's partition, late files, a GPU missing from the inventory.

One faulted copy of a clean data dir goes through three real runs of the daily job (the first
two of the tables the tests read, ``POWER_TABLES``: power_1s holds the checks on the raw files,
and every step's connection validates and quarantines the files of every raw dataset, as in a
whole run; the last a whole run, which also removes the parts of clusters the day no longer has):

1. faulted: train-0/0's file has a truncated footer, infer-0/0's is rewritten with ``power_w``
   as strings, infer-0/1's has an extra column (accepted: the column is ignored and named), train-0/1's is present as a byte-identical copy
   and as the same rows rewritten with other bytes, extra-0 reports power but is not in the
   inventory, and extra-0/1's file has not arrived yet;
2. late: extra-0/1's file lands after the day was built, nothing fixed;
3. fixed: the good files are put back, the quarantined copies and the rewrite deleted, extra-0
   added to the inventory → the tables must equal those of a clean run.

Each test below names one fault and checks what must survive it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from collectors.parquet_sink import write_dataset
from pipeline import file_quarantine
from pipeline.readonly import run_query
from pipeline.runner import run_day
from pipeline.warehouse import read_day
from tests.builders import DAY, power_table, square_wave, write_square_fleet
from tests.faults import inject

DATE = DAY.isoformat()
SECONDS = 120
KEYS = {"power_1s": ["host", "gpu", "ts"], "fleet_power_1s": ["level", "entity", "ts"]}
POWER_TABLES = ["power_1s", "fleet_power_1s"]
# Four daily runs (two of the power tables only) of one faulted data dir (clean, faulted, late, fixed) behind every scenario test,
# and two more days of their own below: minutes on a busy 2-core machine.
pytestmark = pytest.mark.slow


def _write_clean(data_dir):
    """The square fleet plus host extra-0 (2 GPUs at a constant 300 W), all in the inventory."""
    write_square_fleet(data_dir, seconds=SECONDS)
    inv = yaml.safe_load((data_dir / "inventory.yaml").read_text())
    inv["fleets"][0]["clusters"][0]["hosts"].append(
        {"name": "extra-0", "role": "inference", "gpus": [{"index": 0, "tdp_w": 700}, {"index": 1, "tdp_w": 700}]}
    )
    (data_dir / "inventory.full.yaml").write_text(yaml.safe_dump(inv))
    shutil.copyfile(data_dir / "inventory.full.yaml", data_dir / "inventory.yaml")
    inject.write_requests_and_job_events(data_dir)
    for gpu in range(2):
        t, p = square_wave(SECONDS, 1.0, 300.0, 300.0)
        write_dataset(power_table("extra-0", gpu, t, p), data_dir, "power", prefix=f"extra-0-{gpu}", unique_names=False)


def _file(data_dir, host, gpu):
    return next((data_dir / "power" / f"date={DATE}" / f"host={host}").glob(f"{host}-{gpu}*.parquet"))


def _tables(data_dir):
    return {
        name: read_day(data_dir, name, DATE).sort_by([(k, "ascending") for k in keys])
        for name, keys in KEYS.items()
    }


def _failed(outcome):
    return {c.check: c for c in outcome.failed_checks}


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    root = tmp_path_factory.mktemp("files")
    clean = root / "clean"
    _write_clean(clean)
    clean_outcome = run_day(clean, DATE)
    assert clean_outcome.ok, clean_outcome
    s = {"clean": _tables(clean), "clean_dir": clean, "clean_checks": {(c.asset, c.check) for c in clean_outcome.failed_checks}}

    d = root / "faulted"
    for dataset in ("power", "requests", "job_events"):
        shutil.copytree(clean / dataset, d / dataset)
    shutil.copyfile(clean / "inventory.full.yaml", d / "inventory.full.yaml")
    # Fault: extra-0 reports power but the inventory predates it.
    inv = yaml.safe_load((clean / "inventory.full.yaml").read_text())
    inv["fleets"][0]["clusters"][0]["hosts"] = [h for h in inv["fleets"][0]["clusters"][0]["hosts"] if h["name"] != "extra-0"]
    (d / "inventory.yaml").write_text(yaml.safe_dump(inv))
    late = _file(d, "extra-0", 1)
    s["late_bytes"] = late.read_bytes()
    late.unlink()
    requests_file = d / "requests" / f"date={DATE}" / "requests.parquet"
    steps_file = d / "job_events" / f"date={DATE}" / "steps.parquet"
    s.update(requests_file=requests_file, steps_file=steps_file)
    s["good"] = {path: path.read_bytes() for path in (_file(d, h, g) for h, g in [("train-0", 0), ("infer-0", 0), ("infer-0", 1)])}
    s["good"].update({path: path.read_bytes() for path in (requests_file, steps_file)})
    inject.truncate_footer(requests_file)
    inject.retype_column(steps_file, "tokens", pa.float64())
    corrupt = _file(d, "train-0", 0)
    s["corrupt_bytes"] = inject.truncate_footer(corrupt)
    inject.retype_column(_file(d, "infer-0", 0), "power_w", pa.string())
    inject.add_column(_file(d, "infer-0", 1), "fan_pct", 40)
    copy = inject.copy_beside(_file(d, "train-0", 1), "train-0-1-copy.parquet")
    rewrite = inject.rewrite_same_rows(_file(d, "train-0", 1), "train-0-1-reimport.parquet")
    s.update(dir=d, corrupt=corrupt, copy=copy, rewrite=rewrite)

    s["faulted"] = run_day(d, DATE, selection=POWER_TABLES)
    s["faulted_tables"] = _tables(d)
    s["faulted_power_rows"] = run_query(d, "select count(*) as n from power").to_pylist()[0]["n"]
    s["faulted_other_rows"] = run_query(d, "select (select count(*) from requests) as requests, (select count(*) from job_events) as job_events").to_pylist()[0]
    s["quarantine_sql_faulted"] = run_query(
        d, "select kind, count(*) as n, count(*) filter (still_quarantined) as still from quarantined_files group by all order by 1"
    ).to_pylist()
    s["faulted_log_rows"] = len(file_quarantine.entries(d, present_only=False))
    s["left_in_dataset"] = [e["path"] for e in s["faulted"].quarantined if Path(e["path"]).exists()]
    s["in_quarantine"] = {e["path"]: Path(e["quarantined_path"]).read_bytes() for e in s["faulted"].quarantined}
    s["original_columns"] = {e["path"]: pq.read_schema(e["quarantined_path"]).names for e in s["faulted"].converted}
    s["converted_columns"] = {e["path"]: pq.read_schema(e["path"]).names for e in s["faulted"].converted}

    # Late file: lands after the day was built; nothing else fixed.
    late.write_bytes(s["late_bytes"])
    s["late"] = run_day(d, DATE, selection=POWER_TABLES)
    s["late_tables"] = _tables(d)
    s["late_log_rows"] = len(file_quarantine.entries(d, present_only=False))

    # The fix: good files back, quarantined copies and the re-import deleted, inventory complete.
    for path, data in s["good"].items():
        path.write_bytes(data)
    for entry in file_quarantine.entries(d):
        Path(entry["quarantined_path"]).unlink()
    rewrite.unlink()
    shutil.copyfile(d / "inventory.full.yaml", d / "inventory.yaml")
    s["fixed"] = run_day(d, DATE)
    s["fixed_tables"] = _tables(d)
    return s


def _quarantined(s, path):
    return next(e for e in s["faulted"].quarantined if e["path"] == str(path))


def _gpus(table):
    return {(r["host"], r["gpu"]) for r in table.select(["host", "gpu"]).to_pylist()}


def _rows_of(table, host, gpu):
    return table.filter(pa.compute.and_(pa.compute.equal(table["host"], host), pa.compute.equal(table["gpu"], gpu)))


def test_truncated_footer_is_quarantined_and_the_rest_of_the_day_computed(scenario):
    """Fault: a file whose footer was cut off. Must survive: the day's other GPUs (the run
    succeeds, their rows equal the clean run's), the file's bytes (moved to quarantine, not
    deleted), a named ERROR check; and `wattline sql` on the raw `power` view still answers
    (one unreadable file in the glob would fail every query on it)."""
    s = scenario
    entry = _quarantined(s, s["corrupt"])
    assert entry["kind"] == "unreadable" and "not a readable Parquet file" in entry["reason"]
    assert s["left_in_dataset"] == []
    assert s["in_quarantine"][str(s["corrupt"])] == s["corrupt_bytes"]
    assert s["faulted"].success and not s["faulted"].ok
    check = _failed(s["faulted"])["files_follow_contract"]
    assert check.severity == "ERROR" and str(s["corrupt"]) in check.description
    power_1s = s["faulted_tables"]["power_1s"]
    assert _gpus(power_1s) == {("train-0", 1), ("extra-0", 0), ("infer-0", 1)}
    assert _rows_of(power_1s, "extra-0", 0).equals(_rows_of(s["clean"]["power_1s"], "extra-0", 0))
    # Raw view over the whole dataset: train-0/1 (original + re-import), extra-0/0 and infer-0/1, 10 Hz.
    assert s["faulted_power_rows"] == 4 * SECONDS * 10


def test_extra_column_is_ignored_named_by_a_warn_check_and_the_original_kept(scenario):
    """Input: a power file with one more column than the contract (a newer writer's field).
    Must survive: its GPU's seconds (equal to the clean run's), a WARN naming the file and the
    column, the original bytes (kept in quarantine/files/); no ERROR for it."""
    s = scenario
    path = next(p for p in s["good"] if p.parent.name == "host=infer-0" and p.name.startswith("infer-0-1-"))
    [entry] = [e for e in s["faulted"].converted if e["path"] == str(path)]
    assert "extra column(s) ignored: 'fan_pct'" in entry["reason"]
    assert "fan_pct" in s["original_columns"][str(path)]
    assert "fan_pct" not in s["converted_columns"][str(path)]  # rewritten in the contract's columns
    check = _failed(s["faulted"])["files_accepted_with_casts"]
    assert check.severity == "WARN" and str(path) in check.description and "'fan_pct'" in check.description
    assert str(path) not in _failed(s["faulted"])["files_follow_contract"].description
    got = _rows_of(s["faulted_tables"]["power_1s"], "infer-0", 1)
    assert got.equals(_rows_of(s["clean"]["power_1s"], "infer-0", 1))


@pytest.mark.parametrize(
    "host, gpu, fragment",
    [("infer-0", 0, "column 'power_w' is string, the contract says float")],
    ids=["string-instead-of-float"],
)
def test_drifted_schema_is_quarantined_with_the_column_named(scenario, host, gpu, fragment):
    """Fault: a file drifted from the contract (DuckDB alone would silently cast it into the
    glob). Must survive: the contract (file quarantined, the reason names the column; the
    ERROR check names the file); the file's content (kept in quarantine)."""
    s = scenario
    path = next(p for p in s["good"] if p.parent.name == f"host={host}" and p.name.startswith(f"{host}-{gpu}-"))
    entry = _quarantined(s, path)
    assert entry["kind"] == "schema" and fragment in entry["reason"]
    assert str(path) in _failed(s["faulted"])["files_follow_contract"].description
    assert pq.read_table(pa.BufferReader(s["in_quarantine"][str(path)])).num_rows == SECONDS * 10


def test_byte_identical_copy_is_quarantined_without_loss(scenario):
    """Fault: the same file twice in a partition. Must survive: each sample counted once (the
    copy is quarantined; its GPU's seconds equal the clean run's), a WARN naming the copy."""
    s = scenario
    entry = _quarantined(s, s["copy"])
    assert entry["kind"] == "duplicate" and "byte-identical copy of" in entry["reason"]
    check = _failed(s["faulted"])["no_duplicate_files"]
    assert check.severity == "WARN" and str(s["copy"]) in check.description


def test_same_rows_in_a_rewritten_file_fail_the_duplicate_check_naming_both_files(scenario):
    """Fault: a re-import wrote the same rows with other bytes (not detectable per file). Must
    survive: the numbers that duplicates cannot change (mean/min/max per second equal the
    clean run's), and an ERROR check naming both files, so nobody trusts the sample counts."""
    s = scenario
    check = _failed(s["faulted"])["no_duplicate_samples"]
    assert check.severity == "ERROR"
    assert str(s["rewrite"]) in check.description and str(_file(s["dir"], "train-0", 1)) in check.description
    got = _rows_of(s["faulted_tables"]["power_1s"], "train-0", 1)
    want = _rows_of(s["clean"]["power_1s"], "train-0", 1)
    for column in ("ts", "mean_w", "min_w", "max_w"):
        assert got[column].equals(want[column]), column
    assert pa.compute.sum(got["samples"]).as_py() == 2 * pa.compute.sum(want["samples"]).as_py()


def test_requests_and_job_events_files_are_validated_like_power(scenario):
    """Fault: a truncated requests file and a job_events file with float tokens, on a branch
    where no asset reads them yet. Must survive: both files (quarantined with a reason by the
    shared validation every compute connection goes through), the run's report of them (the
    CLI prints outcome.quarantined), and `wattline sql` on those views."""
    s = scenario
    assert _quarantined(s, s["requests_file"])["kind"] == "unreadable"
    steps = _quarantined(s, s["steps_file"])
    assert steps["kind"] == "schema" and "column 'tokens' is double" in steps["reason"]
    assert s["faulted_other_rows"] == {"requests": 0, "job_events": 0}


def test_gpu_missing_from_inventory_is_named_and_kept_per_gpu(scenario):
    """Fault: a host reports power but is not in inventory.yaml. Must survive: its per-GPU
    seconds (in power_1s), the fleet sums of the known GPUs (unchanged: it cannot be placed in
    a host or cluster), and a WARN naming the GPU."""
    s = scenario
    check = _failed(s["faulted"])["gpus_in_inventory"]
    assert check.severity == "WARN" and "1 GPU(s)" in check.description
    assert ("extra-0", 0) in _gpus(s["faulted_tables"]["power_1s"])
    fleet = s["faulted_tables"]["fleet_power_1s"]
    assert "extra-0" not in set(fleet["entity"].to_pylist())


def test_late_file_for_a_built_day_is_included_on_rerun(scenario):
    """Fault: a file lands after its day was built (the new-Parquet sensor re-runs the day, see
    tests/test_automation.py). Must survive: its samples, in power_1s after the re-run; the
    quarantine (nothing re-logged, the still-quarantined files still fail the check)."""
    s = scenario
    assert ("extra-0", 1) not in _gpus(s["faulted_tables"]["power_1s"])
    late = _rows_of(s["late_tables"]["power_1s"], "extra-0", 1)
    assert late.equals(_rows_of(s["clean"]["power_1s"], "extra-0", 1))
    assert s["late_log_rows"] == s["faulted_log_rows"] == 6  # 5 quarantined, 1 converted
    assert "files_follow_contract" in _failed(s["late"]) and len(s["late"].quarantined) == 5


def test_rerun_after_the_fix_equals_a_clean_run(scenario):
    """After the fix (good files back, quarantined copies deleted, inventory completed), the
    re-run must give exactly the clean run's tables and pass the same checks."""
    s = scenario
    assert s["fixed"].ok and s["fixed"].quarantined == []
    # the clean run's own failures are WARNs of a 2-minute day with no request log
    assert {(c.asset, c.check) for c in s["fixed"].failed_checks} == s["clean_checks"]
    assert ("power_1s", "gpu_coverage") in s["clean_checks"]
    for name in KEYS:
        assert s["fixed_tables"][name].equals(s["clean"][name]), name


def test_quarantine_is_countable_in_sql(scenario):
    """The report counts quarantined files from the catalog (`quarantined_files` view); a
    file whose quarantined copy was deleted (loss accepted, or fixed) stays in the log."""
    s = scenario
    q = "select kind, count(*) as n, count(*) filter (still_quarantined) as still from quarantined_files group by all order by 1"
    assert s["quarantine_sql_faulted"] == [
        {"kind": "converted", "n": 1, "still": 1},
        {"kind": "duplicate", "n": 1, "still": 1},
        {"kind": "schema", "n": 2, "still": 2},
        {"kind": "unreadable", "n": 2, "still": 2},
    ]
    assert run_query(s["dir"], q).to_pylist() == [
        {"kind": "converted", "n": 1, "still": 0},
        {"kind": "duplicate", "n": 1, "still": 0},
        {"kind": "schema", "n": 2, "still": 0},
        {"kind": "unreadable", "n": 2, "still": 0},
    ]


def test_a_day_with_no_data_through_the_job_gives_a_check_failure_not_a_crash(tmp_path):
    """Fault: the UI (or schedule) launches a day that has no Parquet at all. Must survive: the
    job (it completes, empty tables), and the user's understanding: a failed check says so."""
    data_dir = tmp_path / "data"
    write_square_fleet(data_dir, seconds=5)  # data for DAY only
    empty_day = "2026-11-29"
    outcome = run_day(data_dir, empty_day)
    assert outcome.success, outcome.error
    check = _failed(outcome)["gpu_coverage"]
    assert "no power samples this day" in check.description
    assert read_day(data_dir, "power_1s", empty_day).num_rows == 0


def test_damaged_data_pages_met_by_a_python_tables_stream_are_quarantined_and_the_rows_computed_afresh(tmp_path):
    """Fault: a file with a sound footer but damaged data pages first read by a Python table's
    row stream, after the stream has handed out rows (fleet_power_grid at a 50 ms step reads the
    raw samples host by host: infer-0's rows, then train-0's damaged file). Must survive: the
    part, equal to that of the same day without the file: the writer quarantines it and writes
    a stream computed anew (the first one is spent), not the rest of the first."""
    import pyarrow.compute as pc

    from collectors.settings import Settings

    settings = Settings(grid_step_ms=50)
    data_dir = tmp_path / "data"
    write_square_fleet(data_dir, seconds=10)
    # what the grid reads beside the raw samples (its GPUs: energy_curve's), built while every file is sound
    assert run_day(data_dir, DATE, selection=["power_1s", "fleet_power_1s", "energy_curve", "power_100ms", "fleet_power_100ms"], settings=settings).success
    reference = tmp_path / "reference"
    shutil.copytree(data_dir, reference)
    _file(reference, "train-0", 0).unlink()
    damaged = _file(data_dir, "train-0", 0)
    inject.damage_data_pages(damaged)

    outcome = run_day(data_dir, DATE, selection=["fleet_power_grid"], settings=settings)
    assert "fleet_power_grid" in outcome.materialized, outcome.error
    assert not damaged.exists(), "moved to the quarantine"
    [entry] = file_quarantine.entries(data_dir)
    assert entry["kind"] == "unreadable" and entry["path"] == str(damaged)
    assert run_day(reference, DATE, selection=["fleet_power_grid"], settings=settings).success
    got, want = (read_day(d, "fleet_power_grid", DATE).sort_by([("level", "ascending"), ("entity", "ascending"), ("ts", "ascending")])
                 for d in (data_dir, reference))
    assert got.num_rows == want.num_rows > 0
    assert got.equals(want)
    hosts = {(r["entity"], r["gpus_reporting"]) for r in got.filter(pc.equal(got["level"], "host")).to_pylist()}
    assert ("infer-0", 2) in hosts and ("train-0", 1) in hosts and ("train-0", 2) not in hosts


def test_damaged_data_pages_are_found_when_read_and_the_day_computed(tmp_path):
    """Fault: a file with a sound footer but damaged data pages (passes the footer check, fails
    the query). Must survive: the rest of the day (the failing query finds the file by decoding
    the day's files, quarantines it and runs again), the file (in quarantine), and the user's
    screen: `wattline run` prints one line per problem, no stack trace."""
    from tests.cli_util import invoke

    data_dir = tmp_path / "data"
    write_square_fleet(data_dir, seconds=10)
    damaged = _file(data_dir, "train-0", 0)
    inject.damage_data_pages(damaged)
    result = invoke("run", "--date", DATE, "--data-dir", str(data_dir))
    assert result.exit_code == 1, result.output  # the ERROR check, not a failed asset
    assert "Traceback" not in result.output and "Stack Trace" not in result.output
    assert f"quarantined power file {damaged}: damaged data" in result.output
    # every asset of the day materialized (a failed one prints "run … failed"), whatever their number
    assert "assets materialized" in result.output and "finished with failed ERROR checks" in result.output
    assert _gpus(_tables(data_dir)["power_1s"]) == {("train-0", 1), ("infer-0", 0), ("infer-0", 1)}
    [entry] = file_quarantine.entries(data_dir)
    assert entry["kind"] == "unreadable" and entry["path"] == str(damaged)
