"""Real runs (tests/data/phases, see SOURCE.md) converted into the data contract with polars."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pyarrow as pa

from collectors.contract import POWER, REQUESTS
from collectors.parquet_sink import write_dataset
from tests.phase_fixtures import endpoint_inventory

DATA = Path(__file__).parent / "data" / "phases"
UTC_MINUS_7_NS = 7 * 3600 * 10**9


def _power(t_ns: pl.Series, watts: pl.Series, host: str, source: str) -> pa.Table:
    df = pl.DataFrame({"ts": t_ns.cast(pl.Int64), "power_w": watts.cast(pl.Float32)})
    n = df.height
    cols = {
        "ts": pa.array(df["ts"].to_numpy()).cast(pa.timestamp("ns", tz="UTC")),
        "host": pa.array([host] * n),
        "gpu": pa.array([0] * n, pa.uint8()),
        "gpu_uuid": pa.array([f"GPU-{host}"] * n),
        "power_w": pa.array(df["power_w"].to_numpy()),
        "source": pa.array([source] * n).dictionary_encode(),
    }
    for f in POWER:
        cols.setdefault(f.name, pa.nulls(n, f.type))
    return pa.table(cols).select(POWER.names).cast(POWER)


def _requests(df: pl.DataFrame) -> pa.Table:
    ts = pa.timestamp("ns", tz="UTC")
    return pa.table({
        "request_id": pa.array(df["request_id"].cast(pl.Utf8).to_list()),
        "endpoint": pa.array(df["endpoint"].to_list()),
        **{c: pa.array(df[c].cast(pl.Int64).to_numpy()).cast(ts) for c in ("arrival_ts", "first_token_ts", "end_ts")},
        "prefill_start_ts": pa.array(df["prefill_start_ts"].cast(pl.Int64).to_list(), pa.int64()).cast(ts),
        "prompt_tokens": pa.array(df["prompt_tokens"].cast(pl.Int32).to_numpy()),
        "output_tokens": pa.array(df["output_tokens"].cast(pl.Int32).to_numpy()),
        "status": pa.array(["ok"] * df.height),
        "max_tokens": pa.nulls(df.height, pa.int32()),
        "replica": pa.nulls(df.height, pa.string()),
    }).select(REQUESTS.names).cast(REQUESTS)


def nvidia_smi_local_ns(path: Path) -> pl.DataFrame:
    """nvidia-smi CSV (local wall time of a UTC−7 zone) → (t_ns UTC, power_w)."""
    df = pl.read_csv(path)
    t = df["timestamp"].str.strptime(pl.Datetime("ns"), "%Y/%m/%d %H:%M:%S%.3f").dt.epoch("ns") + UTC_MINUS_7_NS
    return pl.DataFrame({"t_ns": t, "power_w": df["power.draw [W]"]})


def write_h200_capture(data_dir: Path, request_offset_s: float = 0.0) -> str:
    """The H200 capture's inference phase (driver buffer, ~20 ms) and its logged requests."""
    src = DATA / "h200-capture-2"
    endpoint_inventory(data_dir, endpoint="llm-8b-0", gpus=1, tdp_w=700.0, model="H200")
    buf = pl.read_csv(src / "driver_buffer_infer.csv")
    write_dataset(_power(buf["driver_ts_us"] * 1000, buf["power_mw"] / 1000.0, "infer-0", "nvml-buffer"), data_dir, "power", prefix="h200")
    off = int(request_offset_s * 1e9)
    req = pl.read_csv(src / "requests.csv").select(
        "request_id", "endpoint",
        (pl.col("arrival_ns") + off).alias("arrival_ts"), (pl.col("prefill_start_ns") + off).alias("prefill_start_ts"),
        (pl.col("first_token_ns") + off).alias("first_token_ts"), (pl.col("end_ns") + off).alias("end_ts"),
        "prompt_tokens", "output_tokens",
    )
    write_dataset(_requests(req), data_dir, "requests", prefix="h200")
    return "2026-12-02"


def write_a100_smoke(data_dir: Path, run: str) -> str:
    """A vLLM smoke run on one A100 (400 W): nvidia-smi power (250 ms) and the benchmark's requests."""
    src = DATA / "vllm-a100-smoke" / run
    endpoint_inventory(data_dir, endpoint="qwen3-8b", gpus=1, tdp_w=400.0, model="A100")
    p = nvidia_smi_local_ns(src / "power.csv")
    write_dataset(_power(p["t_ns"], p["power_w"], "infer-0", "nvidia-smi"), data_dir, "power", prefix="a100")
    r = json.loads((src / "requests.json").read_text())
    itl = [x if isinstance(x, float) else None for x in r["itls"]]
    arrival = [int(t * 1e9) for t in r["request_timestamps"]]
    first = [a + int(ttft * 1e9) for a, ttft in zip(arrival, r["ttfts"], strict=False)]
    end = [f + int(i * (n - 1) * 1e9) if i is not None else f + int(sum(lst) * 1e9)
           for f, i, n, lst in zip(first, itl, r["output_lens"], r["itls"], strict=False)]
    df = pl.DataFrame({
        "request_id": [f"{run}-{i}" for i in range(len(arrival))], "endpoint": "qwen3-8b",
        "arrival_ts": arrival, "prefill_start_ts": [None] * len(arrival), "first_token_ts": first, "end_ts": end,
        "prompt_tokens": r["input_lens"], "output_tokens": r["output_lens"],
    })
    write_dataset(_requests(df), data_dir, "requests", prefix="a100")
    day = pl.from_epoch(pl.Series([arrival[0]]), time_unit="ns").dt.date()[0]
    return day.isoformat()


def write_engine_run(data_dir: Path, name: str, tdp_w: float, model: str) -> tuple[str, pl.DataFrame]:
    """A vLLM run with power only (no request log): its power, and its engine counters (epoch s)."""
    src = DATA / name
    endpoint_inventory(data_dir, endpoint=name, gpus=1, tdp_w=tdp_w, model=model)
    p = nvidia_smi_local_ns(src / "power.csv")
    write_dataset(_power(p["t_ns"], p["power_w"], "infer-0", "nvidia-smi"), data_dir, "power", prefix=name)
    engine = pl.read_csv(src / "engine.csv")
    day = pl.from_epoch(p["t_ns"].head(1), time_unit="ns").dt.date()[0]
    return day.isoformat(), engine
