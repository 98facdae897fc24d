"""The report at a laptop's 1,280 × 800: no horizontal scroll of the page and no table wider than
the section that holds it (long names and many columns wrap inside their cells), no chart past
its section's edge."""

import pytest

from reports.daily import build_report
from tests.browser.test_report_page import open_offline
from tests.report_fixtures import DATE, with_all_tables

WIDTH, HEIGHT = 1280, 800

MEASURE = """() => {
  const doc = document.documentElement;
  const wide = [];
  for (const table of document.querySelectorAll("section table")) {
    const section = table.closest("section");
    const style = getComputedStyle(section);
    const box = section.getBoundingClientRect();
    const inner = {left: box.left + parseFloat(style.borderLeftWidth) + parseFloat(style.paddingLeft),
                   right: box.right - parseFloat(style.borderRightWidth) - parseFloat(style.paddingRight)};
    const t = table.getBoundingClientRect();
    const wrap = table.parentElement;
    if (t.left < inner.left - 1 || t.right > inner.right + 1 || table.scrollWidth > wrap.clientWidth + 1 || wrap.scrollWidth > wrap.clientWidth + 1) {
      wide.push({section: section.id, columns: table.querySelectorAll("thead th").length,
                 table_px: Math.round(t.width), box_px: Math.round(inner.right - inner.left)});
    }
  }
  const charts = [];
  for (const chart of document.querySelectorAll("section div.chart")) {
    const section = chart.closest("section");
    const right = section.getBoundingClientRect().right - parseFloat(getComputedStyle(section).paddingRight);
    const svg = chart.querySelector("svg.marks");
    const over = svg ? svg.getBoundingClientRect().right - right : 0;
    if (over > 1) charts.push({chart: chart.dataset.chart, over_px: Math.round(over)});
  }
  return {main_px: document.querySelector("main").getBoundingClientRect().width, charts: charts,
          scroll_px: doc.scrollWidth, client_px: doc.clientWidth, body_px: document.body.scrollWidth, wide: wide,
          tables: document.querySelectorAll("section table").length};
}"""


@pytest.fixture(scope="module")
def report(tmp_path_factory, report_day):
    root = tmp_path_factory.mktemp("report-layout")
    return build_report(with_all_tables(report_day.data_dir, root / "data-full"), DATE, root / "out", png=False)


@pytest.mark.parametrize("width", [WIDTH, 1920])
def test_report_fits_the_window_without_horizontal_scroll(browser, report, artifacts, width):
    context = browser.new_context(viewport={"width": width, "height": HEIGHT})
    page = context.new_page()
    try:
        errors, blocked = open_offline(page, report.html_path)
        m = page.evaluate(MEASURE)
        page.screenshot(path=str(artifacts / f"report-{width}.png"), full_page=True)
    finally:
        context.close()
    assert errors == [] and blocked == []
    assert m["tables"] >= 10
    assert m["client_px"] <= width
    assert m["main_px"] >= min(width, 1916) - 20, m  # the page uses the window's width (up to 1,860 px of content)
    assert m["scroll_px"] <= m["client_px"], m  # no horizontal scroll
    assert m["wide"] == [], m  # every table inside its section's content box
    assert m["charts"] == [], m  # and every chart
