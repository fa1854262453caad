# mtk developer entry points. `make demo` and `make test` each set up a fresh machine themselves: the Python
# side goes into the project virtualenv $(VENV) from the committed lock files (scripts/install-deps.sh).
VENV ?= .venv
PYTHON := $(abspath $(VENV))/bin/python
PYTEST_ARGS ?=
TYPECHECK_ARGS ?=
# Every command below, and every process the tests start, runs from the project environment.
export PATH := $(abspath $(VENV))/bin:$(PATH)
export VIRTUAL_ENV := $(abspath $(VENV))
export MTK_VENV := $(VENV)

.PHONY: demo demo-data test unit test-fast test-slurm test-k8s test-training test-data test-containers test-launcher test-report test-megatron-lm lint typecheck golden bench lock deps-train deps-test

demo: deps-train  ## train the tiny model on this machine's CPU (local backend, 2 processes)
	mtk launch examples/tiny.yaml --backend local

demo-data: deps-train  ## offline inputs of examples/tiny-corpus.yaml and tiny-slurm.yaml: data/corpus.jsonl + its own BPE
	$(PYTHON) examples/make_demo_data.py data

test: deps-test  ## the whole test suite: unit + integration (real Slurm, etcd, dockerd, torchrun); 25 slowest printed
	$(PYTHON) scripts/test_lanes.py $(PYTEST_ARGS)  # two lanes at once: why in the script's docstring

# Tests by cost: tests/support/cost.py marks every test from the fixtures and imports it uses
# (slurm, docker, etcd, torchrun, fuzz, megatron, workers, integration); `fast` = none of them: pure logic, no daemons.
test-fast: deps-test  ## pure logic only (no daemons, no torchrun, no fuzzing, no megatron import)
	$(PYTHON) -m pytest tests -m fast --durations=25 $(PYTEST_ARGS)

# One area, unit + integration: `make test-slurm`, `make test-k8s`, ...
AREAS := slurm k8s training data containers launcher report
$(AREAS:%=test-%): test-%: deps-test
	$(PYTHON) -m pytest tests/unit/$* tests/integration/$* --durations=25 $(PYTEST_ARGS)

unit: deps-test  ## unit tests only (no daemons, seconds)
	$(PYTHON) -m pytest tests/unit $(PYTEST_ARGS)

test-megatron-lm: deps-test  ## on demand: Megatron-LM's pretrain_gpt.py resumes mtk runs (needs MEGATRON_LM_TREE=<checkout> or the mirror)
	$(PYTHON) -m pytest tests/integration/training/megatron_lm $(PYTEST_ARGS)

lint: deps-test
	ruff check .

typecheck: deps-test  ## mypy over the installed `mtk` package (settings in pyproject.toml; scripts/typecheck.py says how)
	$(PYTHON) scripts/typecheck.py $(TYPECHECK_ARGS)

golden: deps-test  ## regenerate the golden files after an intended render change, then review `git diff tests/golden`
	MTK_REGEN_GOLDEN=1 $(PYTHON) -m pytest tests/unit/test_golden.py tests/unit/containers/test_containers_apptainer.py -q

bench: deps-test  ## speed comparisons (on demand, never in CI)
	$(PYTHON) benchmarks/cli_startup.py
	$(PYTHON) benchmarks/preprocess.py
	$(PYTHON) benchmarks/train_step.py
	$(PYTHON) benchmarks/loop_compare.py

lock: deps-test  ## re-resolve requirements/*.lock from pyproject.toml (the only step that takes new upstream releases)
	$(PYTHON) scripts/lock.py

deps-train:
	scripts/install-deps.sh train

deps-test:
	scripts/install-deps.sh test
