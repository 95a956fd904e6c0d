VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test venv clean bench

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m solver.demo
	$(PY) experiments/reproduce.py --quick --fresh

test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) experiments/bench_simulator.py
	$(PY) experiments/bench_sweep.py
	$(PY) experiments/bench_cpsat.py

clean:
	rm -rf $(VENV) .pytest_cache results
