"""The order pytest-xdist hands test files to its workers (``--dist loadfile
--no-loadscope-reorder``, the Makefile's XDIST): the files that build days of their own or drive
a browser first, the rest after them. Registered by tests/conftest.py.

A file's tests stay on one worker, so the run ends when the last file started ends: a long file
handed out last leaves the other workers idle while it runs (xdist's own order, by number of
tests, hands out exactly those last: they have few tests). Started first, they run beside the
many short files, which fill the workers' time around them. The order of a serial run is
unchanged (a file's tests keep their order, and only whole files move).
"""

from __future__ import annotations

import pytest


def weight(item) -> int:
    """What a test tells of its file's length: a browser test (a server it waits on) or a slow
    one (a day of its own, processes killed, a big file) counts, a quick one not."""
    if item.get_closest_marker("browser") is not None:
        return 2
    return 1 if item.get_closest_marker("slow") is not None else 0


def longest_first(items: list) -> list:
    """``items`` grouped by file, the files by their tests' weights (largest first), ties in
    collection order; within a file, the collected order."""
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    ranked = sorted(files.values(), key=lambda tests: -sum(weight(t) for t in tests))
    return [item for tests in ranked for item in tests]


class XdistOrder:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(trylast=True)  # after the `slow` and `browser` markers are added
    def pytest_collection_modifyitems(self, items) -> None:
        if self.config.getoption("dist", "no") != "no" or hasattr(self.config, "workerinput"):
            items[:] = longest_first(items)


def register(config: pytest.Config) -> None:
    config.pluginmanager.register(XdistOrder(config), "xdist_order")
