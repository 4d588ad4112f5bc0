# The two commands of the README: `make run` (default pipeline) and `make test` (lint, then the test suite);
# `make test-fast` and `make format` for development.
# All install what they need first: FFmpeg (apt, where possible), a venv in .venv, and dlbench into it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CORES ?= all
# two recipes at once: the LeRobot peer environment (about 100 s, mostly unpacking wheels, one core) is built beside
# dlbench's own venv and the lint, not after them
MAKEFLAGS += --jobs=2

.PHONY: run test test-fast lint format install system-deps peer clean

run: install peer
	$(BIN)/snakemake -c $(CORES)

# three xdist workers: the SLURM tier (mostly waiting on its cluster) holds one, the rest share two; the tests that
# compare measured speeds run after them, alone (tests/conftest.py orders and groups the tests)
test: install peer lint
	$(BIN)/python -m pytest -q -n 3 --no-loadscope-reorder --durations=25 -m 'not timing' tests
	$(BIN)/python -m pytest -q -m timing tests

# the inner loop: the unit tier (tests/conftest.py: no servers, peer, cluster or end-to-end runs), no lint, on
# two processes (pytest-xdist)
test-fast: install
	DLBENCH_PEER_PYTHON=none $(BIN)/python -m pytest -q -m 'unit and not timing' -n 2 tests

# rewrite what `make lint` checks: ruff's fixes and formatting, snakefmt
format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .
	$(BIN)/snakefmt Snakefile workflow/rules

# formatting and lint, as configured in pyproject.toml: ruff (Python), snakefmt and Snakemake's own linter; the
# report caption of summary.csv must match its description in docs/configuration.md; every path, command, code
# name and config key the docs name in a code span must exist (scripts/docs_check.py)
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/snakefmt --check Snakefile workflow/rules
	$(BIN)/snakemake --lint
	$(BIN)/python scripts/captions.py --check
	$(BIN)/python scripts/docs_check.py

install: system-deps $(VENV)/.installed

system-deps:
	@scripts/install-system-deps.sh

# LeRobot 0.6.1 (Python 3.12) in .venv-lerobot: the reference loaders and converter. Best effort: without
# Python 3.12 the tests that need it skip and say why.
peer:
	@scripts/peer-env.sh || echo "warning: LeRobot peer environment not created; its tests will be skipped"

$(VENV)/.installed: requirements-cpu.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements-cpu.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $@

clean:
	rm -rf results .snakemake
