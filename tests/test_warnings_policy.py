"""A warning raised from the project's own modules fails the suite (pyproject.toml: filterwarnings).

pytest's module field is a regular expression matched at the start of the module the warning is
attributed to (``warnings.warn``'s ``stacklevel`` target), so a deprecated Dagster call made from
``pipeline/…`` counts as ``pipeline``'s. Each case runs code as if it were a module of that name.
"""

from __future__ import annotations

import pytest


def _warn_from(module: str, category=DeprecationWarning) -> None:
    exec("import warnings\nwarnings.warn('a new warning', category)", {"__name__": module, "category": category})


@pytest.mark.parametrize("module", ["pipeline", "pipeline.definitions", "collectors.contract", "reports.daily", "bench.storage", "tests.test_x"])
@pytest.mark.parametrize("category", [DeprecationWarning, UserWarning, RuntimeWarning])
def test_a_warning_from_the_project_is_an_error(module, category):
    with pytest.raises(category, match="a new warning"):
        _warn_from(module, category)


@pytest.mark.parametrize("module", ["dagster._core.definitions", "pipelinex", "somelib.pipeline"])
def test_a_warning_from_elsewhere_is_not_made_an_error(module):
    with pytest.warns(DeprecationWarning, match="a new warning"):
        _warn_from(module)


def test_a_deprecated_dagster_call_made_from_pipeline_is_an_error():
    """The real case: Dagster's @deprecated warns at its caller (AssetSelection.keys, replaced)."""
    from dagster import AssetSelection

    with pytest.raises(DeprecationWarning, match="AssetSelection.keys"):
        exec("from dagster import AssetSelection\nAssetSelection.keys('power')", {"__name__": "pipeline.definitions"})
    assert AssetSelection.assets("power") is not None
