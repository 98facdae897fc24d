"""The daily report: one self-contained HTML per day, a PNG per chart and the headline numbers as JSON."""
