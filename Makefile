# Both targets do all set-up on a fresh machine: a .venv, torch first (so pip never pulls a
# multi-GB CUDA build), then the package with its dev and env extras.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.seedrl-installed
# Tests and the demo pin threads: two threads collapse when anything else shares the CPU.
export OMP_NUM_THREADS ?= 1
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install test demo bench lint clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install "$(TORCH_SPEC)"
	# fast-downward-textworld (ALFWorld's planner) builds from source with a bare `python build.py`;
	# with the venv first on PATH that `python` is the venv's, not pyenv's base interpreter.
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m pip install -e ".[dev,envs,ray]"
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

demo: $(STAMP)
	$(VENV)/bin/seedrl demo --out runs/demo

bench: $(STAMP)
	$(PY) benchmarks/rollout_throughput.py

lint: $(STAMP)
	$(VENV)/bin/ruff check seedrl tests benchmarks

clean:
	rm -rf runs .pytest_cache
