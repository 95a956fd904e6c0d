VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint venv clean bench

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -qq --upgrade pip
	$(PY) -m pip install -qq -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m pipetab.demo
	$(PY) -m experiments.reproduce --quick --fresh

# every test; the 25 slowest are listed at the end (CI runs this through .ci/run)
test: $(STAMP)
	$(PY) -m pytest --durations=25

# the inner loop: every test but those marked slow (see docs/tests.md)
test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow"

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) .ci/typecheck.py

bench: $(STAMP)
	$(PY) -m experiments.bench_simulator
	$(PY) -m experiments.bench_sweep
	$(PY) -m experiments.bench_cpsat

clean:
	rm -rf $(VENV) .pytest_cache results
