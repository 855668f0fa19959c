# `make demo`: set everything up and run the main job (`make demo KEEP_WEB=1`: its web view stays up after,
# until Ctrl-C). `make demo-cluster`: the same on two replicas on PostgreSQL, one killed midway, and the
# report archive on Dask. `make test`: set up, run ruff, mypy, pytest (on PYTEST_WORKERS workers, below).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo demo-cluster test lint typecheck pytest bench clean protos check-protos chromium

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[all]'
	touch $(STAMP)

# Debian's Chromium for the browser tests of the web view (tests/ldp_aggregator/test_web_browser.py, driven
# by Playwright; docs/web.md). Idempotent: installed only when missing, as root, with apt-get (the package
# lists are refreshed only if the first try fails). Elsewhere those tests skip with the reason (under CI: fail).
CHROMIUM ?= /usr/bin/chromium
chromium:
	@if [ ! -x "$(CHROMIUM)" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's chromium for the browser tests (apt-get install chromium)"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -q chromium >/dev/null 2>&1 || \
		{ apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; } || \
		echo "could not install chromium: the browser tests will say so"; \
	fi

# The demo runs on a database of its own (demo-output/demo.sqlite3, made afresh every run): it never
# touches the operator's ldp-data/ldp.sqlite3 or its tokens.
demo: $(STAMP)
	$(BIN)/python -m simulations.demo --out demo-output $(if $(KEEP_WEB),--keep-web)

# Two replicas on a throwaway PostgreSQL of its own (PostgreSQL 15 binaries: Debian's postgresql package),
# one killed with SIGKILL midway, the estimates; then the archive exported, verified and reduced on Dask.
# Everything it starts is stopped and removed at the end; demo-cluster-output/ keeps the logs and the archive.
demo-cluster: $(STAMP)
	$(BIN)/python -m simulations.demo_cluster --out demo-cluster-output

lint: $(STAMP)
	$(BIN)/ruff check ldp_client ldp_aggregator simulations tests bench scripts examples
	$(BIN)/ruff format --check ldp_client ldp_aggregator simulations tests bench scripts examples

typecheck: $(STAMP)
	$(BIN)/mypy

# pytest-xdist workers for `make test`: one per core this process may use, at most 8 (0 on one core: no
# worker processes). Each worker starts its own throwaway PostgreSQL, and Chromium if it gets a browser test;
# `--dist worksteal` hands a long test's neighbours to whichever worker is idle. `make test PYTEST_WORKERS=0`
# runs it in one process; a plain `.venv/bin/pytest tests/x.py` (or `-m slow`) is serial unless given `-n`.
PYTEST_WORKERS ?= $(shell $(PYTHON) -c 'import os; \
	n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1); \
	print(min(n, 8) if n > 1 else 0)')

# PYTHONDONTWRITEBYTECODE is emptied for the run (some shells, this project's machines too, set it): without
# cached bytecode every worker, and every server or demo a test starts, compiles the project anew, and pytest
# rewrites every test module's asserts again (collection 21 s instead of 9 s per process on the 2-core
# machine). The caches go to the git-ignored __pycache__/ directories.
pytest: $(STAMP) chromium
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist worksteal

protos: $(STAMP)
	$(BIN)/python scripts/gen_protos.py

check-protos: $(STAMP)
	$(BIN)/python scripts/gen_protos.py --check

test: lint typecheck check-protos pytest

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
