"""Browser tests: Playwright driving Debian's Chromium (``/usr/bin/chromium``), headless.

No browser is ever downloaded: ``make test`` installs the ``chromium`` package with apt when missing (``.ci/system-deps``).
Screenshots land in ``test-artifacts/`` at the repo root (gitignored); those docs/ shows, in a temp
folder (``docs_img``), or in ``docs/img/`` under ``make screenshots``. Skip these locally with
``-m 'not browser'``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("WATTLINE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
DOCS_SCREENSHOTS_ENV = "WATTLINE_DOCS_SCREENSHOTS"
PNG = b"\x89PNG\r\n\x1a\n"


def pytest_collection_finish(session):
    """A session that will run the UI's first-start tests starts its demo and UI now, in the
    background (tests/browser/first_start_ui.py): their quiet time passes during other files."""
    from tests.browser import first_start_ui

    if session.config.option.collectonly or not any(first_start_ui.TEST_FILE in item.nodeid for item in session.items):
        return
    first_start_ui.start(session.config._tmp_path_factory)


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/browser/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists() and not shutil.which(CHROMIUM):
        pytest.fail(f"{CHROMIUM} not found: install Debian's chromium (apt-get install -y chromium), or skip with -m 'not browser'")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture
def docs_img(tmp_path) -> Path:
    """Where the screenshots docs/ shows go: docs/img/ when asked for (`make screenshots`, which
    sets WATTLINE_DOCS_SCREENSHOTS=1), else a temp folder, so a test run leaves the checkout as it was."""
    if os.environ.get(DOCS_SCREENSHOTS_ENV) == "1":
        return DOCS_IMG
    (tmp_path / "docs-img").mkdir()
    return tmp_path / "docs-img"


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, ignore_https_errors=False)
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    try:
        yield pg
    finally:
        context.close()
