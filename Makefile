# LLMChain: `make run` starts the site with its local services; `make test` runs every test.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/node_modules/.bin:$(PATH)

.PHONY: install run test bench-chain clean

$(VENV)/.installed: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

node_modules/.installed: package.json package-lock.json
	npm install --no-audit --no-fund
	touch $@

install: $(VENV)/.installed node_modules/.installed

run: install
	$(PY) manage.py migrate --noinput
	$(PY) manage.py up

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

bench-chain: install
	$(PY) manage.py bench chain

clean:
	rm -rf var staticfiles .pytest_cache .hypothesis
