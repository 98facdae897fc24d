"""The serving-efficiency section as a reader sees it in Chromium: the frontier chart and the
cap trade-off chart drawn, the cap tables visible, no console error, nothing fetched."""

import pytest

from reports.daily import build_report
from tests.browser.test_report_page import open_offline
from tests.test_report_serving import DATE, serving_day


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("report-serving")
    return build_report(serving_day(root / "data"), DATE, root / "out", png=False)


def test_serving_section_renders_the_frontier_and_the_cap_table(page, report, artifacts):
    errors, blocked = open_offline(page, report.html_path)
    section = page.locator("section#serving")
    assert section.is_visible()
    for name in ("serving_frontier", "power_cap_tradeoff"):
        chart = section.locator(f"div.chart[data-chart='{name}']")
        assert chart.get_attribute("data-rendered") == "1", name
        box = chart.locator("svg.marks").first.bounding_box()
        assert box and box["width"] > 300 and box["height"] > 150, (name, box)
        assert chart.locator("svg.marks path").count() > 10, name  # points, lines and axes drawn
    frontier = section.locator("div.chart[data-chart='serving_frontier']")
    assert frontier.get_by_text("time per output token, p50 (ms)").count() >= 1
    assert frontier.get_by_text("time to first token, p50 (ms)").count() >= 1
    assert section.locator("th", has_text="α source").first.is_visible()
    assert section.locator("th", has_text="extra hosts at cap").first.is_visible()
    assert section.locator("td", has_text="uncalibrated").count() >= 1
    assert errors == [] and blocked == []
    section.screenshot(path=str(artifacts / "report-serving.png"))
