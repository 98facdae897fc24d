"""Real H200 captures for power-only phase detection, with a fit/validate split.

Fit (the detector's rules were chosen on these): h200-capture-2 (8B, static batching) and
h200-capture-4 (8B, continuous batching). Validate (recorded afterwards with bench/h200_capture.py,
never used to choose anything): tests/data/h200-captures/*, see SOURCE.md there.

Power is the driver's ~20 ms buffer (`nvml-buffer`), the reference the logged prefill intervals;
IoU by tests/phase_reference.iou inside the log's busy span (first prefill start to last end).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from collectors.inventory import dump_inventory, parse_inventory
from collectors.parquet_sink import write_dataset
from tests.phase_real import _power, _requests
from tests.phase_reference import iou

DATA = Path(__file__).parent / "data"
NEW = DATA / "h200-captures"


@dataclass(frozen=True)
class Capture:
    name: str
    split: str  # "fit" or "validate"
    batching: str  # "static" or "continuous"
    model: str

    @property
    def endpoint(self) -> str:
        return f"ep-{self.name}"

    @property
    def host(self) -> str:
        return f"h-{self.name}"


FIT = [Capture("h200-capture-2", "fit", "static", "8B"), Capture("h200-capture-4", "fit", "continuous", "8B")]


def validate_captures() -> list[Capture]:
    out = []
    for d in sorted(NEW.iterdir()) if NEW.is_dir() else []:
        if (d / "capture.json").is_file():
            info = json.loads((d / "capture.json").read_text())
            plan = info["plan"]
            n = info["params"]
            out.append(Capture(d.name, "validate", plan["mode"], f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"))
    return out


def buffer(c: Capture) -> tuple[np.ndarray, np.ndarray]:
    """The capture's driver-buffer samples: (t_ns, W), sorted, one per timestamp."""
    if c.name == "h200-capture-2":
        df = pl.read_csv(DATA / "phases" / "h200-capture-2" / "driver_buffer_infer.csv")
    elif c.name == "h200-capture-4":
        df = (pl.read_parquet(str(DATA / "h200-capture-4" / "power" / "**" / "*.parquet"), hive_partitioning=False)
              .filter(pl.col("source").cast(pl.Utf8) == "nvml-buffer")
              .select((pl.col("ts").dt.epoch("us")).alias("driver_ts_us"), (pl.col("power_w") * 1000).alias("power_mw")))
    else:
        df = pl.read_csv(NEW / c.name / "driver_buffer.csv")
    df = df.group_by("driver_ts_us").agg(pl.col("power_mw").mean()).sort("driver_ts_us")
    return df["driver_ts_us"].to_numpy() * 1000, df["power_mw"].to_numpy() / 1000.0


def requests(c: Capture) -> pl.DataFrame:
    path = {"h200-capture-2": DATA / "phases" / "h200-capture-2" / "requests.csv",
            "h200-capture-4": DATA / "h200-capture-4" / "requests.csv"}.get(c.name, NEW / c.name / "requests.csv")
    return pl.read_csv(path)


def write_captures(data_dir: Path, caps: list[Capture]) -> str:
    """Collector-shaped rows (the buffer as `nvml-buffer` power, the log as requests), one host,
    GPU and endpoint per capture; returns the day (all captures must share it)."""
    hosts = [{"name": c.host, "role": "inference", "gpus": [{"index": 0, "tdp_w": 700.0, "model": "H200"}],
              "endpoints": [{"name": c.endpoint, "gpus": [0]}]} for c in caps]
    data_dir.mkdir(parents=True, exist_ok=True)
    dump_inventory(parse_inventory({"fleets": [{"name": "lab", "clusters": [{"name": "c0", "hosts": hosts}]}]}), data_dir / "inventory.yaml")
    days = set()
    for c in caps:
        t, p = buffer(c)
        write_dataset(_power(pl.Series(t), pl.Series(p), c.host, "nvml-buffer"), data_dir, "power", prefix=c.name)
        req = requests(c).select(
            pl.col("request_id").cast(pl.Utf8), pl.lit(c.endpoint).alias("endpoint"),
            pl.col("arrival_ns").alias("arrival_ts"), pl.col("prefill_start_ns").alias("prefill_start_ts"),
            pl.col("first_token_ns").alias("first_token_ts"), pl.col("end_ns").alias("end_ts"), "prompt_tokens", "output_tokens",
        )
        write_dataset(_requests(req), data_dir, "requests", prefix=c.name)
        days.add(pl.from_epoch(pl.Series([int(t[0])]), time_unit="ns").dt.date()[0].isoformat())
    assert len(days) == 1, days
    return days.pop()


def busy_span(req: pl.DataFrame) -> tuple[int, int]:
    return int(req["prefill_start_ns"].min()), int(req["end_ns"].max())


def prefill_iou(power_prefills: list[tuple[int, int]], req: pl.DataFrame) -> float:
    """IoU of power-only prefill intervals (clipped to the log's busy span) with the logged prefills."""
    lo, hi = busy_span(req)
    logged = list(zip(req["prefill_start_ns"].to_list(), req["first_token_ns"].to_list(), strict=True))
    power = [(max(a, lo), min(b, hi)) for a, b in power_prefills if b > lo and a < hi]
    return iou(power, logged)
