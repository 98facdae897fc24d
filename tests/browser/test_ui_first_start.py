"""`wattline ui` right after `wattline demo`, automation on, as a new user meets it: nothing is
rebuilt, the terminal says what automation does, the partitions are the data's days, and a check
shows its partition's own result."""

import datetime as dt
import re
import time

import pytest

from collectors.days import today_utc
from tests.browser import first_start_ui
from tests.browser.conftest import PNG
from tests.browser.first_start_ui import runs as _runs
from tests.browser.first_start_ui import ticks as _ticks
from tests.browser.test_ui import settled_text, visit

QUIET_S = 120
"""How long the UI runs with its sensors on, from its start, before the test counts the runs."""


def _completed_days(first: str, today: dt.date) -> list[str]:
    """The UI's daily partitions on ``today`` (UTC): from the data's first day to yesterday, the
    last completed day. The demo was built when the session collected this file; a midnight since
    adds a day (with no data, so missing), and one may fall while a page loads: each test reads
    the day before and after its page and accepts what the UI shows on either."""
    first_day = dt.date.fromisoformat(first)
    return [(first_day + dt.timedelta(days=k)).isoformat() for k in range((today - first_day).days)]


@pytest.fixture(scope="module")
def demo_ui(tmp_path_factory):
    """The demo's data dir, its day and the UI on it, started when the session collected this file
    (tests/browser/first_start_ui.py); the demo's runs were listed before the UI started."""
    root, ui = first_start_ui.attach(tmp_path_factory)
    try:
        yield ui, ui.data_dir, ui.built, ui.day
    finally:
        first_start_ui.stop(root)


def test_partitions_page_shows_only_the_datas_days(page, demo_ui, artifacts, docs_img):
    server, _, _, day = demo_ui
    before = today_utc()
    n = len(_completed_days(day, before))
    visit(page, f"{server.url}/locations/pipeline.definitions/jobs/cluster_day_job/partitions")
    page.get_by_text("Total partitions").wait_for()
    text = settled_text(page, re.compile(rf"\b({n}|{n + 1})\s+Total partitions"), timeout_s=60)
    after = today_utc()
    # the demo's day, built (today's, still being collected, is no partition of the UI's): one
    # cluster; every completed day since the demo (none unless a midnight passed) is missing
    assert any(re.search(rf"\b{len(days)}\s+Total partitions", text) and re.search(rf"\b{len(days) - 1}\s+Missing partitions", text)
               for days in (_completed_days(day, before), _completed_days(day, after))), text
    assert day in text and after.isoformat() not in text and "2020" not in text
    page.screenshot(path=str(artifacts / "ui-first-start-partitions.png"))
    page.screenshot(path=str(docs_img / "ui-partitions.png"))
    assert (docs_img / "ui-partitions.png").read_bytes().startswith(PNG)


def test_a_check_shows_its_partitions_result_and_a_table_of_examples(page, demo_ui, artifacts, docs_img):
    server, _, _, day = demo_ui
    visit(page, f"{server.url}/assets/power_1s?view=checks&checkDetail=gpu_coverage")
    page.get_by_text("Latest execution").wait_for()
    page.get_by_text(f"c0|{day}").first.wait_for()  # the partition the result belongs to
    page.get_by_text("Show schema").first.wait_for()  # the examples: a table, not a Python repr
    text = settled_text(page, "non-blocking")
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
    assert "This is a blocking asset check" in settled_text(page, "This is a blocking asset check")  # an ERROR


def test_materialize_all_on_the_lineage_page_offers_the_datas_completed_days(page, demo_ui, artifacts):
    """The lineage page's main button, "Materialize all (N)", opens the backfill dialog: its days
    run from the data's first to the last completed one ("Latest": yesterday, the demo's day unless
    a midnight passed since, not today's, which has no data yet), no cluster is chosen until the user picks one, and nothing starts
    before "Launch backfill"."""
    server, data_dir, built, day = demo_ui
    before = today_utc()
    visit(page, f"{server.url}/asset-groups")
    page.get_by_role("button", name=re.compile(r"Materialize all")).first.click()
    dialog = page.get_by_role("dialog").first
    dialog.get_by_text("Partition selection").wait_for()
    dialog.get_by_role("button", name="Latest", exact=True).click()
    days = dialog.get_by_placeholder(re.compile(r"ex: "))
    latest = days.input_value()
    text = dialog.inner_text()
    after = today_utc()
    # the last completed day: the demo's, unless a midnight passed since it was built
    assert latest in {_completed_days(day, t)[-1] for t in (before, after)}, latest
    assert latest in text and after.isoformat() not in text and "2020" not in text, text
    assert after.isoformat() not in (days.get_attribute("placeholder") or "")
    page.screenshot(path=str(artifacts / "ui-first-start-materialize-all.png"))
    dialog.get_by_role("button", name="Cancel", exact=True).click()
    assert set(_runs(data_dir)) == set(built)


def test_first_start_after_the_demo_launches_nothing_and_says_so(demo_ui):
    """Last in the file: its quiet time counts from the UI's start, which came when the session
    collected this file, so the session's other tests and the page tests above (which launch
    nothing: the last one checks it) run inside it instead of before it."""
    server, data_dir, built, _ = demo_ui
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
