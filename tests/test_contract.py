"""The data contract is enforced on write and on read, naming what is wrong and where."""

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from collectors.contract import POWER, REQUESTS, SchemaError, check_file_schema, conform, epoch_ns
from collectors.inventory import InventoryError, load_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from tests.builders import power_table, square_wave, two_host_inventory


def test_conform_accepts_the_contract_and_rejects_a_wrong_type():
    t, p = square_wave(2, 1, 100, 200)
    table = power_table("h", 0, t, p)
    assert conform(table, POWER).schema == POWER
    bad = table.set_column(table.schema.get_field_index("power_w"), "power_w", table.column("power_w").cast(pa.int32()))
    with pytest.raises(SchemaError, match=r"batch-7: column 'power_w' is int32, the contract says float"):
        conform(bad, POWER, where="batch-7")


def test_conform_rejects_missing_column_and_nulls_in_required():
    with pytest.raises(SchemaError, match="missing column 'endpoint'"):
        conform(pa.table({"request_id": ["a"]}), REQUESTS)
    t, p = square_wave(1, 1, 100, 200)
    table = power_table("h", 0, t, p)
    nulled = table.set_column(table.schema.get_field_index("host"), "host", pa.nulls(table.num_rows, pa.string()))
    with pytest.raises(SchemaError, match="'host' has 10 null"):
        conform(nulled, POWER)


def test_file_with_wrong_column_type_is_rejected_with_its_path(tmp_path):
    t, p = square_wave(1, 1, 100, 200)
    good = write_dataset(power_table("h", 0, t, p), tmp_path, "power")[0]
    check_file_schema(good, POWER)
    table = pq.read_table(good)
    bad_path = tmp_path / "bad.parquet"
    pq.write_table(table.set_column(table.schema.get_field_index("gpu"), "gpu", table.column("gpu").cast(pa.int64())), bad_path)
    with pytest.raises(SchemaError, match=rf"{bad_path}: column 'gpu' is int64"):
        check_file_schema(bad_path, POWER)
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(good.read_bytes()[:-20])
    with pytest.raises(SchemaError, match=rf"{corrupt}: not a readable Parquet file"):
        check_file_schema(corrupt, POWER)


def test_power_is_stored_in_microseconds_and_older_nanosecond_files_still_read(tmp_path):
    import duckdb

    t, p = square_wave(1, 1, 100, 200)
    table = power_table("h", 0, t, p)
    ns = table.set_column(0, "ts", table.column("ts").cast(pa.timestamp("ns", tz="UTC")))
    new = write_dataset(ns, tmp_path, "power", prefix="new")[0]
    assert pq.read_schema(new).field("ts").type == pa.timestamp("us", tz="UTC")
    old = Path(new).with_name("old.parquet")
    pq.write_table(ns, old)  # what a collector of an earlier release wrote
    check_file_schema(old, POWER)
    both = duckdb.connect().execute(
        f"SELECT epoch_ns(ts) AS t, count(*) AS n FROM read_parquet(['{new}', '{old}']) GROUP BY t ORDER BY t").fetchall()
    expected = epoch_ns(ns.column("ts")).to_pylist()
    assert [t for t, _ in both] == expected and all(n == 2 for _, n in both)


def test_writer_splits_days_and_hosts_into_hive_folders(tmp_path):
    t, p = square_wave(4, 1, 100, 200, start_ns=1_764_460_798 * 10**9)  # 2025-11-29 23:59:58 UTC
    paths = write_dataset(power_table("h1", 0, t, p), tmp_path, "power", prefix="x", unique_names=False)
    assert sorted(str(p.relative_to(tmp_path)) for p in paths) == [
        "power/date=2025-11-29/host=h1/x.parquet",
        "power/date=2025-11-30/host=h1/x.parquet",
    ]
    assert sum(pq.read_table(p).num_rows for p in paths) == 40
    assert not list(tmp_path.rglob(".tmp-*"))


def test_inventory_errors_name_the_bad_key(tmp_path):
    two_host_inventory(tmp_path)
    inv = load_inventory(tmp_path / "inventory.yaml")
    assert [r["endpoint"] for r in inv.gpu_rows() if r["role"] == "inference"] == ["ep-a", "ep-a"]
    base = {"fleets": [{"name": "f", "clusters": [{"name": "c", "hosts": [{"name": "h", "role": "training", "gpus": [{"index": 0, "tdp_w": 700}]}]}]}]}
    bad_role = {"fleets": [{"name": "f", "clusters": [{"name": "c", "hosts": [{"name": "h", "role": "trainig", "gpus": [{"index": 0, "tdp_w": 700}]}]}]}]}
    parse_inventory(base)
    with pytest.raises(InventoryError, match=r"fleets\[0\]\.clusters\[0\]\.hosts\[0\]\.role"):
        parse_inventory(bad_role)
    no_tdp = {"fleets": [{"name": "f", "clusters": [{"name": "c", "hosts": [{"name": "h", "role": "training", "gpus": [{"index": 0}]}]}]}]}
    with pytest.raises(InventoryError, match=r"hosts\[0\]\.gpus\[0\]\.tdp_w: Field required"):
        parse_inventory(no_tdp)
    wrong_gpu = {
        "fleets": [
            {
                "name": "f",
                "clusters": [
                    {
                        "name": "c",
                        "hosts": [{"name": "h", "role": "inference", "gpus": [{"index": 0, "tdp_w": 700}], "endpoints": [{"name": "e", "gpus": [3]}]}],
                    }
                ],
            }
        ]
    }
    with pytest.raises(InventoryError, match=r"'e' uses GPU\(s\) \[3\]"):
        parse_inventory(wrong_gpu)
