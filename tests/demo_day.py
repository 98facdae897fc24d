"""One small demo day for the tests that read what a user sees after `make demo`: `wattline demo`
on the tiny fleet's first quarter hour (every table built, the report written), once per session."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli_util import invoke
from tests.once_per_run import once_per_run

DATE = "2026-11-30"


@dataclass(frozen=True)
class DemoDay:
    data_dir: Path
    output: str
    date: str = DATE


def _demo(root: Path) -> DemoDay:
    # Its report goes to a folder of its own, which no later run of the same date overwrites.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WATTLINE_REPORTS_DIR", str(root / "reports"))
        result = invoke("demo", "--fleet", "tiny", "--hours", "0.25", "--date", DATE, "--data-dir", str(root / "data"))
    assert result.exit_code == 0, result.output
    return DemoDay(root / "data", result.output)


@pytest.fixture(scope="session")
def demo_day(tmp_path_factory) -> DemoDay:
    """Built once per run, also under pytest-xdist (``tests.once_per_run``)."""
    return once_per_run(tmp_path_factory, "demo-day", _demo)
