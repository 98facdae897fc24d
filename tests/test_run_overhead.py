"""What a run pays before and around its steps: the code location's imports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_loading_the_code_location_imports_no_chart_library():
    """A process that builds no report (a cluster-day worker, a `--select` run, the UI's code
    location) does not pay altair's import (~0.4 s CPU): the report's asset imports it when it runs."""
    code = "import sys, pipeline.runner, pipeline.definitions; print(sorted(m for m in ('altair', 'vl_convert', 'reports.daily') if m in sys.modules))"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
