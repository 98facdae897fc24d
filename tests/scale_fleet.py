"""A 1,000-GPU fleet for the report's budgets: inventory, a full day of role/fleet/cluster
power at 1 s (written as `fleet_power_1s`), and one minute of `power_1s` per GPU."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from collectors.inventory import dump_inventory, parse_inventory

CLUSTERS = 4
HOSTS_PER_CLUSTER = 32  # 128 hosts × 8 GPUs = 1,024 GPUs
GPUS_PER_HOST = 8


def write_scale_fleet(data_dir: Path, date: str):
    data_dir.mkdir(parents=True, exist_ok=True)
    clusters, hosts, endpoints, gpu_list = [], [], [], []
    inv_clusters = []
    for c in range(CLUSTERS):
        cname = f"c{c}"
        clusters.append(cname)
        inv_hosts = []
        for h in range(HOSTS_PER_CLUSTER):
            training = c < 2
            name = f"{'train' if training else 'infer'}-{c}-{h}"
            hosts.append(name)
            gpus = [{"index": i, "tdp_w": 700} for i in range(GPUS_PER_HOST)]
            host = {"name": name, "role": "training" if training else "inference", "gpus": gpus}
            if training:
                host["jobs"] = [{"name": f"job-{c}", "gpus": list(range(GPUS_PER_HOST))}]
            else:
                ep = f"ep-{c}-{h // 4}"
                host["endpoints"] = [{"name": ep, "gpus": list(range(GPUS_PER_HOST))}]
                if ep not in endpoints:
                    endpoints.append(ep)
                gpu_list += [(name, i) for i in range(GPUS_PER_HOST)]
            inv_hosts.append(host)
        inv_clusters.append({"name": cname, "hosts": inv_hosts})
    dump_inventory(parse_inventory({"fleets": [{"name": "big", "clusters": inv_clusters}]}), data_dir / "inventory.yaml")

    day = dt.datetime.fromisoformat(date).replace(tzinfo=dt.UTC)
    seconds = np.arange(86400)
    ts = pa.array((int(day.timestamp()) + seconds) * 10**9, pa.int64()).cast(pa.timestamp("ns", tz="UTC"))
    rng = np.random.default_rng(0)
    tables = []
    prov = {"role": 32 * 8 * 700 * 2.0, "fleet": 1024 * 700.0, "cluster": 32 * 8 * 700.0}
    series = [("role", "training"), ("role", "inference"), ("fleet", "big")] + [("cluster", c) for c in clusters]
    power = {}
    for level, entity in series:
        if level == "fleet":  # consistent with its parts
            w = power[("role", "training")] + power[("role", "inference")]
        else:
            base = prov[level] * (0.8 if "train" in entity or entity in ("c0", "c1") else 0.35)
            w = base * (1 + 0.1 * np.sin(seconds / 86400 * 2 * np.pi)) * rng.uniform(0.9, 1.05, 86400)
        power[(level, entity)] = w
        tables.append(pa.table({
            "date": pa.array([dt.date.fromisoformat(date)] * 86400, pa.date32()), "level": [level] * 86400, "entity": [entity] * 86400, "ts": ts,
            "power_w": pa.array(w, pa.float32()), "energy_j": pa.array(w, pa.float64()), "gpus_reporting": pa.array([8] * 86400, pa.int32()),
            "gpus_total": pa.array([8] * 86400, pa.int64()), "provisioned_w": pa.array([prov[level]] * 86400, pa.float64()),
            "power_pct": pa.array(100 * w / prov[level], pa.float32()),
        }))
    folder = data_dir / "derived" / "fleet_power_1s" / f"date={date}"
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.concat_tables(tables), folder / "part-0.parquet")

    all_gpus = [(h, g) for h in hosts for g in range(GPUS_PER_HOST)]
    n = 60
    rows = {"date": [], "host": [], "gpu": [], "ts": [], "mean_w": [], "min_w": [], "max_w": [], "energy_j": [], "samples": [], "gap_before": []}
    for h, g in all_gpus:
        rows["date"] += [dt.date.fromisoformat(date)] * n
        rows["host"] += [h] * n
        rows["gpu"] += [g] * n
        rows["ts"] += list(range(n))
        rows["mean_w"] += [300.0] * n
        rows["min_w"] += [250.0] * n
        rows["max_w"] += [350.0] * n
        rows["energy_j"] += [300.0] * n
        rows["samples"] += [10] * n
        rows["gap_before"] += [True] + [False] * (n - 1)
    t = pa.table({
        "date": pa.array(rows["date"], pa.date32()), "host": rows["host"], "gpu": pa.array(rows["gpu"], pa.uint8()),
        "ts": pa.array((int(day.timestamp()) + np.array(rows["ts"])) * 10**9, pa.int64()).cast(pa.timestamp("ns", tz="UTC")),
        "mean_w": pa.array(rows["mean_w"], pa.float32()), "min_w": pa.array(rows["min_w"], pa.float32()), "max_w": pa.array(rows["max_w"], pa.float32()),
        "energy_j": rows["energy_j"], "samples": pa.array(rows["samples"], pa.int32()), "gap_before": rows["gap_before"],
    })
    folder = data_dir / "derived" / "power_1s" / f"date={date}"
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(t, folder / "part-0.parquet")
    return hosts, clusters, endpoints, gpu_list
