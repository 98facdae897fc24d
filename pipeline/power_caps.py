"""Power caps: the α model's settings (candidate caps, α per GPU model) and fitting α from a fleet
whose GPUs of one model run under two or more enforced limits.

The model (docs/serving.md): a GPU-second whose 1 s mean P̄ is above a cap c runs at c and lasts
(P̄/c)^α s. Across limits, the same work done at power P therefore takes time ∝ P^(−α): α is the
negative slope of log(seconds per unit of work) against log(mean power while working).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import duckdb

from collectors.settings import CAP_ALPHA_ENV, CAP_FACTORS_ENV

DEFAULT_CAP_FACTORS = (1.0, 0.9, 0.8, 0.7, 0.6)


def parse_cap_factors(text: str) -> str:
    """``"1.0,0.9,0.8"`` checked (each in (0, 1]) and normalized for the SQL; ValueError says why."""
    values = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        try:
            value = float(item)
        except ValueError:
            raise ValueError(f"cap_factors: {item!r} is not a number (give e.g. 1.0,0.9,0.8)") from None
        if not (0 < value <= 1) or not math.isfinite(value):
            raise ValueError(f"cap_factors: {item} is outside (0, 1] (a cap is a fraction of the enforced limit)")
        values.append(value)
    if not values:
        raise ValueError("cap_factors: no factor given (give e.g. 1.0,0.9,0.8)")
    return ",".join(repr(v) for v in values)


def cap_variables(cap_factors: str | None = None, alpha: str | None = None) -> dict[str, str]:
    """The SQL variables of ``power_cap_whatif`` from the values the caller resolved (the run's
    Dagster config where it gives one, else the resource's fields: WATTLINE_CAP_FACTORS /
    WATTLINE_CAP_ALPHA or ``wattline run --cap-factors / --cap-alpha``); empty: the defaults. Each
    checked (ValueError naming the setting)."""
    factors = cap_factors or ",".join(str(f) for f in DEFAULT_CAP_FACTORS)
    try:
        factors = parse_cap_factors(factors)
        alpha = parse_alpha(alpha or "")
    except ValueError as exc:
        raise ValueError(f"{exc} ({CAP_FACTORS_ENV} / {CAP_ALPHA_ENV} or the run config)") from None
    return {"cap_factors": factors, "cap_alpha": alpha}


def parse_alpha(text: str) -> str:
    """``"H100=0.3:0.2:0.45, A100=0.2"`` (α, optional low and high; a key is matched, ignoring case,
    inside the GPU model's name) checked and normalized to the SQL's ``KEY=a:lo:hi;…``."""
    out = []
    for item in (x.strip() for x in text.replace(";", ",").split(",")):
        if not item:
            continue
        key, eq, values = item.partition("=")
        key = key.strip()
        if not eq or not key or any(c in key for c in ":;="):
            raise ValueError(f"alpha: {item!r} is not MODEL=alpha[:low:high] (e.g. H100=0.3:0.2:0.45)")
        try:
            numbers = [float(v) for v in values.split(":")]
        except ValueError:
            raise ValueError(f"alpha: {item!r}: alpha, low and high must be numbers") from None
        if len(numbers) == 1:
            numbers *= 3
        if len(numbers) != 3 or not all(math.isfinite(v) and 0 <= v <= 3 for v in numbers):
            raise ValueError(f"alpha: {item!r}: give alpha or alpha:low:high, each between 0 and 3")
        alpha, low, high = numbers
        if not low <= alpha <= high:
            raise ValueError(f"alpha: {item!r}: low ≤ alpha ≤ high must hold")
        out.append(f"{key}={alpha!r}:{low!r}:{high!r}")
    return ";".join(out)


@dataclass(frozen=True)
class LimitObservation:
    """The same kind of work on one GPU model under one enforced limit."""

    limit_w: float
    mean_w: float
    """Mean power per GPU while working (W)."""
    seconds_per_unit: float
    """Time per unit of work: s per step-token, per output token (TPOT), …"""
    weight: float = 1.0


def fit_alpha(observations: Iterable[LimitObservation]) -> float | None:
    """α from work done under two or more limits: the weighted least-squares slope of
    log(seconds per unit) on log(mean power), negated. None when fewer than two distinct limits."""
    obs = [o for o in observations if o.mean_w > 0 and o.seconds_per_unit > 0 and o.weight > 0]
    if len({o.limit_w for o in obs}) < 2:
        return None
    w = [o.weight for o in obs]
    x = [math.log(o.mean_w) for o in obs]
    y = [math.log(o.seconds_per_unit) for o in obs]
    sw = sum(w)
    mx = sum(wi * xi for wi, xi in zip(w, x, strict=True)) / sw
    my = sum(wi * yi for wi, yi in zip(w, y, strict=True)) / sw
    sxx = sum(wi * (xi - mx) ** 2 for wi, xi in zip(w, x, strict=True))
    if sxx <= 0:
        return None
    sxy = sum(wi * (xi - mx) * (yi - my) for wi, xi, yi in zip(w, x, y, strict=True))
    return -sxy / sxx


JOB_OBSERVATIONS_SQL = """
WITH reported AS (  -- the limit each job GPU's samples report that day (NVML collector, nvidia-smi, DCGM)
    SELECT p.host, p.gpu, median(p.power_limit_w) AS limit_w
    FROM power AS p SEMI JOIN inventory_gpus AS g ON g.host = p.host AND g.gpu = p.gpu AND g.job IS NOT NULL
    WHERE p.date = $date AND p.power_limit_w IS NOT NULL GROUP BY ALL
),
limits AS (  -- as power_cap_whatif resolves it: the reported limit, else the inventory's, else TDP
    SELECT g.job, coalesce(g.gpu_model, 'unknown') AS gpu_model, median(coalesce(r.limit_w, g.power_limit_w, g.tdp_w)) AS limit_w
    FROM inventory_gpus AS g LEFT JOIN reported AS r USING (host, gpu) WHERE g.job IS NOT NULL GROUP BY ALL
),
step_power AS (
    SELECT DISTINCT job, step_mean_w FROM training_energy WHERE date = $date AND source = 'job_events'
),
work AS (  -- step time per unit of work: per token where the steps log tokens, else per step
    SELECT job, sum(epoch(end_ts) - epoch(start_ts)) AS step_s, count(*) AS steps,
           CASE WHEN count(tokens) = count(*) THEN sum(tokens) END AS tokens
    FROM job_events WHERE date = $date AND kind = 'step' AND end_ts > start_ts GROUP BY ALL
)
SELECT l.gpu_model, l.limit_w, p.step_mean_w, w.step_s / coalesce(w.tokens, w.steps) AS seconds_per_unit, w.steps
FROM step_power AS p JOIN work AS w USING (job) JOIN limits AS l USING (job)
WHERE p.step_mean_w > 0 AND w.step_s > 0
"""


def fleet_alpha(con: duckdb.DuckDBPyConnection, dates: Sequence[str], workload: str | None = None) -> dict[str, float]:
    """α per GPU model fitted from the training jobs of ``dates`` in a warehouse connection
    (``wattline sql``'s, or the catalog opened read-only): each job's mean power per GPU during
    steps (training_energy) against its step time per token (job_events; per step where the steps
    log no tokens), for models whose jobs ran under two or more limits (each GPU's limit: the one its
    samples report, else the inventory's, else TDP).
    The jobs must do the same work per step (one model and batch: pass ``workload`` to keep only
    the jobs whose inventory ``model`` is it). Models with a single limit are left out."""
    sql = JOB_OBSERVATIONS_SQL
    by_model: dict[str, list[LimitObservation]] = {}
    for date in dates:
        query = sql
        params: dict = {"date": date}
        if workload is not None:
            query = sql.replace("FROM step_power AS p",
                                "FROM step_power AS p SEMI JOIN inventory_jobs AS ij ON ij.job = p.job AND ij.model = $workload")
            params["workload"] = workload
        for model, limit_w, mean_w, step_s, steps in con.execute(query, params).fetchall():
            by_model.setdefault(model, []).append(LimitObservation(float(limit_w), float(mean_w), float(step_s), float(steps or 1)))
    out = {}
    for model, obs in by_model.items():
        alpha = fit_alpha(obs)
        if alpha is not None:
            out[model] = alpha
    return out
