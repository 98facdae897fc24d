"""Bytes on disk of each derived table and of each of its columns (compressed column-chunk sizes
from the Parquet footers), with the encodings each column was written with: which columns cost.

    python -m bench.parquet_bytes DERIVED_DIR [--columns] [--json OUT]

DERIVED_DIR is a ``derived/`` folder (``<table>/.../part-0.parquet``); every part of a table is
summed. ``--columns`` also prints each column's share.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq


def table_bytes(derived: Path) -> dict[str, dict]:
    """Per table: file bytes, rows, and per column compressed bytes and encodings."""
    out: dict[str, dict] = {}
    for table_dir in sorted(p for p in derived.iterdir() if p.is_dir()):
        files = sorted(table_dir.rglob("*.parquet"))
        if not files:
            continue
        cols: dict[str, int] = defaultdict(int)
        enc: dict[str, set[str]] = defaultdict(set)
        rows = 0
        for f in files:
            md = pq.ParquetFile(f).metadata
            rows += md.num_rows
            for g in range(md.num_row_groups):
                rg = md.row_group(g)
                for c in range(rg.num_columns):
                    cc = rg.column(c)
                    cols[cc.path_in_schema] += cc.total_compressed_size
                    enc[cc.path_in_schema].update(cc.encodings)
        out[table_dir.name] = {"bytes": sum(f.stat().st_size for f in files), "rows": rows,
                               "columns": {c: {"bytes": b, "encodings": sorted(enc[c])} for c, b in cols.items()}}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("derived", type=Path)
    ap.add_argument("--columns", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    res = table_bytes(args.derived)
    total = sum(t["bytes"] for t in res.values())
    for name, t in sorted(res.items(), key=lambda kv: -kv[1]["bytes"]):
        print(f"{name:32s} {t['bytes'] / 1e6:9.3f} MB {t['rows']:>11d} rows {8 * t['bytes'] / max(t['rows'], 1):7.1f} bit/row")
        if args.columns:
            for c, v in sorted(t["columns"].items(), key=lambda kv: -kv[1]["bytes"]):
                print(f"    {c:28s} {v['bytes'] / 1e6:9.3f} MB {100 * v['bytes'] / max(t['bytes'], 1):5.1f} %  {','.join(v['encodings'])}")
    print(f"{'total':32s} {total / 1e6:9.3f} MB")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
