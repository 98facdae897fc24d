import os
import warnings

import pytest

warnings.filterwarnings("ignore", module="dagster")
os.environ.setdefault("WATTLINE_DUCKDB_THREADS", "2")
# The daily report is part of every `run_day`: in tests it skips the PNGs (the report tests
# turn them on) and writes under a temporary folder, never into the repo's reports/out.
os.environ.setdefault("WATTLINE_REPORT_PNG", "off")


@pytest.fixture(autouse=True, scope="session")
def _reports_out_dir(tmp_path_factory):
    if "WATTLINE_REPORTS_DIR" not in os.environ:
        os.environ["WATTLINE_REPORTS_DIR"] = str(tmp_path_factory.mktemp("reports-out"))
    yield


@pytest.fixture
def data_dir(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    return d


# S3-compatible test server (moto, 127.0.0.1) and a fresh bucket per test: see tests/s3_server.py.
from tests.s3_server import s3, s3_server  # noqa: E402,F401
