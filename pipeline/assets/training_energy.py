"""`training_energy`: what a training job's steps cost and how hard its gaps (collectives,
checkpoints, evals) swing the feed — from job_events, or from the power alone when a job logs none."""

from pipeline.tables import Table, table_assets

TRAINING_ENERGY = Table(
    "training_energy",
    "Per training job and day, one row per gap kind: steps, median iteration time, J per step and "
    "per token, mean power per GPU in steps vs gaps, gap energy/time shares, and the power drop each "
    "kind of boundary causes (median, max W over the job's GPUs). Event energies are E(end) − E(start) "
    "on energy_curve, exact at the events' own timestamps and clipped to the day (earlier days' events still running count "
    "their part inside it; a step counts on the day it ends); the boundary drops and the power-only "
    "labelling use the 100 ms grid. power_coverage: the share of the events' GPU-time with power samples "
    "(energies NULL where none).",
    "cluster-day",
    deps=["power_100ms", "energy_curve", "job_events"],
)
(training_energy,) = table_assets(TRAINING_ENERGY)
