"""Arrow tables in the data contract's shape, written through the atomic Parquet sink.

File names are fixed per host and dataset (``unique_names=False``), so the same seed rewrites
byte-identical files and a rerun replaces rather than duplicates.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from collectors.contract import JOB_EVENTS, POWER_TS, REQUESTS, TS
from collectors.nvml.rows import BUFFER, FIELD, sort_power
from collectors.parquet_sink import write_dataset
from collectors.simulate import calibration
from collectors.simulate.power import BufferReadings, GpuReadings

PREFIX = "sim"
POWER_LIMIT_W = 700.0
"""The calibrated H200's limit; each GPU writes its enforced limit (``power_limit_w`` in the fleet, default TDP)."""
SLOW_FIELDS_EVERY_NS = calibration.SLOW_FIELDS_EVERY_NS
ENERGY_EVERY_NS = calibration.ENERGY_EVERY_NS
"""The NVML collector's default cadences: slow fields once a second, the energy counter every 30 s
(it costs ~4 ms of CPU per read). The simulator writes the same sparsity so its files look like
the collector's and compress alike."""


def _repeat_str(value: str, n: int) -> pa.Array:
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([value]))


def _first_of_period(ts_ns: np.ndarray, period_ns: int) -> np.ndarray:
    """True on the first reading of each period (ts in time order)."""
    period = ts_ns // period_ns
    return np.concatenate(([True], period[1:] != period[:-1]))


def _sparse(values: np.ndarray, keep: np.ndarray) -> pa.Array:
    return pa.array(values, mask=~keep)


def power_table(host: str, gpu: int, gpu_uuid: str, r: GpuReadings, limit_w: float = POWER_LIMIT_W) -> pa.Table:
    """One GPU's rows for one window, already in time order: one file per GPU keeps memory small."""
    n = len(r.ts_ns)
    slow = _first_of_period(r.ts_ns, SLOW_FIELDS_EVERY_NS)
    columns = {
        "ts": pa.array(r.ts_ns, type=pa.int64()).cast(TS),
        "host": _repeat_str(host, n),
        "gpu": np.full(n, gpu, np.uint8),
        "gpu_uuid": _repeat_str(gpu_uuid, n),
        "power_w": r.power_w,
        "power_avg_w": r.power_avg_w,
        "energy_j": _sparse(r.energy_j, _first_of_period(r.ts_ns, ENERGY_EVERY_NS)),
        "sm_clock_mhz": _sparse(r.sm_clock_mhz, slow),
        "gpu_util_pct": _sparse(r.gpu_util_pct, slow),
        "mem_used_mib": _sparse(r.mem_used_mib, slow),
        "temp_c": _sparse(r.temp_c, slow),
        "power_limit_w": _sparse(np.full(n, limit_w, np.float32), slow),
        "source": _repeat_str("simulated", n),
    }
    return pa.table(columns)


def collector_table(host: str, gpus: list[tuple[int, str, BufferReadings, GpuReadings, float]]) -> pa.Table:
    """One host's rows as ``wattline collect`` writes them (``--shape collector``): per GPU the driver
    buffer's rows (``nvml-buffer``: power only) and the 100 ms field rows (``nvml-field``: instant and
    1 s average power, the energy counter every 30 s, the slow fields once a second), sorted by
    (gpu, source, ts) like a compacted hour (:func:`collectors.nvml.rows.sort_power`)."""
    parts = []
    for gpu, uuid, buf, fld, limit_w in gpus:
        nb, nf = len(buf.ts_ns), len(fld.ts_ns)
        slow = _first_of_period(fld.ts_ns, calibration.SLOW_FIELDS_EVERY_NS)
        energy = _first_of_period(fld.ts_ns, calibration.ENERGY_EVERY_NS)
        null = lambda t, n: pa.nulls(n, t)  # noqa: E731
        parts.append(pa.table({
            "ts": pa.array(np.concatenate([buf.ts_ns, fld.ts_ns]), pa.int64()).cast(TS).cast(POWER_TS),
            "host": pa.array([host], pa.string()).take(np.zeros(nb + nf, np.int32)),
            "gpu": np.full(nb + nf, gpu, np.uint8),
            "gpu_uuid": pa.array([uuid], pa.string()).take(np.zeros(nb + nf, np.int32)),
            "power_w": np.concatenate([buf.power_w, fld.power_w]).astype(np.float32),
            "power_avg_w": pa.concat_arrays([null(pa.float32(), nb), pa.array(fld.power_avg_w, pa.float32())]),
            "energy_j": pa.concat_arrays([null(pa.float64(), nb), _sparse(fld.energy_j, energy)]),
            "sm_clock_mhz": pa.concat_arrays([null(pa.uint16(), nb), _sparse(fld.sm_clock_mhz, slow)]),
            "gpu_util_pct": pa.concat_arrays([null(pa.uint8(), nb), _sparse(fld.gpu_util_pct, slow)]),
            "mem_used_mib": pa.concat_arrays([null(pa.uint32(), nb), _sparse(fld.mem_used_mib, slow)]),
            "temp_c": pa.concat_arrays([null(pa.uint8(), nb), _sparse(fld.temp_c, slow)]),
            "power_limit_w": pa.concat_arrays([null(pa.float32(), nb), _sparse(np.full(nf, limit_w, np.float32), slow)]),
            "source": pa.DictionaryArray.from_arrays(
                pa.array(np.repeat(np.array([0, 1], np.int32), [nb, nf])), pa.array([BUFFER, FIELD])),
        }))
    return sort_power(pa.concat_tables(parts))


def _ts(epoch_ns: int, s: np.ndarray) -> pa.Array:
    return pa.array(epoch_ns + np.rint(np.asarray(s) * 1e9).astype(np.int64), type=pa.int64()).cast(TS)


def requests_table(epoch_ns: int, cols: dict[str, np.ndarray]) -> pa.Table:
    return pa.table(
        {
            "request_id": pa.array(cols["request_id"], pa.string()),
            "endpoint": pa.array(cols["endpoint"], pa.string()),
            "arrival_ts": _ts(epoch_ns, cols["arrival_s"]),
            "prefill_start_ts": _ts(epoch_ns, cols["prefill_start_s"]),
            "first_token_ts": _ts(epoch_ns, cols["first_token_s"]),
            "end_ts": _ts(epoch_ns, cols["end_s"]),
            "prompt_tokens": pa.array(cols["prompt_tokens"], pa.int32()),
            "output_tokens": pa.array(cols["output_tokens"], pa.int32()),
            "status": pa.array(cols["status"], pa.string()),
            "max_tokens": pa.nulls(len(cols["request_id"]), pa.int32()),
            "replica": pa.nulls(len(cols["request_id"]), pa.string()),
        },
        schema=REQUESTS,
    )


def job_events_table(epoch_ns: int, cols: dict[str, np.ndarray]) -> pa.Table:
    return pa.table(
        {
            "job": pa.array(cols["job"], pa.string()),
            "host": pa.array(cols["host"], pa.string()),
            "step": pa.array(cols["step"], pa.int64()),
            "kind": pa.array(cols["kind"], pa.string()),
            "start_ts": _ts(epoch_ns, cols["start_s"]),
            "end_ts": _ts(epoch_ns, cols["end_s"]),
            "tokens": pa.array(cols["tokens"], pa.int64()),
        },
        schema=JOB_EVENTS,
    )


def write(table: pa.Table, data_dir: Path | str, dataset: str, prefix: str = PREFIX,
          sort_by: list[str] | None = None) -> list[Path | str]:
    return write_dataset(table, data_dir, dataset, prefix=prefix, sort_by=sort_by, unique_names=False)
