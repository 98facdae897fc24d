"""The only module that talks to NVML: a thin reader per GPU that returns plain numbers in SI-ish units.

Everything above it (sampling loop, faults, rows) sees floats and ints, never ctypes structs,
so the fake NVML in the tests only has to mimic the pynvml module, not the collector.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import time

NVML_MODULE_ENV = "WATTLINE_NVML_MODULE"
DEFAULT_NVML_MODULE = "pynvml"

FI_POWER_AVERAGE = 185  # NVML_FI_DEV_POWER_AVERAGE: the driver's 1 s average (mW)
FI_POWER_INSTANT = 186  # NVML_FI_DEV_POWER_INSTANT: instantaneous board power (mW), ~100 ms updates
FAST_FIELDS = (FI_POWER_INSTANT, FI_POWER_AVERAGE)

TOTAL_POWER_SAMPLES = 0  # NVML_TOTAL_POWER_SAMPLES
CLOCK_SM = 1  # NVML_CLOCK_SM
TEMPERATURE_GPU = 0  # NVML_TEMPERATURE_GPU


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this machine (no library, no driver, no GPU): one line for the user."""


def load_nvml(module_name: str | None = None):
    """Import the NVML binding (``pynvml`` unless overridden, e.g. by a fake in tests) and init it."""
    name = module_name or os.environ.get(NVML_MODULE_ENV) or DEFAULT_NVML_MODULE
    try:
        nvml = importlib.import_module(name)
    except ImportError as exc:
        hint = "; install nvidia-ml-py" if name == DEFAULT_NVML_MODULE else ""
        raise NvmlUnavailable(f"cannot import the NVML binding {name!r} ({exc}){hint}") from None
    try:
        nvml.nvmlInit()
    except Exception as exc:  # pynvml raises NVMLError subclasses: library not found, driver not loaded...
        raise NvmlUnavailable(f"NVML is not available on this machine: {describe_error(exc)}") from None
    return nvml


def describe_error(exc: BaseException) -> str:
    """`NVMLError_GpuIsLost (GPU is lost)`-style text; the class name is what the counters use."""
    return f"{type(exc).__name__} ({exc})"


def error_name(exc: BaseException) -> str:
    name = type(exc).__name__
    return name.removeprefix("NVMLError_") or name


_UNION_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def _union(u, value_type: int):
    """Decode an ``nvmlValue_t`` union by the type the driver declared (unsigned int for power)."""
    return getattr(u, _UNION_MEMBERS[value_type] if 0 <= value_type < len(_UNION_MEMBERS) else "uiVal")


def _value(v) -> float | int:
    return _union(v.value, v.valueType)


