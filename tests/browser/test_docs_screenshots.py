"""The screenshots in docs/ are what a user sees after `wattline demo`: the report's first screen,
the UI's lineage and an asset page with its columns' units and meanings. Taken here, on the
session's demo day (tests/demo_day.py), into a temp folder: a test run leaves the checkout as it
was. `make screenshots` (WATTLINE_DOCS_SCREENSHOTS=1) writes them to docs/img/ instead."""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path

import pytest

from tests.browser.conftest import PNG
from tests.browser.test_ui import UiServer, settled_text, visit

ROOT = Path(__file__).resolve().parents[2]
UI_PATH = re.compile(r"`(/(?:assets|asset-groups|locations|runs|jobs|automation|overview|deployment)[^`\s]*)`|http://127\.0\.0\.1:3000(/[^\s)`]*)?")
VIEWPORT = {"width": 1440, "height": 900}

pytestmark = pytest.mark.slow


def report_path(output: str) -> Path:
    line = next(line for line in output.splitlines() if line.strip().startswith("1. the report:"))
    return Path(line.split(":", 1)[1].strip())


def documented_ui_paths() -> list[str]:
    """The web UI's pages README.md and docs/*.md send a reader to."""
    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for a, b in UI_PATH.findall(doc.read_text()):
            found.append(a or b or "/")
    return sorted(set(found))


def test_the_reports_first_screen(browser, demo_day, docs_img):
    report = report_path(demo_day.output)
    context = browser.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        page.goto(report.as_uri())
        page.get_by_text(re.compile("energy", re.I)).first.wait_for(timeout=30_000)
        page.wait_for_timeout(1500)  # the charts draw after load
        page.screenshot(path=str(docs_img / "report-first-screen.png"))
        assert (docs_img / "report-first-screen.png").read_bytes().startswith(PNG)
    finally:
        context.close()


def test_the_lineage_and_an_asset_page_with_its_columns(browser, demo_day, tmp_path, docs_img):
    server = UiServer(demo_day.data_dir, tmp_path / "wattline-ui.log")
    context = browser.new_context(viewport=VIEWPORT)
    try:
        server.wait_ready()
        page = context.new_page()
        page.set_default_timeout(60_000)
        visit(page, f"{server.url}/asset-groups")
        for group in ("power", "fleet", "phases", "report"):
            page.get_by_text(group, exact=True).first.wait_for()
        page.screenshot(path=str(docs_img / "ui-lineage.png"))
        assert (docs_img / "ui-lineage.png").read_bytes().startswith(PNG)
        visit(page, f"{server.url}/assets/power_1s")
        page.get_by_text("mean_w", exact=True).first.wait_for()
        # the columns' descriptions come with the asset's definition, after the schema's names
        text = settled_text(page, "mean of the GPU's best-source samples in the second", "warehouse view", "docs/columns.md#power_1s")
        assert "mean of the GPU's best-source samples in the second" in text, text[:3000]
        assert "warehouse view" in text and "docs/columns.md#power_1s" in text, text[:3000]
        page.screenshot(path=str(docs_img / "ui-asset-power_1s.png"), full_page=False)
        assert (docs_img / "ui-asset-power_1s.png").read_bytes().startswith(PNG)
        paths = documented_ui_paths()
        assert "/asset-groups" in paths and "/" in paths, paths
        assert sum("partition=" in p for p in paths) >= 2, paths  # a cluster-day's and a fleet-day's
        # Each documented page exists: the UI stays on it (an unknown route is redirected to the
        # overview: the control) and does not say "not found" (an unknown asset or group).
        for path in ["/no-such-page", *paths]:
            visit(page, server.url + path)
            page.get_by_text("Lineage", exact=True).first.wait_for()
            page.wait_for_timeout(1500)
            landed = urllib.parse.urlparse(page.url).path.rstrip("/")
            stayed = path == "/" or landed == urllib.parse.urlparse(path).path.rstrip("/")
            body = page.locator("body").inner_text()
            exists = stayed and not re.search(r"not found", body, re.I)
            assert exists == (path != "/no-such-page"), (path, page.url, body[:1500])
            if "partition=" in path:  # the partition it names is selected: its latest materialization shows
                page.get_by_text("Latest materialization").first.wait_for()
                body = page.locator("body").inner_text()
                assert "No partition selected" not in body and "2026-11-30" in body, (path, body[:1500])
    finally:
        context.close()
        server.stop()
