# fastload — `make demo` and `make test` each work from a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO   := runs/demo

.PHONY: install test lint demo bench clean

$(STAMP): pyproject.toml constraints.txt setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .

test: lint
	$(BIN)/python -m pytest -q tests benchmarks --benchmark-disable

demo: $(STAMP)
	$(BIN)/fastload demo --workdir $(DEMO)

bench: $(STAMP)
	$(BIN)/python -m pytest -q benchmarks

clean:
	rm -rf $(VENV) $(DEMO) .pytest_cache .benchmarks