class GpuReader:
    """One GPU's NVML handle and the five reads the collector makes, converted to W, J, MHz, %, MiB, °C."""

    def __init__(self, nvml, index: int):
        self.nvml = nvml
        self.index = index
        self.handle = None
        self.uuid: str | None = None
        self._success = getattr(nvml, "NVML_SUCCESS", 0)
        self._direct = _direct_get_samples(nvml)
        self._samples = None

    @property
    def direct_buffer(self) -> bool:
        return self._direct is not None

    @direct_buffer.setter
    def direct_buffer(self, on: bool) -> None:
        self._direct = _direct_get_samples(self.nvml) if on else None

    def reopen(self) -> None:
        """(Re-)acquire the handle, e.g. after a lost GPU; refuse a different board at the same index."""
        handle = self.nvml.nvmlDeviceGetHandleByIndex(self.index)
        uuid = self.nvml.nvmlDeviceGetUUID(handle)
        uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
        if self.uuid is not None and uuid != self.uuid:
            raise RuntimeError(f"GPU {self.index} is now {uuid}, was {self.uuid}")
        self.handle, self.uuid = handle, uuid

    def read_fast(self) -> tuple[int, float | None, float | None]:
        """(ts_ns, instant W, 1 s average W) from ONE field-values call, timed by the driver's field timestamp."""
        vals = self.nvml.nvmlDeviceGetFieldValues(self.handle, FAST_FIELDS)
        inst, avg = vals[0], vals[1]
        ok = self._success
        inst_w = _value(inst) / 1000.0 if inst.nvmlReturn == ok else None
        avg_w = _value(avg) / 1000.0 if avg.nvmlReturn == ok else None
        ts_us = inst.timestamp if inst.nvmlReturn == ok and inst.timestamp > 0 else 0
        ts_ns = ts_us * 1000 if ts_us else time.time_ns() // 1000 * 1000
        return ts_ns, inst_w, avg_w

    def read_sm_clock_mhz(self) -> int:
        return self.nvml.nvmlDeviceGetClockInfo(self.handle, CLOCK_SM)

    def read_util_pct(self) -> int:
        return self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu

    def read_mem_used_mib(self) -> int:
        return self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used >> 20

    def read_temp_c(self) -> int:
        return self.nvml.nvmlDeviceGetTemperature(self.handle, TEMPERATURE_GPU)

    def read_power_limit_w(self) -> float:
        return self.nvml.nvmlDeviceGetEnforcedPowerLimit(self.handle) / 1000.0

    def read_energy_j(self) -> float:
        """Cumulative energy since driver load; ~4 ms of CPU per call on an H200, so read it rarely."""
        return self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) / 1000.0

    def read_buffer(self, since_us: int) -> list[tuple[int, float]]:
        """Driver power samples newer than ``since_us``: [(driver ts µs, W)], oldest first; [] when none."""
        if self._direct is not None:
            out = self._read_buffer_direct(since_us)
            if out is not None:
                return out
        try:
            vtype, samples = self.nvml.nvmlDeviceGetSamples(self.handle, TOTAL_POWER_SAMPLES, since_us)
        except self.nvml.NVMLError as exc:
            if exc.value == getattr(self.nvml, "NVML_ERROR_NOT_FOUND", 6):  # no sample newer than since_us
                return []
            raise
        out = [(s.timeStamp, _union(s.sampleValue, vtype) / 1000.0) for s in samples if s.timeStamp > since_us]
        out.sort()
        return out


    def _read_buffer_direct(self, since_us: int) -> list[tuple[int, float]] | None:
        """One C call into a reused array (pynvml's wrapper makes two: size, then data).
        None → use the wrapper (unexpected status; then this path is switched off)."""
        nvml = self.nvml
        if self._samples is None:
            self._samples = (nvml.c_nvmlSample_t * BUFFER_CAPACITY)()
        count = ctypes.c_uint(BUFFER_CAPACITY)
        vtype = ctypes.c_int(0)
        ret = self._direct(self.handle, ctypes.c_int(TOTAL_POWER_SAMPLES), ctypes.c_ulonglong(since_us),
                           ctypes.byref(vtype), ctypes.byref(count), self._samples)
        if ret == getattr(nvml, "NVML_ERROR_NOT_FOUND", 6):
            return []
        if ret != self._success:
            if ret in (getattr(nvml, "NVML_ERROR_GPU_IS_LOST", 15), getattr(nvml, "NVML_ERROR_TIMEOUT", 10)):
                raise nvml.NVMLError(ret)
            self._direct = None
            return None
        t = vtype.value
        n = min(count.value, BUFFER_CAPACITY)
        arr = self._samples
        out = [(arr[k].timeStamp, _union(arr[k].sampleValue, t) / 1000.0) for k in range(n)]
        out = [s for s in out if s[0] > since_us]
        out.sort()
        return out


BUFFER_CAPACITY = 256
"""More than the driver keeps (~119 power samples), so one call always suffices."""


def _direct_get_samples(nvml):
    """The raw ``nvmlDeviceGetSamples`` C function, when the binding exposes it (real pynvml does)."""
    getter = getattr(nvml, "_nvmlGetFunctionPointer", None)
    if getter is None or not hasattr(nvml, "c_nvmlSample_t"):
        return None
    try:
        return getter("nvmlDeviceGetSamples")
    except Exception:
        return None


SLOW_READS = (
    ("sm_clock_mhz", "read_sm_clock_mhz"),
    ("gpu_util_pct", "read_util_pct"),
    ("mem_used_mib", "read_mem_used_mib"),
    ("temp_c", "read_temp_c"),
    ("power_limit_w", "read_power_limit_w"),
)
"""Slow fields in row order: (contract column, GpuReader method)."""
