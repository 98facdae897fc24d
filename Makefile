# The README's quick start: `make demo` and `make test` on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# Debian packages the tests need: Chromium drives the browser tests (Playwright never downloads
# a browser), Prometheus is the real server the metrics tests scrape. `make test` installs them
# when missing (.ci/system-deps); `make test-fast` installs nothing.
TEST_PACKAGES := chromium prometheus

.PHONY: demo lint test test-fast screenshots ui bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/wattline demo

# The linter (pyproject [tool.ruff]), the layers and no-cycles contract ([tool.importlinter]) and
# the type checker on pipeline/ ([tool.mypy]). CI runs it before the tests.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy

# One pytest worker per core, at most 4 (each holds a pipeline day's working set); a test file's
# tests stay on one worker, so a day a module builds for itself is built once (CONTRIBUTING.md).
XDIST := -n auto --maxprocesses 4 --dist loadfile

test: $(STAMP)
	.ci/system-deps $(TEST_PACKAGES)
	$(BIN)/python -m pytest -q $(XDIST)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST) -m "not browser and not slow"

# The screenshots of docs/img/ taken again by the browser tests that take them (a test run writes
# them to a temp folder and leaves the checkout as it was; the UI's first start test's 2-minute
# quiet time is left out).
screenshots: $(STAMP)
	.ci/system-deps chromium
	WATTLINE_DOCS_SCREENSHOTS=1 $(BIN)/python -m pytest -q tests/browser/test_docs_screenshots.py \
		tests/browser/test_ui_first_start.py -k "not launches_nothing"

ui: $(STAMP)
	$(BIN)/wattline ui

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) data reports/out
