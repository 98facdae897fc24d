"""`wattline collect`: the NVML power collector daemon (defined in collectors.nvml.cli so it runs standalone)."""

from collectors.nvml.cli import command

__all__ = ["command"]
