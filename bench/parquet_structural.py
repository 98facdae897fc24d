"""What structural changes to the derived tables would save on disk (nothing here changes a
table): each option's redundancy is checked on the data (rows where the identity fails; energy_curve's only where the next second follows), then the
table is written with and without the redundant columns, with the pipeline's COPY options.

    python -m bench.parquet_structural DERIVED_DIR
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import duckdb

from pipeline.warehouse import DICTIONARY_SIZE_LIMIT, DICTIONARY_SIZE_LIMITS, PARQUET_COPY_OPTIONS

REQUEST_STATE = "n_prefill, n_decode, phase, prefill_estimated, prompt_tokens, output_tokens"

OPTIONS = [
    # (option, table, query of what would be stored instead (list of SELECTs), check: rows where the identity fails)
    ("phase_timeline: request state once per endpoint and slot, not per GPU", "phase_timeline",
     ["SELECT * EXCLUDE (n_prefill, n_decode, phase, prefill_estimated, prompt_tokens, output_tokens) FROM t",
      f"SELECT DISTINCT date, endpoint, ts, {REQUEST_STATE} FROM t ORDER BY endpoint, ts"],
     f"SELECT count(*) FROM (SELECT endpoint, ts FROM t GROUP BY endpoint, ts HAVING count(DISTINCT ({REQUEST_STATE})) > 1)"),
    ("phase_timeline: energy_j = power_w x 0.1 s, computed on read", "phase_timeline",
     ["SELECT * EXCLUDE (energy_j) FROM t"],
     "SELECT count(*) FROM t WHERE energy_j IS DISTINCT FROM power_w::DOUBLE * 0.1"),
    ("energy_curve: end_energy_j, end_power_w = the next second's energy_j, power_w (lead)", "energy_curve",
     ["SELECT * EXCLUDE (end_energy_j, end_power_w) FROM t"],
     "SELECT count(*) FROM (SELECT end_energy_j, end_power_w, lead(energy_j) OVER w AS e, lead(power_w) OVER w AS p, "
     "lead(t_ns) OVER w AS nt, t_ns FROM t WINDOW w AS (PARTITION BY host, gpu ORDER BY t_ns)) "
     "WHERE nt = t_ns + 1000000000 AND (end_energy_j IS DISTINCT FROM e OR end_power_w IS DISTINCT FROM p)"),
    ("phase_intervals: start_ts, end_ts = start_ns, end_ns as timestamps", "phase_intervals",
     ["SELECT * EXCLUDE (start_ts, end_ts) FROM t"],
     "SELECT count(*) FROM t WHERE epoch_us(start_ts) <> start_ns // 1000 OR epoch_us(end_ts) <> end_ns // 1000"),
    ("fleet_power_100ms: power_best_w only where it differs from power_w", "fleet_power_100ms",
     ["SELECT * REPLACE (CASE WHEN power_best_w IS DISTINCT FROM power_w THEN power_best_w END AS power_best_w) FROM t"],
     "SELECT 0"),  # lossless by construction: a null means "the same as power_w"
]


def _written(con: duckdb.DuckDBPyConnection, table: str, query: str, path: Path) -> int:
    limit = DICTIONARY_SIZE_LIMITS.get(table, DICTIONARY_SIZE_LIMIT)
    con.execute(f"COPY ({query}) TO '{path}' ({PARQUET_COPY_OPTIONS}, DICTIONARY_SIZE_LIMIT {limit})")
    size = path.stat().st_size
    path.unlink()
    return size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("derived", type=Path)
    args = ap.parse_args()
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET preserve_insertion_order = true")
    with tempfile.TemporaryDirectory() as tmp:
        print(f"{'option':86s} {'table MB':>9s} {'after MB':>9s} {'saved MB':>9s} {'fails':>7s}")
        for option, table, stored, check in OPTIONS:
            con.execute(f"CREATE OR REPLACE TEMP TABLE t AS SELECT * FROM read_parquet('{args.derived}/{table}/**/*.parquet')")
            full = _written(con, table, "SELECT * FROM t", Path(tmp) / "full.parquet")
            after = sum(_written(con, table, q, Path(tmp) / f"part{i}.parquet") for i, q in enumerate(stored))
            fails = con.execute(check).fetchone()[0]
            print(f"{option:86s} {full / 1e6:9.3f} {after / 1e6:9.3f} {(full - after) / 1e6:9.3f} {fails:7d}", flush=True)


if __name__ == "__main__":
    main()
