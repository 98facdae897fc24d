"""`wattline simulate --replay-arrivals azure FILE`: a real trace drives the simulated endpoints."""

import csv
from pathlib import Path

import pyarrow.parquet as pq
from click.testing import CliRunner

from pipeline.cli import main

SLICE = Path(__file__).parent / "data" / "azure" / "code_slice.csv"


def test_replay_sends_every_trace_request_with_its_tokens(tmp_path):
    with open(SLICE) as fh:
        rows = list(csv.DictReader(fh))
    result = CliRunner().invoke(
        main,
        ["simulate", "--fleet", "tiny", "--hours", "1", "--start", "2026-11-30",
         "--replay-arrivals", "azure", str(SLICE), "--data-dir", str(tmp_path)],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    requests = pq.read_table(next((tmp_path / "requests").rglob("*.parquet")))
    assert requests.num_rows == len(rows)
    assert sorted(requests.column("prompt_tokens").to_pylist()) == sorted(int(r["ContextTokens"]) for r in rows)
    # Dealt round-robin over the tiny fleet's two endpoints.
    counts = requests.group_by("endpoint").aggregate([("request_id", "count")]).column("request_id_count").to_pylist()
    assert sorted(counts) == [len(rows) // 2, len(rows) - len(rows) // 2]
