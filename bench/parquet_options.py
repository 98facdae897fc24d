"""Bytes and write CPU of each derived table rewritten with different DuckDB COPY options: which
lossless Parquet option pays where. Each table's parts are read (in file order) and written again
once per variant; the values are untouched, only the encoding changes.

    python -m bench.parquet_options DERIVED_DIR [--tables a,b] [--variants v1,v2,...]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import duckdb

VARIANTS = {
    "v1": "COMPRESSION zstd, ROW_GROUP_SIZE 500000",
    "v2": "COMPRESSION zstd, ROW_GROUP_SIZE 500000, PARQUET_VERSION V2",
    "v1-l9": "COMPRESSION zstd, COMPRESSION_LEVEL 9, ROW_GROUP_SIZE 500000",
    "v2-l9": "COMPRESSION zstd, COMPRESSION_LEVEL 9, ROW_GROUP_SIZE 500000, PARQUET_VERSION V2",
    "v2-l6": "COMPRESSION zstd, COMPRESSION_LEVEL 6, ROW_GROUP_SIZE 500000, PARQUET_VERSION V2",
    "v2-rg2m": "COMPRESSION zstd, ROW_GROUP_SIZE 2000000, PARQUET_VERSION V2",
    "v2-d1k": "COMPRESSION zstd, ROW_GROUP_SIZE 500000, PARQUET_VERSION V2, DICTIONARY_SIZE_LIMIT 1000",
    "v2-d10k": "COMPRESSION zstd, ROW_GROUP_SIZE 500000, PARQUET_VERSION V2, DICTIONARY_SIZE_LIMIT 10000",
    "v2-d100": "COMPRESSION zstd, ROW_GROUP_SIZE 500000, PARQUET_VERSION V2, DICTIONARY_SIZE_LIMIT 100",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("derived", type=Path)
    ap.add_argument("--tables", default="")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args()
    variants = args.variants.split(",")
    con = duckdb.connect()
    con.execute("SET threads = 1")
    con.execute("SET preserve_insertion_order = true")
    wanted = set(filter(None, args.tables.split(",")))
    totals = dict.fromkeys(variants, 0)
    cpu = dict.fromkeys(variants, 0.0)
    print(f"{'table':28s}" + "".join(f"{v:>18s}" for v in variants))
    with tempfile.TemporaryDirectory() as tmp:
        for table_dir in sorted(p for p in args.derived.iterdir() if p.is_dir()):
            files = sorted(table_dir.rglob("*.parquet"))
            if not files or (wanted and table_dir.name not in wanted):
                continue
            cells = []
            for v in variants:
                size, spent = 0, 0.0
                for i, f in enumerate(files):
                    out = Path(tmp) / f"{table_dir.name}-{v}-{i}.parquet"
                    t0 = time.process_time()
                    con.execute(f"COPY (SELECT * FROM read_parquet('{f}')) TO '{out}' (FORMAT parquet, {VARIANTS[v]})")
                    spent += time.process_time() - t0
                    size += out.stat().st_size
                    out.unlink()
                totals[v] += size
                cpu[v] += spent
                cells.append(f"{size / 1e6:9.3f} MB {spent:5.2f}s")
            print(f"{table_dir.name:28s}" + "".join(f"{c:>18s}" for c in cells), flush=True)
    print(f"{'total':28s}" + "".join(f"{totals[v] / 1e6:9.3f} MB {cpu[v]:5.2f}s" for v in variants))


if __name__ == "__main__":
    main()
