"""The process's peak resident memory over one step (Linux): which asset sets a run's peak RSS.

The kernel keeps a high-water mark of the process's RSS (VmHWM in /proc/self/status); writing 5
to /proc/self/clear_refs resets it to the current RSS. Elsewhere (or where /proc cannot be
written) the peak is unknown: None."""

from __future__ import annotations

from pathlib import Path

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def reset_peak() -> None:
    """Start a new high-water mark at the current RSS (no-op where unsupported)."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        pass


def peak_mb() -> float | None:
    """The RSS high-water mark since the last reset (MiB), None where unknown."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        return None
    return None
