VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint venv clean bench clients clients-frameworks clients-hf

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

# plan --emit checked by Megatron-Core's, Megatron-Bridge's and torchtitan's own code (not part of test or CI:
# it installs CPU torch); venvs of their own, pinned versions (experiments/emit_clients.py)
CLIENTS := build/clients
clients-frameworks: $(STAMP)
	$(PY) -m experiments.emit_clients emit $(CLIENTS)
	python3 -m venv $(CLIENTS)/megatron
	$(CLIENTS)/megatron/bin/pip install -qq torch==2.13.0 megatron-core==0.16.1
	$(CLIENTS)/megatron/bin/python -m experiments.emit_clients check-megatron $(CLIENTS)
	# Megatron-Bridge: its own dependencies need CUDA (transformer-engine, mamba-ssm...), so it is
	# installed without them beside what its config and recipe modules import; Transformer Engine
	# is stood in for by an inert module (experiments/emit_clients.py, check_bridge)
	python3 -m venv $(CLIENTS)/bridge
	$(CLIENTS)/bridge/bin/pip install -qq torch==2.13.0 megatron-core==0.16.1 'transformers<5' \
	  'huggingface-hub<1' 'datasets<4' einops triton==3.9.0 omegaconf 'hydra-core>1.3,<=1.3.2' megatron-energon rich
	$(CLIENTS)/bridge/bin/pip install -qq --no-deps megatron-bridge==0.3.1
	$(CLIENTS)/bridge/bin/python -m experiments.emit_clients check-bridge $(CLIENTS)
	python3 -m venv $(CLIENTS)/torchtitan
	$(CLIENTS)/torchtitan/bin/pip install -qq torch==2.13.0 torchtitan==0.3.0 triton==3.9.0  # its models import triton
	$(CLIENTS)/torchtitan/bin/python -m experiments.emit_clients check-torchtitan $(CLIENTS)
	python3 -m venv $(CLIENTS)/torchtitan-toml
	$(CLIENTS)/torchtitan-toml/bin/pip install -qq torch==2.13.0 torchtitan==0.2.2 triton==3.9.0
	$(CLIENTS)/torchtitan-toml/bin/python -m experiments.emit_clients check-torchtitan $(CLIENTS)
	# Megatron-LM's own parse_args/validate_args: MEGATRON_LM=a checkout at d98e8a64 (Python 3.12)
	if [ -n "$(MEGATRON_LM)" ]; then python3.12 -m venv $(CLIENTS)/megatron-lm && \
	  $(CLIENTS)/megatron-lm/bin/pip install -qq torch==2.13.0 megatron-core==0.16.1 && \
	  PYTHONPATH=$(MEGATRON_LM):. $(CLIENTS)/megatron-lm/bin/python -m experiments.emit_clients \
	    check-megatron-lm $(CLIENTS); fi

clients: clients-frameworks clients-hf

clean:
	rm -rf $(VENV) .pytest_cache results

# Checks against the frameworks' own code (not part of `make test` or CI: it installs torch).
# clients-hf: parameter counts of tests/data/hf/ as transformers builds them (on the meta
# device), in a virtual environment of its own, against tests/data/hf/param_counts.json.
HF_VENV ?= $(CLIENTS)/hf
TRANSFORMERS_PIN ?= 5.24.0
TORCH_PIN ?= 2.13.0

$(HF_VENV)/.installed:
	python3 -m venv $(HF_VENV)
	$(HF_VENV)/bin/python -m pip install -qq torch==$(TORCH_PIN) transformers==$(TRANSFORMERS_PIN)
	touch $@

clients-hf: $(HF_VENV)/.installed
	$(HF_VENV)/bin/python experiments/hf_param_counts.py --check
