"""The report HTML as a reader sees it: opened from disk with the network blocked, every chart
rendered, no console error."""

import json

import pytest

from reports.daily import build_report
from tests.report_fixtures import DATE, foundation_only, with_all_tables


@pytest.fixture(scope="module")
def reports(tmp_path_factory, report_day):
    """Two reports of the session's square-wave day with requests: before the analytics tables
    exist, and with all of them (each on its own copy)."""
    root = tmp_path_factory.mktemp("report-page")
    partial = build_report(foundation_only(report_day.data_dir, root / "data-partial"), DATE, root / "out-partial", png=False)
    full = build_report(with_all_tables(report_day.data_dir, root / "data-full"), DATE, root / "out-full", png=False)
    # 1,024 GPUs: a whole day of role/cluster power, every analytics table at that size.
    from tests.report_tables import write_analytics_tables
    from tests.scale_fleet import write_scale_fleet

    hosts, clusters, endpoints, gpus = write_scale_fleet(root / "data-scale", DATE)
    write_analytics_tables(root / "data-scale", DATE, hosts=hosts, clusters=clusters, endpoints=endpoints, gpus=gpus, seconds=3600)
    scale = build_report(root / "data-scale", DATE, root / "out-scale", png=False)
    return {"partial": partial, "full": full, "scale": scale}


def open_offline(page, path):
    """Open ``path`` with every non-file request aborted; returns (console errors, blocked URLs)."""
    errors, blocked = [], []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))

    def route(r):
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-charts-rendered]", timeout=60_000)
    return errors, blocked


@pytest.mark.parametrize("which", ["full", "partial", "scale"])
def test_report_renders_offline_without_errors(page, reports, artifacts, which):
    report = reports[which]
    errors, blocked = open_offline(page, report.html_path)
    summary = json.loads(report.json_path.read_text())
    charts = page.locator("div.chart")
    assert charts.count() == len(summary["charts"]) > 0
    for i in range(charts.count()):
        chart = charts.nth(i)
        name = chart.get_attribute("data-chart")
        assert chart.get_attribute("data-rendered") == "1", name
        marks = chart.locator("svg.marks, canvas.marks")
        assert marks.count() >= 1, name
        box = marks.first.bounding_box()
        assert box and box["width"] > 100 and box["height"] > 50, (name, box)
        # Something was drawn: paths, rects or symbols inside the chart's SVG.
        assert chart.locator("svg.marks path, svg.marks rect").count() > 3, name
    assert errors == []
    assert blocked == []  # self-contained: nothing was even requested from the network
    page.screenshot(path=str(artifacts / f"report-{which}.png"), full_page=True)
    page.locator("section#fleet_power").screenshot(path=str(artifacts / f"report-{which}-fleet-power.png"))
    if which == "scale":
        assert report.html_path.stat().st_size < 5 * 1024 * 1024
    elif which == "partial":
        assert page.get_by_text("Not available yet: swing_stats not available yet").first.is_visible()
    else:
        assert page.locator(".note.missing").count() == 0
        assert page.locator("section#headline table").first.is_visible()
