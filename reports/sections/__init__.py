"""One module per report section; each has ``build(ctx) -> Section`` and never raises for a
missing table (the section says what is not available yet instead)."""

from reports.sections import correlation, diurnal, fleet_power, headline, inference, quality, serving, swings

SECTIONS = (headline, fleet_power, swings, inference, serving, correlation, diurnal, quality)
