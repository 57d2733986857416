# The commands people type. Tool configuration lives in pyproject.toml.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test lint typecheck unit httpx-releases docs dist demo bench bench-quick check-deep soak clean

# (Re)install whenever the project's dependencies change.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# unit then checks the distributions that dist built (see tests/packaging).
test: UNIT_ENV := IDEMCLIENT_DIST=$(CURDIR)/dist
test: lint typecheck dist unit httpx-releases docs

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# tests/packaging installs the wheel into a fresh environment without extras; under
# `make test` it reads the distributions `dist` built, alone it builds its own.
unit: $(STAMP)
	$(UNIT_ENV) $(BIN)/pytest

# The sdist and the wheel, built as a release builds them and checked as the package
# index reads them (metadata, and the README as their long description).
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/twine check --strict dist/*

# wrap() swaps the transports of a built httpx client through httpx's private attributes
# (idemclient/_retrofit.py): run the client's tests under every httpx release that
# pyproject.toml allows. Each release gets a throwaway environment layered on $(VENV),
# holding only that httpx and what it needs beyond $(VENV) (kept in $(VENV)/httpx-<release>).
HTTPX_RELEASES := 0.27.0 0.27.1 0.27.2 0.28.0 0.28.1
HTTPX_TESTS    := tests/client --ignore=tests/client/test_concurrency.py --ignore=tests/client/test_crash.py \
                  tests/profiles/test_client_dialects.py tests/profiles/hostile
PURELIB        := import sysconfig; print(sysconfig.get_paths()['purelib'])

httpx-releases: $(STAMP)
	@set -e; for release in $(HTTPX_RELEASES); do \
	  env=$(VENV)/httpx-$$release; \
	  if [ ! -f $$env/.installed ]; then \
	    rm -rf $$env; \
	    $(BIN)/python -m venv --without-pip $$env; \
	    echo "import site; site.addsitedir('$$($(BIN)/python -c "$(PURELIB)")')" \
	      > "$$($$env/bin/python -c "$(PURELIB)")/_project.pth"; \
	    $(BIN)/python -m pip --python $$env/bin/python install --quiet "httpx==$$release"; \
	    touch $$env/.installed; \
	  fi; \
	  $$env/bin/python -c "import httpx, sys; sys.exit(httpx.__version__ != '$$release')"; \
	  echo "httpx $$release: $(HTTPX_TESTS)"; \
	  PYTHONPATH=$(CURDIR) $$env/bin/python -m pytest -q -p no:cacheprovider $(HTTPX_TESTS); \
	done

# The documentation site, strict: a warning fails it, and every internal link and anchor
# is checked (validation in mkdocs.yml). Not --quiet: it would turn strict off.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# The model-based checker (tests/checker) for as long as asked, its seed printed:
# `make check-deep MINUTES=60`, `make check-deep SEED=1234` to replay; in one server
# profile with `PROFILE=stripe` (default: every built-in profile in turn). `make test`
# runs it bounded (tests/checker/test_checker.py).
MINUTES ?= 10
SEED    ?=
PROFILE ?=
check-deep: $(STAMP)
	PYTHONPATH=$(CURDIR) $(BIN)/python -m tests.checker.deep --minutes $(MINUTES) $(if $(SEED),--seed $(SEED)) $(if $(PROFILE),--profile $(PROFILE))

# The mutation suite (tests/mutants): each semantic mutant of a decision point is applied
# to a scratch copy of the tree (never this one) and run against the behavioural tests
# that kill it; a table (mutant, killed by, time), and a failure on any survivor. Not part
# of `make test` (which checks only that every mutant still applies). `FULL=1` runs each
# against the wide behavioural set; `CHECKER=1` against the checker's bounded run alone
# (a measure: survivors are reported, not failed); `ONLY="name ..."`; `JOBS=2`.
FULL    ?=
CHECKER ?=
ONLY    ?=
JOBS    ?= 1
mutants: $(STAMP)
	PYTHONPATH=$(CURDIR) $(BIN)/python -m tests.mutants --jobs $(JOBS) $(if $(FULL),--full) $(if $(CHECKER),--checker) $(if $(ONLY),--only $(ONLY))

# Real-process trials against `idemclient server` on loopback, SQLite and PostgreSQL,
# each with faults and a SIGKILL of the client (and in a share, of a server); one table
# at the end (tests/reliability/soak.py). `make soak TRIALS=200` for a shorter one.
TRIALS ?= 1000
soak: $(STAMP)
	PYTHONPATH=$(CURDIR) $(BIN)/python -m tests.reliability.soak --trials $(TRIALS) $(if $(SEED),--seed $(SEED))

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
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis site dist
