"""`wattline demo`, then `wattline ui` with automation on, for tests/browser/test_ui_first_start.py,
started as soon as a session has collected that file's tests, in a process of its own: the UI's
two quiet minutes (no run launched while its sensors tick) then pass while the session runs other
files, instead of holding a pytest worker idle. Once per test run, also under pytest-xdist: the
first worker to ask starts it (a lock in the run's temp folder the workers share) and whichever
worker runs the file attaches to it by the handle the process writes.

The process (``python -m tests.browser.first_start_ui ROOT WATCH_PID``) builds the demo, records
the runs it made, starts the UI, writes ``ROOT/handle.json``, and stops the UI when the test
module says so (``ROOT/stop``), when the pytest run (WATCH_PID: the xdist controller, or the
serial session's process) is gone, or after ``LIFETIME_S``, whichever comes first."""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import re
import resource
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEST_FILE = "tests/browser/test_ui_first_start.py"
LIFETIME_S = 3 * 3600
"""The longest the UI lives: a bound on the watch loop should neither a stop nor the run's end come."""
ATTACH_TIMEOUT_S = 600
"""How long the test module waits for the demo and the UI (both start on a busy 2-core machine)."""
DAYS_AGO_ENV = "WATTLINE_TEST_DEMO_DAYS_AGO"
"""The demo's day in days before today, UTC (unset: the day `wattline demo` picks, yesterday); 2
runs the tests as if a midnight had passed since the demo was built, as in a session that crosses
midnight UTC between building the demo (at collection) and the tests."""


@dataclass(frozen=True)
class FirstStartUi:
    url: str
    data_dir: Path
    day: str
    """The demo's day, chosen once when it was built (the tests never read it from the clock again)."""
    built: list[str]
    """The demo's Dagster runs, listed before the UI started."""
    ready_at: float
    """``time.monotonic()`` when the UI first answered (the clock is the machine's, shared by processes)."""
    log: Path


@contextlib.contextmanager
def _instance(data_dir: Path):
    """The UI's Dagster instance (its dagster.yaml reads DAGSTER_HOME)."""
    from dagster import DagsterInstance

    previous = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = str(data_dir / ".dagster")
    try:
        with DagsterInstance.get() as instance:
            yield instance
    finally:
        if previous is None:
            os.environ.pop("DAGSTER_HOME")
        else:
            os.environ["DAGSTER_HOME"] = previous


def runs(data_dir: Path) -> list[str]:
    with _instance(data_dir) as instance:
        return [r.run_id for r in instance.get_runs()]


def ticks(data_dir: Path) -> dict[str, list[str]]:
    """Each sensor's ticks so far (their status), from the instance the daemon writes."""
    with _instance(data_dir) as instance:
        return {s.instigator_name: [t.status.value for t in instance.get_ticks(s.instigator_origin_id, s.selector_id)]
                for s in instance.all_instigator_state()}


def _root(tmp_path_factory) -> Path:
    """A folder every worker of the run shares (as tests/once_per_run.py's), or the serial session's."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "first-start-ui"
    root.mkdir(exist_ok=True)
    return root


def start(tmp_path_factory) -> Path:
    """The UI's process for this run: started by the first caller, found by the others."""
    root = _root(tmp_path_factory)
    with open(root / "start.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "started").exists():
            watch = os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()
            with open(root / "process.log", "wb") as log:
                subprocess.Popen([sys.executable, "-m", "tests.browser.first_start_ui", str(root), str(watch)], cwd=REPO,
                                 stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            (root / "started").touch()
    return root


def attach(tmp_path_factory) -> tuple[Path, FirstStartUi]:
    """Waits for the started UI (starting it when no session hook did); fails with its error."""
    root = start(tmp_path_factory)
    handle = root / "handle.json"
    deadline = time.monotonic() + ATTACH_TIMEOUT_S
    while not handle.exists():
        assert time.monotonic() < deadline, f"the demo and UI not ready after {ATTACH_TIMEOUT_S} s; see {root / 'process.log'}"
        time.sleep(1)
    got = json.loads(handle.read_text())
    assert "error" not in got, got.get("error")
    return root, FirstStartUi(got["url"], Path(got["data_dir"]), got["day"], got["built"], got["ready_at"], Path(got["log"]))


def stop(root: Path, timeout_s: float = 120) -> None:
    """Asks the process to stop the UI, and waits until it did."""
    (root / "stop").touch()
    deadline = time.monotonic() + timeout_s
    while not (root / "stopped").exists():
        assert time.monotonic() < deadline, f"the UI not stopped after {timeout_s} s; see {root / 'process.log'}"
        time.sleep(0.5)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _write(path: Path, value: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value))
    tmp.replace(path)


def main(root: Path, watch: int) -> None:
    from collectors.days import today_utc
    from tests.browser.conftest import ARTIFACTS
    from tests.browser.test_ui import UiServer

    data_dir = root / "data"
    server = None
    try:
        # the demo's report and any the UI writes go to a temp folder, never into the repo's reports/out
        os.environ.update(WATTLINE_REPORT_PNG="off", WATTLINE_REPORTS_DIR=str(root / "reports"))
        wattline = Path(sys.executable).parent / "wattline"
        days_ago = os.environ.get(DAYS_AGO_ENV)
        date = ["--date", (today_utc() - dt.timedelta(days=int(days_ago))).isoformat()] if days_ago else []
        out = subprocess.run([str(wattline), "demo", "--fleet", "tiny", "--hours", "0.1", *date, "--data-dir", str(data_dir)],
                             check=True, stdout=subprocess.PIPE, text=True).stdout
        said = re.match(r"wattline demo: (\d{4}-\d\d-\d\d),", out)  # the day it chose, on its first line
        assert said, out
        day = said[1]
        built = runs(data_dir)
        ARTIFACTS.mkdir(exist_ok=True)
        log = ARTIFACTS / "wattline-ui-first-start.log"
        server = UiServer(data_dir, log, automation=True)
        server.wait_ready()
        _write(root / "handle.json", {"url": server.url, "data_dir": str(data_dir), "day": day, "built": built,
                                      "ready_at": time.monotonic(), "log": str(log)})
    except BaseException:
        _write(root / "handle.json", {"error": traceback.format_exc()})
    deadline = time.monotonic() + LIFETIME_S
    try:
        while not (root / "stop").exists() and _alive(watch) and time.monotonic() < deadline:
            time.sleep(1)
    finally:
        if server is not None:
            server.stop()
        used = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
        print(f"cpu_s {sum(u.ru_utime + u.ru_stime for u in used):.1f} (this process, the demo and the UI)", flush=True)
        (root / "stopped").touch()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
