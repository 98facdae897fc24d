"""One GPU's raw power samples of one host-day, as the series engine hands them to a table."""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass

import numpy as np

from pipeline.kernels import BestRows, best_rows_of, energy_curve


class SampleSource(enum.Enum):
    """Where a sample comes from, with its rank (lower wins): in each minute a GPU's trace uses
    only its best-ranked source. The driver's 1 s average (a row with only ``power_avg_w``) ranks
    last whatever its source. The same ranking as the SQL macro ``source_rank`` that the views of
    sql/views/power_day.sql use (a test holds the two equal)."""

    NVML_BUFFER = ("nvml-buffer", 1)
    NVML_FIELD = ("nvml-field", 2)
    SIMULATED = ("simulated", 2)
    NVIDIA_SMI = ("nvidia-smi", 3)
    OTHER = ("", 5)
    """Any other source (DCGM, an exporter): instantaneous, below the driver's own."""
    AVERAGE_1S = ("", 9)
    """A 1 s average (the row has no instantaneous power), from any source."""

    def __init__(self, source: str, rank: int) -> None:
        self.source = source
        self.rank = rank

    @classmethod
    def of(cls, source: str, is_average: bool) -> SampleSource:
        """The member a row of ``source`` (its ``is_average``: no instantaneous power) belongs to."""
        if is_average:
            return cls.AVERAGE_1S
        return next((m for m in cls if m.source == source and m.source), cls.OTHER)


AVERAGE_RANK = SampleSource.AVERAGE_1S.rank


@dataclass(frozen=True, eq=False)
class GpuSamples:
    """One GPU's samples of the day (inside the day, with a power value), in file order (not
    necessarily time order). Arrays of equal length, one entry per raw row:

    - ``t_ns``: the sample's time (ns since the epoch);
    - ``power_w``: instantaneous power, else the 1 s average (W);
    - ``power_avg_w`` / ``has_avg``: the driver's 1 s average and whether the row has one;
    - ``is_average``: the row has only the 1 s average;
    - ``source_id``: index into ``sources`` (the host's source names);
    - ``source_rank``: :class:`SampleSource` rank of the row (``is_average`` included).
    """

    host: str
    gpu: int
    sources: tuple[str, ...]
    t_ns: np.ndarray
    power_w: np.ndarray
    power_avg_w: np.ndarray
    has_avg: np.ndarray
    is_average: np.ndarray
    source_id: np.ndarray
    source_rank: np.ndarray

    def __len__(self) -> int:
        return len(self.t_ns)

    @functools.cached_property
    def best(self) -> BestRows:
        """The GPU's best-source rows in time order, with the 1 s-average fallback rows
        (kernels.best_rows_of), found once for every table and reader of these samples."""
        return best_rows_of(self.t_ns.astype(np.int64, copy=False), self.source_rank, self.has_avg)

    @functools.cached_property
    def curve(self) -> dict[str, np.ndarray]:
        """The GPU's energy curve at every best-source sample (kernels.energy_curve), built once for
        every table and reader of these samples."""
        return energy_curve(self.t_ns, self.power_w, self.source_rank, self.best)
