"""Are two copies of derived tables the same rows? (For changes that must not change results.)

    python -m bench.compare_derived BEFORE_DIR AFTER_DIR [--tables a,b] [--rel 1e-6]

BEFORE_DIR and AFTER_DIR are ``derived/`` folders (``<table>/date=D/part-0.parquet``). Per table:
rows in each, and the rows of each not in the other (``EXCEPT ALL`` both ways), compared exactly
and, where that differs, with every floating-point value rounded to ``--rel`` relative precision
and values below ``--atol`` in magnitude taken as 0 (float sums whose order of addition changed
may differ in the last bits; a running sum that cancels leaves a residue like 1e-14 or 0). Exit 1 if any table
differs beyond that.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import duckdb

FLOATS = {"FLOAT", "DOUBLE", "REAL"}


def _rounded(con, source: str, rel: float, atol: float) -> str:
    digits = max(0, round(-__import__("math").log10(rel)))
    cols = []
    for name, ctype, *_ in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall():
        q = f'"{name}"'
        if ctype in FLOATS:
            # keep `digits` significant digits: scale by the value's own decade
            cols.append(f"CASE WHEN {q} IS NULL OR isnan({q}) OR isinf({q}) THEN {q}::DOUBLE WHEN abs({q}) < {atol} THEN 0.0 "
                        f"ELSE round({q}::DOUBLE / pow(10, floor(log10(abs({q}::DOUBLE)))), {digits}) END AS {q}")
        else:
            cols.append(q)
    return f"SELECT {', '.join(cols)} FROM {source}"


def compare(before: Path, after: Path, table: str, rel: float, atol: float = 1e-9) -> dict:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    a = f"read_parquet('{before / table}/date=*/**/*.parquet')"
    b = f"read_parquet('{after / table}/date=*/**/*.parquet')"
    n_a = con.execute(f"SELECT count(*) FROM {a}").fetchone()[0]
    n_b = con.execute(f"SELECT count(*) FROM {b}").fetchone()[0]
    only_a = con.execute(f"SELECT count(*) FROM (FROM {a} EXCEPT ALL FROM {b})").fetchone()[0]
    only_b = con.execute(f"SELECT count(*) FROM (FROM {b} EXCEPT ALL FROM {a})").fetchone()[0]
    result = {"table": table, "rows_before": n_a, "rows_after": n_b, "only_before": only_a, "only_after": only_b, "exact": only_a == only_b == 0}
    if not result["exact"]:
        ra, rb = _rounded(con, a, rel, atol), _rounded(con, b, rel, atol)
        result["only_before_rounded"] = con.execute(f"SELECT count(*) FROM ({ra} EXCEPT ALL {rb})").fetchone()[0]
        result["only_after_rounded"] = con.execute(f"SELECT count(*) FROM ({rb} EXCEPT ALL {ra})").fetchone()[0]
    result["same"] = result["exact"] or (result["only_before_rounded"] == result["only_after_rounded"] == 0)
    con.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.compare_derived")
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--tables", help="default: every table in BEFORE")
    parser.add_argument("--rel", type=float, default=1e-6)
    parser.add_argument("--atol", type=float, default=1e-9, help="floats smaller than this in magnitude count as 0 (residues of running sums that cancel)")
    args = parser.parse_args()
    tables = args.tables.split(",") if args.tables else sorted(p.name for p in args.before.iterdir() if p.is_dir())
    bad = 0
    for table in tables:
        r = compare(args.before, args.after, table, args.rel, args.atol)
        verdict = "identical" if r["exact"] else (f"same to {args.rel:g} relative" if r["same"] else "DIFFERENT")
        extra = "" if r["exact"] else f" (exact: {r['only_before']}/{r['only_after']}, rounded: {r['only_before_rounded']}/{r['only_after_rounded']})"
        print(f"  {table:<24} rows {r['rows_before']:>11,} / {r['rows_after']:>11,}  only-before/only-after "
              f"{r['only_before']}/{r['only_after']}  {verdict}{extra}")
        bad += not r["same"]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
