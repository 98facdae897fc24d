import os
import warnings

import pytest

warnings.filterwarnings("ignore", module="dagster")
os.environ.setdefault("WATTLINE_DUCKDB_THREADS", "2")


@pytest.fixture
def data_dir(tmp_path):
    d = tmp_path / "data"
    d.mkdir()
    return d
