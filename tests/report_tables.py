"""Small analytics tables with the documented columns (issues 3 and 8), written as derived
partitions so the report can be tested with and without each of them before they land."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import warehouse
from tests.report_serving import CAP_SCHEMA, cap_rows

UTC = dt.UTC


def _ts(date: str, seconds: float) -> dt.datetime:
    return dt.datetime.fromisoformat(date).replace(tzinfo=UTC) + dt.timedelta(seconds=seconds)


def write_table(data_dir: Path, name: str, date: str, rows: list[dict], schema: pa.Schema) -> None:
    """The day's rows of ``name``, replacing every part of the day (cluster-days' included)."""
    folder = data_dir / "derived" / name / f"date={date}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), folder / "part-0.parquet")


def _schema(*fields) -> pa.Schema:
    types = {"s": pa.string(), "f": pa.float64(), "i": pa.int64(), "d": pa.date32(), "t": pa.timestamp("ns", tz="UTC"), "b": pa.bool_()}
    return pa.schema([(name, types[kind]) for name, kind in (f.split(":") for f in fields)])


SCHEMAS = {
    "power_cap_whatif": CAP_SCHEMA,
    "swing_stats": _schema(
        "date:d",
        "level:s",
        "entity:s",
        "window_s:f",
        "series:s",
        "max_swing_w:f",
        "max_swing_pct:f",
        "p50_swing_w:f",
        "p99_swing_w:f",
        "max_ramp_w_per_s:f",
        "windows_over_10pct:i",
        "windows_over_25pct:i",
        "provisioned_w:f",
    ),
    "power_summary": _schema(
        "date:d",
        "level:s",
        "entity:s",
        "mean_w:f",
        "p99_w:f",
        "p999_w:f",
        "max_w:f",
        "mean_pct:f",
        "max_pct:f",
        "peak_to_avg:f",
        "energy_kwh:f",
        "above_tdp_share:f",
        "idle_share:f",
        "provisioned_w:f",
    ),
    # Every documented column (docs/metrics.md): the report's widest table on a real day.
    "training_vs_inference": _schema(
        "date:d", "role:s", "peak_pct:f", "mean_pct:f", "peak_to_avg:f", "max_2s_swing_pct:f", "max_2s_swing_avg1s_pct:f",
        "p50_2s_swing_pct:f", "p99_2s_swing_pct:f", "share_2s_windows_over_10pct:f", "share_2s_windows_over_25pct:f",
        "host_max_2s_swing_pct:f", "reference_2s_swing_pct:f", "reference:s", "provisioned_w:f",
    ),
    "endpoint_correlation": _schema("date:d", "a:s", "b:s", "pearson_1s:f", "spike_cooccurrence:f", "spike_lift:f", "best_lag_s:f"),
    "swing_projection": _schema(
        "date:d",
        "kind:s",
        "entity:s",
        "members:i",
        "gpus:f",
        "provisioned_w:f",
        "method:s",
        "max_2s_swing_pct:f",
        "max_2s_swing_pct_low:f",
        "max_2s_swing_pct_high:f",
        "p99_2s_swing_pct:f",
        "draws:i",
        "members_observed:i",
        "members_read:i",
        "published_scale:b",
        "published_gpus:i",
        "published_2s_swing_pct:f",
    ),
    "coincidence": _schema("date:d", "level:s", "entity:s", "coincidence_factor:f", "smoothing_ratio:f", "members:i"),
    "diurnal_profile": _schema(
        "role:s",
        "entity:s",
        "dow:i",
        "hour:i",
        "mean_w:f",
        "p5_w:f",
        "p95_w:f",
        "requests_per_s:f",
        "prompt_tokens_per_s:f",
        "output_tokens_per_s:f",
        "j_per_output_token:f",
        "days:i",
    ),
    "power_headroom": _schema(
        "date:d", "level:s", "entity:s", "provisioned_w:f", "p99_2s_w:f", "p999_2s_w:f", "max_2s_w:f", "headroom_pct:f", "extra_hosts_estimate:f"
    ),
    "training_energy": _schema(
        "date:d",
        "job:s",
        "steps:i",
        "median_step_s:f",
        "j_per_step:f",
        "j_per_token:f",
        "step_mean_w:f",
        "gap_mean_w:f",
        "gap_energy_share:f",
        "gap_time_share:f",
        "boundary_kind:s",
        "boundary_drop_median_w:f",
        "boundary_drop_max_w:f",
        "source:s",
    ),
    "phase_segments": _schema(
        "date:d",
        "endpoint:s",
        "host:s",
        "gpu:i",
        "start_ts:t",
        "end_ts:t",
        "phase:s",
        "source:s",
        "mean_w:f",
        "peak_w:f",
        "energy_j:f",
        "prompt_tokens:i",
        "output_tokens:i",
        "above_tdp:b",
    ),
    "request_energy": _schema(
        "date:d",
        "request_id:s",
        "endpoint:s",
        "prefill_j:f",
        "decode_j:f",
        "total_j:f",
        "j_per_prompt_token:f",
        "j_per_output_token:f",
        "prefill_start_estimated:b",
    ),
    "energy_per_token": _schema(
        "date:d",
        "endpoint:s",
        "bucket_kind:s",
        "bucket:s",
        "j_per_prompt_token:f",
        "j_per_output_token:f",
        "j_per_request:f",
        "prefill_mean_w:f",
        "decode_mean_w:f",
        "prefill_time_share:f",
        "prefill_energy_share:f",
        "tdp_exceedances:i",
        "requests:i",
        "requests_with_power:i",
    ),
}

# Which report sections need which table (they say "not available yet" without it).
SECTION_OF = {
    "swing_stats": {"headline", "swings"},
    "power_headroom": {"headline"},
    "phase_segments": {"inference"},
    "energy_per_token": {"inference", "serving"},
    "power_cap_whatif": {"serving"},
    "endpoint_correlation": {"correlation"},
    "swing_projection": {"swings"},
    "coincidence": {"correlation"},
    "diurnal_profile": {"diurnal"},
}


def analytics_rows(
    date: str, *, hosts: list[str], clusters: list[str], endpoints: list[str], gpus: list[tuple[str, int]], seconds: float = 600
) -> dict[str, list[dict]]:
    d = dt.date.fromisoformat(date)
    rows: dict[str, list[dict]] = {name: [] for name in SCHEMAS}
    rows["power_cap_whatif"] = cap_rows(date, [("endpoint", e) for e in endpoints] + [("job", "job-a")], clusters)
    levels = [("role", "training", 1500.0), ("role", "inference", 1400.0), ("fleet", "test", 4000.0)]
    levels += [("cluster", c, 4000.0) for c in clusters] + [("host", h, 1500.0) for h in hosts]
    for level, entity, prov in levels:
        train = entity == "training" or entity.startswith("train")
        for window in (1.0, 2.0, 10.0, 60.0):
            for series in ("instant", "avg1s"):
                swing = (1200.0 if train else 50.0) * (1 if series == "instant" else 0.8)
                rows["swing_stats"].append(
                    dict(
                        date=d,
                        level=level,
                        entity=entity,
                        window_s=window,
                        series=series,
                        max_swing_w=swing,
                        max_swing_pct=100 * swing / prov,
                        p50_swing_w=swing / 2,
                        p99_swing_w=swing * 0.9,
                        max_ramp_w_per_s=swing * 10,
                        windows_over_10pct=3,
                        windows_over_25pct=1,
                        provisioned_w=prov,
                    )
                )
        rows["power_summary"].append(
            dict(
                date=d,
                level=level,
                entity=entity,
                mean_w=prov * 0.4,
                p99_w=prov * 0.8,
                p999_w=prov * 0.85,
                max_w=prov * 0.9,
                mean_pct=40.0,
                max_pct=90.0,
                peak_to_avg=2.25,
                energy_kwh=prov * 0.4 * seconds / 3.6e6,
                above_tdp_share=0.01,
                idle_share=0.1,
                provisioned_w=prov,
            )
        )
        if level in ("host", "cluster"):
            rows["power_headroom"].append(
                dict(
                    date=d,
                    level=level,
                    entity=entity,
                    provisioned_w=prov,
                    p99_2s_w=prov * 0.6,
                    p999_2s_w=prov * 0.7,
                    max_2s_w=prov * 0.75,
                    headroom_pct=25.0,
                    extra_hosts_estimate=1.5,
                )
            )
        if level != "gpu":
            rows["coincidence"].append(dict(date=d, level=level, entity=entity, coincidence_factor=0.95 if train else 0.55, smoothing_ratio=0.7, members=2))
    for role in ("training", "inference"):
        rows["training_vs_inference"].append(
            dict(
                date=d,
                role=role,
                peak_pct=90.0,
                mean_pct=40.0,
                max_2s_swing_pct=80.0 if role == "training" else 3.6,
                reference_2s_swing_pct=37.5 if role == "training" else 9.0,
                peak_to_avg=2.25,
                max_2s_swing_avg1s_pct=64.0 if role == "training" else 2.9,
                p50_2s_swing_pct=40.0 if role == "training" else 1.8,
                p99_2s_swing_pct=72.0 if role == "training" else 3.2,
                share_2s_windows_over_10pct=0.25 if role == "training" else 0.0,
                share_2s_windows_over_25pct=0.125 if role == "training" else 0.0,
                host_max_2s_swing_pct=85.3333 if role == "training" else 4.1667,
                reference="synchronous training swings up to 37.5% of provisioned power in 2 s (published)" if role == "training"
                else "inference swings up to 9% of provisioned power in 2 s (published)",
                provisioned_w=1500.0 if role == "training" else 1400.0,
            )
        )
    for i, a in enumerate(endpoints):
        for b in endpoints[i + 1 :]:
            rows["endpoint_correlation"].append(dict(date=d, a=a, b=b, pearson_1s=0.1, spike_cooccurrence=0.05, spike_lift=1.02, best_lag_s=0.0))
    # Swing at scale: each cluster's endpoints observed, then shifted copies up to the published 2,048 GPUs;
    # the training job's hosts in step up to 1,024 GPUs. The swing smooths as 1/sqrt(k) for inference.
    projected = [("inference", c, len(endpoints), 2.0, 2048, 9.0, "shifted", 40.0, 0.5) for c in clusters]
    projected += [("training", "job-a", 2, 2.0, 1024, 37.5, "lock-step", 80.0, 0.0)]
    for kind, entity, observed, gpus_each, pub_gpus, pub_pct, beyond, swing1, smoothing in projected:
        k_pub = int(pub_gpus / gpus_each)
        ks = sorted({*(2**i for i in range(k_pub.bit_length()) if 2**i <= k_pub), max(observed, 1), k_pub})
        for k in ks:
            pct = swing1 / k**smoothing
            rows["swing_projection"].append(
                dict(
                    date=d, kind=kind, entity=entity, members=k, gpus=k * gpus_each, provisioned_w=k * gpus_each * 700.0,
                    method="observed" if k <= observed else beyond, max_2s_swing_pct=pct, max_2s_swing_pct_low=pct * (0.9 if k > 1 else 1.0),
                    max_2s_swing_pct_high=pct * (1.1 if k > 1 else 1.0), p99_2s_swing_pct=pct * 0.6, draws=8,
                    members_observed=max(observed, 1), members_read=max(observed, 1), published_scale=k == k_pub,
                    published_gpus=pub_gpus, published_2s_swing_pct=pub_pct if k == k_pub else None,
                )
            )
    for role, entity in [("training", "training"), ("inference", "inference")] + [("inference", e) for e in endpoints]:
        for hour in range(24):
            rows["diurnal_profile"].append(
                dict(
                    role=role,
                    entity=entity,
                    dow=None,
                    hour=hour,
                    mean_w=1000.0 + 20 * hour,
                    p5_w=900.0 + 20 * hour,
                    p95_w=1100.0 + 20 * hour,
                    requests_per_s=0.5 + hour / 10,
                    prompt_tokens_per_s=500.0,
                    output_tokens_per_s=80.0,
                    j_per_output_token=2.0,
                    days=1,
                )
            )
    rows["training_energy"].append(
        dict(
            date=d,
            job="job-a",
            steps=150,
            median_step_s=4.0,
            j_per_step=5600.0,
            j_per_token=None,
            step_mean_w=1400.0,
            gap_mean_w=200.0,
            gap_energy_share=0.07,
            gap_time_share=0.5,
            boundary_kind="step",
            boundary_drop_median_w=1200.0,
            boundary_drop_max_w=1200.0,
            source="power",
        )
    )
    for ep in endpoints:
        ep_gpus = gpus[:2] if ep == endpoints[0] else gpus[2:4] or gpus[:2]
        for host, gpu in ep_gpus:
            t = 0.0
            while t < seconds:
                rows["phase_segments"].append(
                    dict(
                        date=d,
                        endpoint=ep,
                        host=host,
                        gpu=gpu,
                        start_ts=_ts(date, t),
                        end_ts=_ts(date, t + 1.0),
                        phase="prefill",
                        source="requests",
                        mean_w=650.0,
                        peak_w=900.0,
                        energy_j=650.0,
                        prompt_tokens=2000,
                        output_tokens=0,
                        above_tdp=True,
                    )
                )
                rows["phase_segments"].append(
                    dict(
                        date=d,
                        endpoint=ep,
                        host=host,
                        gpu=gpu,
                        start_ts=_ts(date, t + 1.0),
                        end_ts=_ts(date, t + 9.0),
                        phase="decode",
                        source="requests",
                        mean_w=260.0,
                        peak_w=300.0,
                        energy_j=2080.0,
                        prompt_tokens=0,
                        output_tokens=400,
                        above_tdp=False,
                    )
                )
                t += 10.0
        for k in range(5):
            rows["request_energy"].append(
                dict(
                    date=d,
                    request_id=f"{ep}-{k}",
                    endpoint=ep,
                    prefill_j=65.0,
                    decode_j=208.0,
                    total_j=273.0,
                    j_per_prompt_token=0.325,
                    j_per_output_token=5.2,
                    prefill_start_estimated=False,
                )
            )
        rows["energy_per_token"].append(
            dict(
                date=d,
                endpoint=ep,
                bucket_kind="all",
                bucket="all",
                j_per_prompt_token=0.325,
                j_per_output_token=5.2,
                j_per_request=273.0,
                prefill_mean_w=650.0,
                decode_mean_w=260.0,
                prefill_time_share=0.1,
                prefill_energy_share=0.24,
                tdp_exceedances=60,
                requests=240,
                requests_with_power=240,
            )
        )
        # The last bucket says nothing about its batch size: one request cut off by the day's end, 0 J.
        for bucket, factor, n in (("1", 1.0, 60), ("2-3", 0.7, 60), ("4-7", 0.5, 60), ("16+", 0.3, 20), ("8-15", 0.4, 40), ("32+", 0.0, 1)):
            rows["energy_per_token"].append(
                dict(
                    date=d,
                    endpoint=ep,
                    bucket_kind="batch_size",
                    bucket=bucket,
                    j_per_prompt_token=0.325 * factor,
                    j_per_output_token=5.2 * factor,
                    j_per_request=273.0 * factor,
                    prefill_mean_w=650.0,
                    decode_mean_w=260.0,
                    prefill_time_share=0.1,
                    prefill_energy_share=0.24,
                    tdp_exceedances=1,
                    requests=n,
                    requests_with_power=n,
                )
            )
    return rows


def write_analytics_tables(data_dir: Path, date: str, *, only: set[str] | None = None, **kwargs) -> list[str]:
    """Write every analytics table (or ``only`` those) for ``date`` and republish the catalog."""
    written = []
    for name, rows in analytics_rows(date, **kwargs).items():
        if only is None or name in only:
            write_table(data_dir, name, date, rows, SCHEMAS[name])
            written.append(name)
    warehouse.publish(data_dir)
    return written
