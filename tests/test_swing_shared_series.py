"""swing_stats' host-and-above series swung once per distinct series (pipeline/assets/swing_stats.py
SharedSeries): a one-host cluster, its role and its host sum the same GPUs into the same values,
and their rows are the rows each would get alone (grid.grid_stats), counts over 10 % / 25 % of
each entity's own provisioned power included."""

import numpy as np
import pytest

from pipeline import grid
from pipeline.assets import swing_stats

STEP = 1000  # ms: a day of 86,400 bins keeps the test fast


def _series(seed: int, carried: bool):
    rng = np.random.default_rng(seed)
    bins = np.arange(20_000)
    value = 1000 + 400 * np.sign(np.sin(bins / 7.0)) + rng.normal(0, 30, len(bins))
    ok = rng.random(len(bins)) > 0.01
    behind = (rng.random(len(bins)) < 0.05).astype(np.int64) if carried else None
    return bins, value, ok, behind


@pytest.fixture
def calls(monkeypatch) -> list[int]:
    seen: list[int] = []
    real = swing_stats.grid_windows

    def counted(*args, **kwargs):
        seen.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(swing_stats, "grid_windows", counted)
    return seen


def _alone(provisioned_w, bins, value, ok, behind):
    values, complete = np.zeros(86_400), np.zeros(86_400, bool)
    values[bins], complete[bins] = np.where(ok, value, 0.0), ok
    carried = None
    if behind is not None:
        carried = np.zeros(86_400, np.int64)
        carried[bins] = behind
    return grid.grid_stats(values, complete, STEP, swing_stats.WINDOWS_S, provisioned_w, carried=carried)


@pytest.mark.parametrize("carried", [False, True])
def test_one_series_for_levels_of_the_same_gpus(calls, carried):
    shared = swing_stats.SharedSeries()
    bins, value, ok, behind = _series(1, carried)
    prov = {"cluster": 20_000.0, "host": 1_500.0, "role": 4_000.0}
    rows = {level: swing_stats._entity_rows(shared, level, f"{level}-0", p, "instant", bins, value, ok, STEP, behind)
            for level, p in prov.items()}
    assert len(calls) == 1  # the cluster's series, looked up by the host and the role
    for level, p in prov.items():
        expected = [{"level": level, "entity": f"{level}-0", "series": "instant", **r, "grid_step_ms": STEP}
                    for r in _alone(p, bins, value, ok, behind)]
        assert rows[level] == expected
    assert rows["host"][-1]["windows_over_10pct"] > rows["cluster"][-1]["windows_over_10pct"] == 0  # 60 s windows


def test_other_values_are_swung_again_and_hosts_are_not_kept(calls):
    shared = swing_stats.SharedSeries()
    bins, value, ok, behind = _series(2, True)
    swing_stats._entity_rows(shared, "host", "h0", 1500.0, "instant", bins, value, ok, STEP, behind)
    swing_stats._entity_rows(shared, "host", "h1", 1500.0, "instant", bins, value, ok, STEP, behind)
    assert len(calls) == 2  # hosts are looked up, never kept
    swing_stats._entity_rows(shared, "cluster", "c0", 3000.0, "instant", bins, value, ok, STEP, behind)
    nudged = value.copy()
    nudged[5] = np.nextafter(nudged[5], np.inf)  # one value one ulp apart: another series
    swing_stats._entity_rows(shared, "role", "r0", 3000.0, "instant", bins, nudged, ok, STEP, behind)
    other = behind.copy()
    other[7] += 1  # the same values carried from further back: another series
    swing_stats._entity_rows(shared, "role", "r1", 3000.0, "instant", bins, value, ok, STEP, other)
    assert len(calls) == 5
    swing_stats._entity_rows(shared, "fleet", "f", 3000.0, "instant", bins, value, ok, STEP, behind)
    assert len(calls) == 5
