# The commands people type. Tool configuration lives in pyproject.toml.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test lint typecheck unit docs demo bench bench-quick clean

# (Re)install whenever the project's dependencies change.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

test: lint typecheck unit docs

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest

# The documentation site; warnings are errors (strict in mkdocs.yml).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --quiet --site-dir site

# The demo needs only the package and the reference server's socket (uvicorn).
DEMO_STAMP := $(VENV)/.demo-installed
$(DEMO_STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[server]'
	@touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/python examples/demo.py

# The peers measured beside idemclient, and wrk to load the reference server.
BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	@command -v wrk >/dev/null || (apt-get update -qq && apt-get install -y -qq wrk)
	@touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.run --json bench-results/results.json

bench-quick: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.run --quick --json bench-results/quick.json

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis site
