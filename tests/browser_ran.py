"""CI must run every browser test: a pytest plugin that fails a CI run (env ``CI`` set, as .ci/run
does) in which a collected ``browser`` test was skipped or deselected, so they can never pass
silently. Registered by tests/conftest.py.

It holds under pytest-xdist (``-n N``) too. There the controller collects nothing and each worker
runs a share of the tests, so a check made in any one process would see either no browser test
(the controller) or only its share of them (a worker). Each worker sends the number it collected
(before ``-m``/``-k`` deselect anything) to the controller in its ``workeroutput``; every test's
report reaches the controller's ``pytest_runtest_logreport``; the controller alone decides.
"""

from __future__ import annotations

import os

import pytest

WORKER_KEY = "browser_tests_collected"


def is_browser_test(item) -> bool:
    """A collected test is a browser test by its marker or its folder (tests/browser/conftest.py
    adds the marker after this plugin counts)."""
    return item.get_closest_marker("browser") is not None or "/tests/browser/" in item.path.as_posix()


class BrowserTestsRan:
    """Counts the browser tests collected and those whose call ran (passed or failed, not skipped)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.collected = 0
        self.ran = 0

    @property
    def is_worker(self) -> bool:
        return hasattr(self.config, "workerinput")

    @pytest.hookimpl(tryfirst=True)  # before `-m` / `-k` deselect anything
    def pytest_collection_modifyitems(self, items) -> None:
        self.collected = sum(1 for item in items if is_browser_test(item))
        if self.is_worker:
            self.config.workeroutput[WORKER_KEY] = self.collected  # type: ignore[attr-defined]

    def pytest_runtest_logreport(self, report) -> None:
        # A test skipped inside its body has a call report too: it did not run.
        if report.when == "call" and not report.skipped and "browser" in report.keywords:
            self.ran += 1

    @pytest.hookimpl(optionalhook=True)  # an xdist hook: absent without xdist
    def pytest_testnodedown(self, node, error) -> None:
        # Every worker collects the whole selection; one that died before it finished reports nothing.
        self.collected = max(self.collected, getattr(node, "workeroutput", {}).get(WORKER_KEY, 0))

    def missing(self) -> str | None:
        """Why this CI run must fail for its browser tests, or None (also None in an xdist worker:
        the controller decides)."""
        if self.is_worker or not os.environ.get("CI") or self.ran >= self.collected:
            return None
        return (f"CI: {self.collected - self.ran} of {self.collected} browser test(s) did not run "
                "(skipped or deselected); CI must run them all")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session) -> None:
        why = self.missing()
        if why:
            session.config.get_terminal_writer().line(f"error: {why}", red=True)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def register(config: pytest.Config) -> BrowserTestsRan:
    plugin = BrowserTestsRan(config)
    config.pluginmanager.register(plugin, "wattline-browser-tests-ran")
    return plugin
