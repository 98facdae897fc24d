"""`wattline ui` as an operator uses it: the asset graph, an asset's partition page and its
checks, against a small data dir after one daily run; then the server stops cleanly."""

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.days import copy_of
from tests.report_fixtures import DATE

LOCATION = "pipeline.definitions"
START_TIMEOUT_S = 180


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _default_signals():
    # A child of a shell started in the background may inherit ignored SIGINT/SIGTERM.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


class UiServer:
    def __init__(self, data_dir: Path, log: Path, automation: bool = False):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, WATTLINE_AUTOMATION="on" if automation else "off")  # off: no sensor runs racing the test
        wattline = Path(sys.executable).parent / "wattline"
        self.log = open(log, "wb")
        self.proc = subprocess.Popen(
            [str(wattline), "ui", "--port", str(self.port), "--data-dir", str(data_dir)],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True, preexec_fn=_default_signals,
        )
        self.pgid = self.proc.pid

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"wattline ui exited with {self.proc.returncode}; see {self.log.name}")
            try:
                with urllib.request.urlopen(self.url + "/server_info", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(1)
        raise AssertionError(f"wattline ui not serving after {START_TIMEOUT_S} s; see {self.log.name}")

    def group_alive(self) -> bool:
        try:
            os.killpg(self.pgid, 0)
            return True
        except ProcessLookupError:
            return False

    def stop(self) -> None:
        """Ctrl-C to the whole process group (webserver, daemon, code servers), then escalate."""
        for sig, wait_s in ((signal.SIGINT, 30), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            if not self.group_alive():
                break
            try:
                os.killpg(self.pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                if self.proc.poll() is not None and not self.group_alive():
                    break
                time.sleep(0.5)
        self.proc.wait(timeout=10)
        self.log.close()


@pytest.fixture(scope="module")
def ui(tmp_path_factory, artifacts_dir, report_day):
    # The UI's Dagster instance writes into the data dir: it serves a copy of the session's day.
    data_dir = copy_of(report_day, tmp_path_factory.mktemp("ui") / "data")
    outcome = report_day.outcome
    server = UiServer(data_dir, artifacts_dir / "wattline-ui.log")
    try:
        server.wait_ready()
        yield server, outcome
    finally:
        server.stop()


@pytest.fixture(scope="module")
def artifacts_dir():
    from tests.browser.conftest import ARTIFACTS

    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


# Dagster's "join the community" dialog shows on a page's first visit, over the page, until the
# browser has it dismissed in localStorage (key "communityNux", its value JSON). Set before any
# page script runs, the dialog never shows: no visit waits for a button that, after the first
# dismissal, never comes (about 4 s each).
NO_COMMUNITY_DIALOG = "window.localStorage.setItem('communityNux', JSON.stringify('1'))"


def visit(page, url: str) -> None:
    if not getattr(page, "_no_community_dialog", False):
        page.add_init_script(NO_COMMUNITY_DIALOG)  # runs at each navigation of this page
        page._no_community_dialog = True
    page.goto(url)


def settled_text(page, *needles: str | re.Pattern, timeout_s: float = 30) -> str:
    """The page's text once it holds every one of ``needles`` (a substring, or a pattern it matches),
    or as it is after ``timeout_s``: a page fills its panels from separate queries, so one element
    having appeared says nothing of the others (the caller asserts on the text, which still fails
    if one never comes)."""
    def holds(text: str) -> bool:
        return all(n.search(text) if isinstance(n, re.Pattern) else n in text for n in needles)

    deadline = time.monotonic() + timeout_s
    text = page.locator("body").inner_text()
    while not holds(text) and time.monotonic() < deadline:
        page.wait_for_timeout(500)
        text = page.locator("body").inner_text()
    return text


def test_asset_graph_shows_assets_latest_materialization_and_checks(page, ui, artifacts):
    server, _ = ui
    # Every group of the code location, then the power group's graph (all its asset names).
    visit(page, f"{server.url}/asset-groups")
    for group in ("power", "raw", "report"):
        page.get_by_text(group, exact=True).first.wait_for()
    page.screenshot(path=str(artifacts / "ui-global-lineage.png"))
    visit(page, f"{server.url}/locations/{LOCATION}/asset-groups/power")
    page.get_by_text("power_100ms", exact=True).first.wait_for()  # the graph is drawn (centred: not every node is in view)
    page.screenshot(path=str(artifacts / "ui-asset-graph.png"))
    page.get_by_text("List", exact=True).first.click()  # the group's list names every asset of the group
    for name in ("power_1s", "fleet_power_1s", "power_summary", "energy_curve"):
        page.get_by_text(name, exact=True).first.wait_for()
    # A graph small enough to draw full nodes (however many assets the group has by then):
    # fleet_power_1s and its upstream power_1s, each with its latest materialization and checks.
    visit(page, f"{server.url}/assets/fleet_power_1s?view=lineage&lineageScope=upstream&lineageDepth=1")
    page.get_by_text("Latest event").nth(1).wait_for()
    page.get_by_text(re.compile(r"\d+ / \d+ Passed")).first.wait_for()  # power_1s: coverage WARNs on a 10-minute day
    text = page.locator("body").inner_text()
    assert "power_1s" in text and "fleet_power_1s" in text
    assert re.search(r"Latest event\s+[^\n]*ago", text), text[:2000]
    page.screenshot(path=str(artifacts / "ui-asset-graph-upstream.png"))


def test_partition_page_shows_the_materialization(page, ui, artifacts):
    server, outcome = ui
    # power_1s is partitioned by cluster × date: its key is "<cluster>|<date>" (dimensions by name)
    visit(page, f"{server.url}/assets/power_1s?view=partitions&partition=c0%7C{DATE}")
    page.get_by_text("Latest materialization").first.wait_for()
    page.get_by_text(outcome.run_id[:8]).first.wait_for()
    text = settled_text(page, DATE, "Materialized")
    assert DATE in text and "Materialized" in text
    assert "2400" in text.replace(",", "")  # the rows metadata: 600 s × 4 GPUs
    page.screenshot(path=str(artifacts / "ui-partition.png"))
    visit(page, f"{server.url}/assets/daily_report?view=partitions&partition={DATE}")
    page.get_by_text("html_bytes").first.wait_for()
    page.screenshot(path=str(artifacts / "ui-report-partition.png"))


def test_checks_page_shows_each_result(page, ui, artifacts):
    server, _ = ui
    visit(page, f"{server.url}/assets/power_1s?view=checks")
    for check in ("files_follow_contract", "no_duplicate_samples", "timestamps_inside_partition", "power_within_bounds", "gpu_coverage", "gpus_in_inventory"):
        page.get_by_text(check, exact=True).first.wait_for()
    text = settled_text(page, "Failed")
    assert "Failed" in text and ("Succeeded" in text or "Passed" in text)
    page.screenshot(path=str(artifacts / "ui-checks.png"))


def test_server_stops_cleanly(ui):
    server, _ = ui
    server.stop()
    assert not server.group_alive()
    with pytest.raises(OSError):
        urllib.request.urlopen(server.url + "/server_info", timeout=2)
