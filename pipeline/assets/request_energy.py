"""Energy per request (`request_energy`) and per token along the serving axes (`energy_per_token`)."""

from pipeline.phases import coverage
from pipeline.tables import PythonCheck, Table, table_assets

REQUEST_ENERGY = Table(
    "request_energy",
    "Per request: prefill J, decode J, total J, J per prompt and per output token (attribution "
    "rule in docs/phases.md), and the share of its GPU-time that had power samples (power_coverage; "
    "energies NULL where none did); idle energy stays with the endpoint (energy_per_token.idle_j).",
    "cluster-day",
    deps=["phase_intervals", "energy_curve"],
    group="phases",
    inputs=coverage.adjacent_power_files,
    python_checks=(
        PythonCheck(
            "requests_meet_power",
            "Each endpoint's requests overlap its GPUs' power; where none do while its GPUs have power within ±14 h, "
            "the clock offset between them is estimated (a log read in the wrong time zone).",
            coverage.requests_meet_power,
        ),
    ),
)
(request_energy,) = table_assets(REQUEST_ENERGY)

ENERGY_PER_TOKEN = Table(
    "energy_per_token",
    "J per prompt/output token and per request, mean power and shares per phase, TDP peaks per "
    "hour: per endpoint, overall and by batch size, prompt/output length, hour, GPU model and power limit.",
    "cluster-day",
    deps=["request_energy", "phase_segments", "phase_intervals", "phase_timeline"],
    group="phases",
)
(energy_per_token,) = table_assets(ENERGY_PER_TOKEN)
