"""`power_cap_whatif`: what each endpoint, job, host and cluster would have done under lower power
caps, from its GPUs' 1 s means: time and energy above each cap by phase, and the energy and
duration under it by the α model (docs/serving.md)."""

from dagster import Config
from pydantic import field_validator

from pipeline.power_caps import cap_variables, parse_alpha, parse_cap_factors
from pipeline.tables import Table, table_assets


class CapConfig(Config):
    cap_factors: str = ""
    """Candidate caps as fractions of each GPU's enforced limit, comma-separated (1.0 is always added);
    empty: WATTLINE_CAP_FACTORS (``wattline run --cap-factors``), else 1.0,0.9,0.8,0.7,0.6."""
    alpha: str = ""
    """α per GPU model overriding the built-in ones: ``MODEL=alpha[:low:high]``, comma-separated
    (e.g. ``H100=0.3:0.2:0.45``; MODEL is matched, ignoring case, inside the inventory's GPU model);
    empty: WATTLINE_CAP_ALPHA (``wattline run --cap-alpha``), else the built-in ones."""

    @field_validator("cap_factors")
    @classmethod
    def _factors(cls, value: str) -> str:
        return parse_cap_factors(value) if value.strip() else ""

    @field_validator("alpha")
    @classmethod
    def _alpha(cls, value: str) -> str:
        return parse_alpha(value)


POWER_CAP_WHATIF = Table(
    "power_cap_whatif",
    "Per endpoint, training job, host and cluster, day, candidate cap (cap_factors × each GPU's enforced "
    "limit) and phase: from 1 s means (power_1s), the share of time and energy above the cap, the energy "
    "above it (J), and the estimated energy and GPU-time under it by the α model (low/high range, α's "
    "source); hosts and clusters: p99 and max 2 s power under the cap and how many more hosts fit "
    "(docs/serving.md).",
    "cluster-day",
    deps=["power_1s", "phase_intervals", "job_events"],
    group="caps",  # after the phases it reads, so groups depend on each other one way
    config=CapConfig,
    variables=lambda config, warehouse: cap_variables(config.cap_factors or warehouse.cap_factors,
                                                      config.alpha or warehouse.cap_alpha),
)
(power_cap_whatif,) = table_assets(POWER_CAP_WHATIF)
