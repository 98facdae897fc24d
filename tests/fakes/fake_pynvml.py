"""A fake ``pynvml`` module: the NVML boundary only, replaying this project's real H200 capture.

The collector imports it by name (``--nvml-module tests.fakes.fake_pynvml`` or env
``WATTLINE_NVML_MODULE``), so the code under test is the real collector, unchanged. Error
classes, constants and ctypes structs are the real pynvml's, so faults look exactly as the
driver reports them.

Replay: instant/average power, energy and slow fields from ``tests/data/nvml/h200_fields.csv``
(20 s of a training loop swinging 120 ↔ 850 W), the ~20 ms driver buffer from
``h200_buffer.csv``, both looped and anchored to the wall clock (so a restarted collector sees the
same buffer samples, as on a real GPU); GPU g is shifted by g × 3.3 s.

Faults, as JSON in env ``WATTLINE_FAKE_NVML`` or via :func:`configure` (times are seconds since
``nvmlInit``; GPU keys are strings in JSON):
``gpus`` (int), ``no_driver`` (bool), ``lost`` / ``timeout`` ({gpu: [from_s, to_s]}: every call
on that GPU raises GPU_IS_LOST / TIMEOUT), ``not_supported`` ({gpu: [what, ...]}, what in
temperature, clock, utilization, memory, power_limit, energy, buffer, instant),
``stall`` ({gpu: [at_s, seconds]}: the first power read after at_s blocks that long),
``driver_clock_offset_s`` (float: the driver's field timestamps run this far ahead of the host clock),
``energy_reset`` ({gpu: at_s}: counter restarts near zero), ``energy_glitch`` ({gpu: at_s}: one read 5 J below the previous read),
``signal`` ({gpu: {...}}: instead of the replay, that GPU's power follows a scripted signal, sampled in
the buffer at exact driver timestamps ``k × 20 ms + grid_offset_us``; the instant field is the signal
at the call, the 1 s average the mean of the buffer grid over the last second. Kinds, all in absolute
Unix time so a test knows the answer: ``{"kind": "square", "low_w", "high_w", "period_s"}`` (high in
the second half of each period counted from the epoch), ``{"kind": "ramp", "low_w", "slope_w_per_s",
"start_unix_s"}`` (flat before), ``{"kind": "spike", "low_w", "high_w", "at_unix_s", "width_s"}``
(high for ``at ≤ t < at + width``), ``{"kind": "constant", "low_w"}``; :func:`signal_w` is the formula),
``served_log`` (path: every power sample handed out is appended there as ``field|buffer gpu ts_us wall_s``,
so a test can compare what reached the disk with what the "driver" served, even after a SIGKILL).
"""

from __future__ import annotations

import bisect
import csv
import json
import os
import threading
import time
from collections import Counter
from pathlib import Path

from pynvml import *  # noqa: F401,F403  the real constants and NVMLError_* classes
from pynvml import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_TIMEOUT,
    NVML_ERROR_UNINITIALIZED,
    NVML_VALUE_TYPE_UNSIGNED_INT,
    NVMLError,
    c_nvmlFieldValue_t,
    c_nvmlSample_t,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "nvml"
ENV = "WATTLINE_FAKE_NVML"
SHIFT_S = 3.3
BUFFER_SPAN_US = 2_400_000
BUFFER_MAX = 119

CALLS: Counter = Counter()
_lock = threading.Lock()
_cfg: dict = {}
_start = {"wall_us": 0, "mono": 0.0, "init": False}
_stalled: set = set()
_glitched: set = set()
_last_mj: dict = {}


