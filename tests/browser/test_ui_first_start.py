"""`wattline ui` right after `wattline demo`, automation on, as a new user meets it: nothing is
rebuilt, the terminal says what automation does, the partitions are the data's days, and a check
shows its partition's own result."""

import datetime as dt
import re
import time

import pytest

from tests.browser import first_start_ui
from tests.browser.conftest import PNG
from tests.browser.first_start_ui import runs as _runs
from tests.browser.first_start_ui import ticks as _ticks
from tests.browser.test_ui import visit

QUIET_S = 120
"""How long the UI runs with its sensors on, from its start, before the test counts the runs."""


def _demo_day() -> str:
    return (dt.datetime.now(dt.UTC).date() - dt.timedelta(days=1)).isoformat()


@pytest.fixture(scope="module")
def demo_ui(tmp_path_factory):
    """The demo's data dir and the UI on it, started when the session collected this file
    (tests/browser/first_start_ui.py); the demo's runs were listed before the UI started."""
    root, ui = first_start_ui.attach(tmp_path_factory)
    try:
        yield ui, ui.data_dir, ui.built
    finally:
        first_start_ui.stop(root)


def _settled(page, pattern: str, timeout_s: float = 60) -> str:
    """The page's text once it matches ``pattern`` (its counts load after the headings), or as it
    is after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    text = page.locator("body").inner_text()
    while not re.search(pattern, text) and time.monotonic() < deadline:
        page.wait_for_timeout(1000)
        text = page.locator("body").inner_text()
    return text


def test_partitions_page_shows_only_the_datas_days(page, demo_ui, artifacts, docs_img):
    server, _, _ = demo_ui
    day, today = _demo_day(), dt.datetime.now(dt.UTC).date().isoformat()
    visit(page, f"{server.url}/locations/pipeline.definitions/jobs/cluster_day_job/partitions")
    page.get_by_text("Total partitions").wait_for()
    text = _settled(page, r"\b1\s+Total partitions")
    # the demo's day, built (today's, still being collected, is no partition of the UI's): one cluster
    assert re.search(r"\b1\s+Total partitions", text) and re.search(r"\b0\s+Missing partitions", text), text
    assert day in text and today not in text and "2020" not in text
    page.screenshot(path=str(artifacts / "ui-first-start-partitions.png"))
    page.screenshot(path=str(docs_img / "ui-partitions.png"))
    assert (docs_img / "ui-partitions.png").read_bytes().startswith(PNG)


def test_a_check_shows_its_partitions_result_and_a_table_of_examples(page, demo_ui, artifacts, docs_img):
    server, _, _ = demo_ui
    day = _demo_day()
    visit(page, f"{server.url}/assets/power_1s?view=checks&checkDetail=gpu_coverage")
    page.get_by_text("Latest execution").wait_for()
    page.get_by_text(f"c0|{day}").first.wait_for()  # the partition the result belongs to
    page.get_by_text("Show schema").first.wait_for()  # the examples: a table, not a Python repr
    text = page.locator("body").inner_text()
    assert "non-blocking" in text  # a WARN
    assert re.search(r"gpu\s+coverage", text) and "[(" not in text
    page.screenshot(path=str(artifacts / "ui-first-start-check.png"))
    page.screenshot(path=str(docs_img / "ui-check.png"))
    assert (docs_img / "ui-check.png").read_bytes().startswith(PNG)
    page.get_by_text("Partitions", exact=True).last.click()  # the check's own per-partition status
    page.get_by_text(day).first.wait_for()
    page.screenshot(path=str(artifacts / "ui-first-start-check-partitions.png"))
    page.screenshot(path=str(docs_img / "ui-check-partitions.png"))
    assert (docs_img / "ui-check-partitions.png").read_bytes().startswith(PNG)
    visit(page, f"{server.url}/assets/power_1s?view=checks&checkDetail=power_within_bounds")
    page.get_by_text("Latest execution").wait_for()
    assert "This is a blocking asset check" in page.locator("body").inner_text()  # an ERROR


def test_materialize_all_on_the_lineage_page_offers_the_datas_completed_days(page, demo_ui, artifacts):
    """The lineage page's main button, "Materialize all (N)", opens the backfill dialog: its days
    run from the data's first to the last completed one ("Latest": the demo's day, not today's,
    which has no data yet), no cluster is chosen until the user picks one, and nothing starts
    before "Launch backfill"."""
    server, data_dir, built = demo_ui
    day, today = _demo_day(), dt.datetime.now(dt.UTC).date().isoformat()
    visit(page, f"{server.url}/asset-groups")
    page.get_by_role("button", name=re.compile(r"Materialize all")).first.click()
    dialog = page.get_by_role("dialog").first
    dialog.get_by_text("Partition selection").wait_for()
    dialog.get_by_role("button", name="Latest", exact=True).click()
    days = dialog.get_by_placeholder(re.compile(r"ex: "))
    assert days.input_value() == day
    text = dialog.inner_text()
    assert day in text and today not in text and "2020" not in text, text
    assert today not in (days.get_attribute("placeholder") or "")
    page.screenshot(path=str(artifacts / "ui-first-start-materialize-all.png"))
    dialog.get_by_role("button", name="Cancel", exact=True).click()
    assert set(_runs(data_dir)) == set(built)


def test_first_start_after_the_demo_launches_nothing_and_says_so(demo_ui):
    """Last in the file: its quiet time counts from the UI's start, which came when the session
    collected this file, so the session's other tests and the page tests above (which launch
    nothing: the last one checks it) run inside it instead of before it."""
    server, data_dir, built = demo_ui
    started = server.ready_at
    while time.monotonic() - started < QUIET_S or not all(_ticks(data_dir).get(s) for s in ("new_parquet_sensor", "fleet_day_automation")):
        assert time.monotonic() - started < QUIET_S + 120, f"sensors never ticked: {_ticks(data_dir)}"
        time.sleep(5)
    ticks = _ticks(data_dir)
    assert set(_runs(data_dir)) == set(built), "the UI launched runs for a day the demo had built"
    assert all(status == "SKIPPED" for status in ticks["new_parquet_sensor"]), ticks
    log = server.log.read_text(errors="replace")
    [line] = [line for line in log.splitlines() if line.startswith("automation ")]
    assert line.startswith("automation on:") and "now nothing" in line
    assert " - DEBUG - " not in log  # runs and services at INFO
