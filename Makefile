# orderflow — local developer entry points.
#   make demo [ORDERS=200] [PROCESSES=3] [KILL_EVERY=0]
#                            run the local demo end to end (KILL_EVERY=S: SIGKILL a random devhost
#                            process every S seconds and restart it) and write demo-report.json
#   make test                ruff, mypy and the whole pytest suite (starts and stops its own emulators)

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
ORDERS ?= 200
PROCESSES ?= 3
KILL_EVERY ?= 0

.PHONY: demo test lint typecheck pytest setup clean

$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

setup: $(VENV)/.installed node_modules/.installed

demo: setup
	$(PY) -m devhost.demo --orders $(ORDERS) --processes $(PROCESSES) --kill-every $(KILL_EVERY)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: setup
	$(VENV)/bin/mypy .

pytest: setup
	$(VENV)/bin/pytest

test: lint typecheck pytest

clean:
	rm -rf $(VENV) node_modules .data .run .mypy_cache .ruff_cache .pytest_cache