def _load():
    with open(DATA / "h200_fields.csv") as fh:
        rows = list(csv.DictReader(fh))
    t0 = int(rows[0]["t_ns"])
    fields = {
        "t": [(int(r["t_ns"]) - t0) / 1e9 for r in rows],
        "inst": [int(r["power_instant_mw"]) for r in rows],
        "avg": [int(r["power_average_mw"]) for r in rows],
        "energy": [int(r["total_energy_mj"]) for r in rows],
        "util": [int(r["util_gpu_pct"]) for r in rows],
        "sm": [int(r["sm_clock_mhz"]) for r in rows],
        "mem": [int(r["mem_used_mib"]) for r in rows],
        "temp": [int(r["temp_c"]) for r in rows],
    }
    with open(DATA / "h200_buffer.csv") as fh:
        buf = list(csv.DictReader(fh))
    buf_t = [(int(r["driver_ts_us"]) - t0 // 1000) for r in buf]
    buf_mw = [int(r["power_mw"]) for r in buf]
    span_s = 20.0
    return fields, buf_t, buf_mw, span_s


FIELDS, BUF_T_US, BUF_MW, SPAN_S = _load()
SPAN_US = int(SPAN_S * 1e6)
ENERGY_PER_LOOP_MJ = FIELDS["energy"][-1] - FIELDS["energy"][0]
UUID = "GPU-c002ef2a-2a3c-e0e9-4d8a-a58bfd6b00{:02x}"


def configure(**cfg) -> None:
    """Set the fault plan in-process (tests that do not use a subprocess)."""
    _cfg.clear()
    _cfg.update(json.loads(json.dumps(cfg)))  # same shape as the JSON env var: string GPU keys
    _stalled.clear()
    _glitched.clear()
    _last_mj.clear()
    CALLS.clear()
    if _served["fd"] is not None:
        os.close(_served["fd"])
        _served["fd"] = None


class _Handle:
    def __init__(self, index: int):
        self.index = index


class _Util:
    def __init__(self, gpu, memory):
        self.gpu, self.memory = gpu, memory


class _Mem:
    def __init__(self, used, total):
        self.used, self.total, self.free = used, total, total - used


_served = {"fd": None}


def _log_served(kind: str, gpu: int, ts_us_list) -> None:
    """Append served samples to ``served_log`` (one unbuffered write: survives a SIGKILL right after)."""
    path = _cfg.get("served_log")
    if not path:
        return
    if _served["fd"] is None:
        _served["fd"] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    now = time.time()
    os.write(_served["fd"], "".join(f"{kind} {gpu} {ts} {now:.6f}\n" for ts in ts_us_list).encode())


def _elapsed() -> float:
    return time.monotonic() - _start["mono"]


def _window(name: str, gpu: int) -> bool:
    w = _cfg.get(name, {}).get(str(gpu))
    return bool(w) and w[0] <= _elapsed() < w[1]


def _check(handle, what: str | None = None) -> int:
    if not _start["init"]:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    g = handle.index
    if _window("lost", g):
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    if _window("timeout", g):
        raise NVMLError(NVML_ERROR_TIMEOUT)
    if what and what in _cfg.get("not_supported", {}).get(str(g), []):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return g


SLOT_US = 20_000


def signal_w(sig: dict, t_us: int) -> float:
    """The scripted signal's power (W) at driver time t_us, rounded to the driver's mW."""
    kind, low = sig["kind"], float(sig.get("low_w", 100.0))
    if kind == "square":
        period_us = int(sig["period_s"] * 1e6)
        w = sig["high_w"] if (t_us % period_us) >= period_us // 2 else low
    elif kind == "ramp":
        w = low + sig["slope_w_per_s"] * max(0.0, (t_us - sig["start_unix_s"] * 1e6) / 1e6)
    elif kind == "spike":
        at = int(sig["at_unix_s"] * 1e6)
        w = sig["high_w"] if at <= t_us < at + int(sig["width_s"] * 1e6) else low
    else:
        w = low
    return round(w * 1000) / 1000


def _signal(gpu: int) -> dict | None:
    return _cfg.get("signal", {}).get(str(gpu))


def _signal_grid(sig: dict, lo_us: int, hi_us: int) -> list[int]:
    """Driver timestamps of the signal's buffer samples in [lo_us, hi_us]."""
    off = int(sig.get("grid_offset_us", 0))
    k0 = -(-(lo_us - off) // SLOT_US)
    return list(range(k0 * SLOT_US + off, hi_us + 1, SLOT_US))


def _signal_avg_mw(sig: dict, now_us: int) -> int:
    ts = _signal_grid(sig, now_us - 999_999, now_us)
    return round(sum(signal_w(sig, t) for t in ts) / max(1, len(ts)) * 1000)


def _signal_energy_mj(sig: dict, gpu: int) -> int:
    """Energy as the sum of the grid samples since nvmlInit × 20 ms (plus an arbitrary start)."""
    ts = _signal_grid(sig, _start["wall_us"], time.time_ns() // 1000)
    return 4_000_000_000 + gpu * 1_000_000 + round(sum(signal_w(sig, t) for t in ts) * SLOT_US / 1000)


EPOCH_S = 1_790_000_000  # replay loops are counted from here (keeps the energy counter small)


def _index(gpu: int, wall_s: float) -> tuple[int, int]:
    """(row index in the replay, completed loops) at a wall-clock time. The replay is anchored to
    the wall clock, not to nvmlInit, so two collector processes see the same samples, as on a GPU."""
    pos = wall_s - EPOCH_S + gpu * SHIFT_S
    loops, phase = divmod(pos, SPAN_S)
    return max(0, bisect.bisect_right(FIELDS["t"], phase) - 1), int(loops)


def _now_row(gpu: int) -> tuple[int, int]:
    return _index(gpu, time.time())


# -- the pynvml API the collector uses ------------------------------------------------------
def nvmlInit():
    CALLS["nvmlInit"] += 1
    if not _cfg:
        _cfg.update(json.loads(os.environ.get(ENV, "{}")))
    if _cfg.get("no_driver"):
        raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED)
    _start.update(wall_us=time.time_ns() // 1000, mono=time.monotonic(), init=True)


def nvmlShutdown():
    CALLS["nvmlShutdown"] += 1
    _start["init"] = False


def nvmlDeviceGetCount():
    return int(_cfg.get("gpus", 1))


def nvmlSystemGetDriverVersion():
    return "580.159.04-fake"


def nvmlDeviceGetHandleByIndex(index):
    if not 0 <= index < nvmlDeviceGetCount():
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    h = _Handle(index)
    _check(h)
    return h


def nvmlDeviceGetUUID(handle):
    return UUID.format(_check(handle))


def nvmlDeviceGetFieldValues(handle, fieldIds):
    CALLS["nvmlDeviceGetFieldValues"] += 1
    g = _check(handle)
    stall = _cfg.get("stall", {}).get(str(g))
    if stall and g not in _stalled and _elapsed() >= stall[0]:
        _stalled.add(g)
        time.sleep(stall[1])  # a call that blocks, as a hung driver call does
    i, _ = _now_row(g)
    values = (c_nvmlFieldValue_t * len(fieldIds))()
    ts = time.time_ns() // 1000 + int(_cfg.get("driver_clock_offset_s", 0) * 1e6)
    unsupported = "instant" in _cfg.get("not_supported", {}).get(str(g), [])
    for k, fid in enumerate(fieldIds):
        v = values[k]
        v.fieldId = fid
        v.timestamp = ts
        v.valueType = NVML_VALUE_TYPE_UNSIGNED_INT
        sig = _signal(g)
        if fid == 186 and not unsupported:
            v.value.uiVal = round(signal_w(sig, ts) * 1000) if sig else FIELDS["inst"][i]
        elif fid == 185:
            v.value.uiVal = _signal_avg_mw(sig, ts) if sig else FIELDS["avg"][i]
        else:
            v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
            v.timestamp = 0
    if not unsupported:
        _log_served("field", g, [ts])
    return values


def nvmlDeviceGetTotalEnergyConsumption(handle):
    CALLS["nvmlDeviceGetTotalEnergyConsumption"] += 1
    g = _check(handle, "energy")
    i, loops = _now_row(g)
    sig = _signal(g)
    mj = _signal_energy_mj(sig, g) if sig else 4_000_000_000 + g * 1_000_000 + loops * ENERGY_PER_LOOP_MJ + FIELDS["energy"][i] - FIELDS["energy"][0]
    reset_at = _cfg.get("energy_reset", {}).get(str(g))
    if reset_at is not None and _elapsed() >= reset_at:
        mj = int((_elapsed() - reset_at) * 300_000) + 1  # a fresh counter after a driver reload
    glitch_at = _cfg.get("energy_glitch", {}).get(str(g))
    if glitch_at is not None and _elapsed() >= glitch_at and g not in _glitched and g in _last_mj:
        _glitched.add(g)
        mj = _last_mj[g] - 5_000  # below the previous read (5 J below "now" would still be ahead of it)
    _last_mj[g] = mj
    return mj


def nvmlDeviceGetSamples(device, sampling_type, timeStamp):
    CALLS["nvmlDeviceGetSamples"] += 1
    g = _check(device, "buffer")
    now_us = time.time_ns() // 1000
    lo_us = max(timeStamp + 1, now_us - BUFFER_SPAN_US)
    base = EPOCH_S * 1_000_000 - int(g * SHIFT_S * 1e6)  # wall time of replay position 0 in loop 0
    out = []
    sig = _signal(g)
    if sig:
        out = [(t, round(signal_w(sig, t) * 1000)) for t in _signal_grid(sig, lo_us, now_us)]
    loop = max(0, (lo_us - base) // SPAN_US - 1)
    while not sig and base + loop * SPAN_US <= now_us:
        origin = base + loop * SPAN_US
        a = bisect.bisect_left(BUF_T_US, lo_us - origin)
        b = bisect.bisect_right(BUF_T_US, now_us - origin)
        out.extend((origin + BUF_T_US[k], BUF_MW[k]) for k in range(a, b))
        loop += 1
    out = out[-BUFFER_MAX:]
    if not out:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    arr = (c_nvmlSample_t * len(out))()
    for k, (ts, mw) in enumerate(out):
        arr[k].timeStamp = ts
        arr[k].sampleValue.uiVal = mw
    _log_served("buffer", g, [ts for ts, _ in out])
    return NVML_VALUE_TYPE_UNSIGNED_INT, arr[0:len(out)]


def nvmlDeviceGetClockInfo(handle, clock_type):
    return FIELDS["sm"][_now_row(_check(handle, "clock"))[0]]


def nvmlDeviceGetUtilizationRates(handle):
    i = _now_row(_check(handle, "utilization"))[0]
    return _Util(FIELDS["util"][i], 0)


def nvmlDeviceGetMemoryInfo(handle):
    i = _now_row(_check(handle, "memory"))[0]
    return _Mem(FIELDS["mem"][i] << 20, 143771 << 20)


def nvmlDeviceGetTemperature(handle, sensor):
    return FIELDS["temp"][_now_row(_check(handle, "temperature"))[0]]


def nvmlDeviceGetEnforcedPowerLimit(handle):
    _check(handle, "power_limit")
    return 700_000
