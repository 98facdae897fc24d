"""One module per report section; each has ``build(ctx) -> Section`` and never raises for a
missing table (the section says what is not available yet instead)."""

from reports.sections import correlation, diurnal, fleet_power, headline, inference, quality, swings

SECTIONS = (headline, fleet_power, swings, inference, correlation, diurnal, quality)
