"""What a GPU model can do and draw: peak dense FLOP/s, memory bandwidth, TDP, idle power and the
instantaneous ceiling it shows above its power limit.

One table for the simulator (step times and power per phase), the Prometheus stub inventory
(``KNOWN_TDP_W``) and serving-energy estimates. Names are matched as NVML and dcgm-exporter report
them (``NVIDIA H100 80GB HBM3``, ``NVIDIA A100-SXM4-80GB``): the first key found in the upper-cased name.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuSpec:
    key: str
    """The substring that identifies the model in NVML's name (``H100`` in ``NVIDIA H100 80GB HBM3``)."""
    nvml_name: str
    """How NVML and dcgm-exporter name the SXM part."""
    tdp_w: float
    """Board power limit by default (the datasheet's max TDP)."""
    idle_w: float
    """Nothing loaded, clocks down."""
    bf16_flops: float | None
    """Peak dense bf16/fp16 tensor FLOP/s (no sparsity)."""
    fp8_flops: float | None
    """Peak dense fp8 tensor FLOP/s (None: no fp8 tensor cores)."""
    mem_bytes_s: float | None
    """Memory bandwidth, bytes/s."""
    ceiling_ratio: float
    """Highest instantaneous reading / enforced limit: compute-bound phases overshoot the limit for
    tens of ms before the power controller pulls the clocks down."""
    source: str

    def ceiling_w(self, limit_w: float | None = None) -> float:
        """The highest instantaneous reading under ``limit_w`` (default: the TDP)."""
        return self.ceiling_ratio * (limit_w or self.tdp_w)

    def peak_flops(self, precision: str | None) -> float | None:
        """Dense tensor FLOP/s for ``precision`` (fp8 and narrower use fp8 where the GPU has it)."""
        if precision in ("fp8", "mxfp8", "fp6", "mxfp6", "fp4", "mxfp4", "nvfp4", "int8", "int4") and self.fp8_flops:
            return self.fp8_flops
        return self.bf16_flops


_DATASHEET = "NVIDIA datasheet (SXM, dense, no sparsity)"
SPECS: tuple[GpuSpec, ...] = (
    GpuSpec("H200", "NVIDIA H200", 700.0, 81.6, 989e12, 1979e12, 4.8e12, 1.40,
            f"{_DATASHEET}; idle: h200-capture-4 (81.6 W); ceiling: capture 4's instantaneous maximum ≈ 980 W at 700 W"),
    GpuSpec("H100", "NVIDIA H100 80GB HBM3", 700.0, 75.0, 989e12, 1979e12, 3.35e12, 1.40,
            f"{_DATASHEET}; idle and ceiling assumed as the H200's (same GH100 die and board power)"),
    GpuSpec("B200", "NVIDIA B200", 1000.0, 140.0, 2.25e15, 4.5e15, 8.0e12, 1.40,
            f"{_DATASHEET} (HGX B200: 2.25 PFLOP/s bf16, 8 TB/s); idle and ceiling ratio assumed, not measured here"),
    GpuSpec("A100", "NVIDIA A100-SXM4-80GB", 400.0, 60.0, 312e12, None, 2.039e12, 1.25,
            f"{_DATASHEET} (80 GB: 2.039 TB/s); ceiling: the vllm-a100 smoke runs' prefill spikes ≈ 500 W at 400 W"),
    GpuSpec("L40S", "NVIDIA L40S", 350.0, 35.0, 362e12, 733e12, 0.864e12, 1.20,
            f"{_DATASHEET} (PCIe card); idle and ceiling ratio assumed"),
    GpuSpec("L4", "NVIDIA L4", 72.0, 16.0, 121e12, 242e12, 0.3e12, 1.15, f"{_DATASHEET} (PCIe card); idle and ceiling ratio assumed"),
    GpuSpec("A10", "NVIDIA A10", 150.0, 20.0, 125e12, None, 0.6e12, 1.15, f"{_DATASHEET} (PCIe card); idle and ceiling ratio assumed"),
)
"""Ordered so that a longer key is tried before a key it contains (``A100`` before ``A10``, ``L40S`` before ``L4``)."""

KNOWN_TDP_W = {s.key: int(s.tdp_w) for s in SPECS}
"""Board power of common parts, for the stub inventory only (the user checks it)."""

DEFAULT = SPECS[0]
"""The GPU the simulator is calibrated on (h200-capture-4)."""


def spec_for(name: str | None) -> GpuSpec | None:
    """The spec whose key is in ``name`` (case-insensitive), or None for an unknown or missing name."""
    if not name:
        return None
    upper = name.upper()
    return next((s for s in SPECS if s.key in upper), None)
