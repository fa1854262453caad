# mtk developer entry points. `make demo` and `make test` each set up a fresh machine themselves.
PYTHON ?= python3
PYTEST_ARGS ?=

.PHONY: demo test unit lint golden bench deps-train deps-test

demo: deps-train  ## train the tiny model on this machine's CPU (local backend, 2 processes)
	mtk launch examples/tiny.yaml --backend local

test: deps-test  ## the whole test suite: unit + integration (real Slurm, etcd, dockerd, torchrun)
	$(PYTHON) -m pytest tests $(PYTEST_ARGS)

unit:  ## unit tests only (no daemons, seconds)
	$(PYTHON) -m pytest tests/unit $(PYTEST_ARGS)

lint:
	ruff check .

golden:  ## regenerate the golden files after an intended render change, then review `git diff tests/golden`
	MTK_REGEN_GOLDEN=1 $(PYTHON) -m pytest tests/unit/test_golden.py -q

bench:  ## speed comparisons (on demand, never in CI)
	$(PYTHON) benchmarks/cli_startup.py
	$(PYTHON) benchmarks/preprocess.py
	$(PYTHON) benchmarks/train_step.py

deps-train:
	scripts/install-deps.sh train

deps-test:
	scripts/install-deps.sh test
