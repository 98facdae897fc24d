"""`training_vs_inference`: per role, the fleet's peak, mean and 2 s swings beside the published
reference points."""

from pipeline.tables import Table, table_assets

TRAINING_VS_INFERENCE = Table(
    "training_vs_inference",
    "Per role and day: peak and mean % of provisioned, max 2 s swing % (instant and 1 s "
    "average), the 2 s swing distribution, the worst host, and the published reference points.",
    "fleet-day",
    deps=["power_summary", "swing_stats", ["fleet", "power_summary"], ["fleet", "swing_stats"]],
    group="fleet",  # it reads fleet/ rollups: in their group, so groups depend on each other one way
)
(training_vs_inference,) = table_assets(TRAINING_VS_INFERENCE)
