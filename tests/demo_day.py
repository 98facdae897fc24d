"""One small demo day for the tests that read what a user sees after `make demo`: `wattline demo`
on the tiny fleet's first quarter hour (every table built, the report written), once per session."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli_util import invoke

DATE = "2026-11-30"


@dataclass(frozen=True)
class DemoDay:
    data_dir: Path
    output: str
    date: str = DATE


@pytest.fixture(scope="session")
def demo_day(tmp_path_factory) -> DemoDay:
    data_dir = tmp_path_factory.mktemp("demo") / "data"
    result = invoke("demo", "--fleet", "tiny", "--hours", "0.25", "--date", DATE, "--data-dir", str(data_dir))
    assert result.exit_code == 0, result.output
    return DemoDay(data_dir, result.output)
