"""Writes a raw dataset's rows as the data contract lays them out: one file per day (and host),
to a local or ``s3://`` data dir (:mod:`collectors.storage`, atomic writes: :mod:`collectors.atomic`).
Every collector, importer and the simulator writes through :func:`write_dataset`.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from collectors.contract import DATASETS, conform
from collectors.storage import DataRoot


def _day_strings(ts: pa.ChunkedArray) -> pa.ChunkedArray:
    # A date32 cast prints ISO days ~6x faster than strftime; the contract's ts is UTC.
    return ts.cast(pa.date32()).cast(pa.string())


def write_dataset(
    table: pa.Table,
    root: Path | str | DataRoot,
    dataset: str,
    *,
    prefix: str = "part",
    sort_by: list[str] | None = None,
    unique_names: bool = True,
) -> list[Path | str]:
    """Conform ``table`` to ``dataset``'s contract and write one file per day (and host).

    ``root`` is the data dir: a local path, an ``s3://bucket/prefix`` URL or a
    :class:`collectors.storage.DataRoot`; the result lists the files written (Paths on a local
    root, ``s3://`` URLs on S3). File names carry ``prefix`` and a random suffix so concurrent
    writers never collide; with ``unique_names=False`` the name is ``<prefix>.parquet``
    (reproducible, and a rewrite replaces the file atomically), for writers that own their prefix.
    """
    data_root = DataRoot.open(root)
    ds = DATASETS[dataset]
    table = conform(table, ds.schema, where=f"{dataset} rows from {prefix}")
    if table.num_rows == 0:
        return []
    days = _day_strings(table.column(ds.time_column))
    keys = [days]
    if ds.partition_by_host:
        keys.append(table.column("host"))
    grouping = pa.table({f"k{i}": k for i, k in enumerate(keys)}).group_by([f"k{i}" for i in range(len(keys))])
    written = []
    for row in grouping.aggregate([]).to_pylist():
        mask = pc.equal(days, row["k0"])
        if ds.partition_by_host:
            mask = pc.and_(mask, pc.equal(table.column("host"), row["k1"]))
        part = table.filter(mask)
        if sort_by:
            part = part.sort_by([(c, "ascending") for c in sort_by])
        name = f"{prefix}-{uuid.uuid4().hex[:12]}.parquet" if unique_names else f"{prefix}.parquet"
        written.append(data_root.write_parquet(f"{ds.partition_key(row['k0'], row.get('k1'))}/{name}", part))
    return written
