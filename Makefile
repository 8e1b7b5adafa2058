# orderflow — local developer entry points.
#   make demo [ORDERS=200] [PROCESSES=3] [KILL_EVERY=0] [KEEP=1]
#                            run the local demo end to end (KILL_EVERY=S: SIGKILL a random devhost
#                            process every S seconds and restart it) and write demo-report.json; it
#                            prints the web console's URL; KEEP=1 keeps the system up until Ctrl-C
#   make demo-azure [ORDERS=200] [AZD_ENV=<azd environment>]
#                            the demo's orders against the deployment azd's environment names (azd up first;
#                            docs/deploy.md#the-demo-on-azure), with the deployer's Entra ID sign-in; prints
#                            make demo's summary and writes demo-azure-report.json
#   make chaos [ORDERS=400] [PROCESSES=3] [KILL_EVERY=5] [DUPLICATE_SHARE=0.05] [LATE_SHARE=0.03]
#              [PAUSE_EVERY=30] [OUTAGE_EVERY=30] [LONG_SHARE=0.03] [CLAIM_KILL_SHARE=0.02] [SKEW=1]
#              [CLIENTS=3] [SEED=20261129]
#                            the demo under every fault at once: SIGKILLs, duplicated and late deliveries,
#                            a paused supervisor leader, outages of the state store, the queues and a
#                            dependency, long handlers, kills between an order's create and its claim, a
#                            host with a skewed clock, several clients and an intruder; writes
#                            chaos-report.json
#   make soak [SOAK_ORDERS=1000] [SEED=20261129]
#                            make chaos's faults, all at once, over at least 1,000 orders (not in make test;
#                            about 12 minutes on 2 cores); writes soak-report.json
#   make bench [ORDERS=200] [CONCURRENCY=32] [BENCH_PROCESSES=1,2,3] [SWEEP_SIZES=1000,10000,100000]
#              [PEERS=durabletask,dbos] [HARD_DOWN_ORDERS=10] [CPU_PAIRS=3] [SDK_CALLS=300]
#                            throughput, latency, per-order operation counts, supervisor sweep and a
#                            hard-down dependency, against bare durabletask and DBOS, and the CPU per order
#                            against the baseline revision in CPU_PAIRS pairs of windows; writes bench-report.json
#   make doctor              azure-functions-doctor on the Functions app; fails on any failed check
#   make worker-test         the app in the real Python 3.13 language worker (azure-functions-runtime),
#                            in .venv-worker; the app's install on 3.11, 3.12 and 3.13
#   make test                ruff, the check that no test installs a system package, mypy, the doctor, the
#                            whole pytest suite (starts and stops its own emulators; checks infra/ with
#                            checkov from .venv-infra) and the worker-driven tests
#   make system-deps         what make test needs from the machine: checked, and the Debian packages
#                            installed (as root); make test runs it first (make demo checks its own list)
#   make fresh-check         make test in a fresh clone of the current commit, as CI runs it

# .venv runs on Python 3.11 (the oldest version the app supports; the worker tests check it is).
PYTHON ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.11*/bin/python3.11) $(shell python3.11 -c 'import sys; print(sys.executable)' 2>/dev/null) python3)
VENV   := .venv
PY     := $(VENV)/bin/python
# The worker-driven tests run on the Python the 3.13+ language worker runs on.
PYTHON313 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3.13) $(shell python3.13 -c 'import sys; print(sys.executable)' 2>/dev/null))
WORKER_VENV := .venv-worker
# The app must also install on Python 3.12 (the other version the host's own worker runs).
PYTHON312 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) $(shell python3.12 -c 'import sys; print(sys.executable)' 2>/dev/null))
PY312_VENV := .venv-py312
# checkov (tests/infra/test_checkov.py) pins versions of pytest, pydantic and more that .venv pins
# differently: it gets a venv of its own.
INFRA_VENV := .venv-infra
ORDERS ?= 200
PROCESSES ?= 3
KILL_EVERY ?= 0
KEEP ?= 0
DUPLICATE_SHARE ?= 0.05
LATE_SHARE ?= 0.03
PAUSE_EVERY ?= 30
OUTAGE_EVERY ?= 30
LONG_SHARE ?= 0.03
CLAIM_KILL_SHARE ?= 0.02
SKEW ?= 1
SOAK_ORDERS ?= 1000
CLIENTS ?= 3
# CLIENTS here counts the chaos run's clients; the environment variable of that name is orderflow's
# client registry (JSON), so make must not hand this one to the programs it runs.
unexport CLIENTS
SEED ?= 20261129
# make chaos kills every 5 s unless KILL_EVERY is given (make demo's default is 0: no kills).
CHAOS_KILL_EVERY = $(if $(filter file,$(origin KILL_EVERY)),5,$(KILL_EVERY))
# make chaos submits 400 orders unless ORDERS is given: a run must outlast its third outage slot
# (about 90 s), and 200 orders can settle sooner than that.
CHAOS_ORDERS = $(if $(filter file,$(origin ORDERS)),400,$(ORDERS))
CONCURRENCY ?= 32
BENCH_PROCESSES ?= 1,2,3
SWEEP_SIZES ?= 1000,10000,100000
PEERS ?= durabletask,dbos
HARD_DOWN_ORDERS ?= 10
CPU_PAIRS ?= 3
SDK_CALLS ?= 300

.PHONY: demo test lint typecheck doctor pytest worker-test setup clean system-deps demo-deps fresh-check model-check

# What the machine must have, checked (Debian packages installed, as root) before anything else runs:
# scripts/prerequisites.sh says each missing one in one line with the command that fixes it.
PREREQUISITES = PYTHON="$(PYTHON)" PYTHON312="$(PYTHON312)" PYTHON313="$(PYTHON313)" bash scripts/prerequisites.sh
system-deps:
	@$(PREREQUISITES) test

demo-deps:
	@$(PREREQUISITES) demo

$(VENV)/.installed: requirements.txt requirements-client.txt requirements-dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

setup: $(VENV)/.installed node_modules/.installed

$(WORKER_VENV)/.installed: requirements.txt requirements-client.txt requirements-worker.txt
	@test -n "$(PYTHON313)" || { echo "make worker-test needs Python 3.13: pyenv install 3.13 (or apt-get install python3.13), or PYTHON313=/path/to/python3.13" >&2; exit 1; }
	$(PYTHON313) -m venv $(WORKER_VENV)
	$(WORKER_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(WORKER_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-worker.txt
	touch $@

$(INFRA_VENV)/.installed: requirements-infra.txt
	$(PYTHON) -m venv $(INFRA_VENV)
	$(INFRA_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(INFRA_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-infra.txt
	touch $@

demo: demo-deps setup
	$(PY) -m demo.run --orders $(ORDERS) --processes $(PROCESSES) --kill-every $(KILL_EVERY) \
		$(if $(filter 1 yes true,$(KEEP)),--keep)

# orderflow demo --azure (orderflow_client.cli_demo, demo.azure), run as a module so that the checkout's
# demo package is importable: the deployment's settings come from azd's environment (.azure/<env>/.env),
# its identity from the deployer's sign-in (azd auth login or az login).
.PHONY: demo-azure
demo-azure: setup
	$(PY) -m orderflow_client.cli demo --azure --orders $(ORDERS) $(if $(AZD_ENV),--environment $(AZD_ENV)) \
		--report demo-azure-report.json

.PHONY: chaos
chaos: demo-deps setup
	$(PY) -m demo.chaos --orders $(CHAOS_ORDERS) --processes $(PROCESSES) --kill-every $(CHAOS_KILL_EVERY) \
		--duplicate-share $(DUPLICATE_SHARE) --late-share $(LATE_SHARE) --pause-every $(PAUSE_EVERY) \
		--outage-every $(OUTAGE_EVERY) --long-share $(LONG_SHARE) --claim-kill-share $(CLAIM_KILL_SHARE) \
		$(if $(filter 0,$(SKEW)),--no-skew,--skew) --clients $(CLIENTS) --seed $(SEED)

.PHONY: soak
soak: demo-deps setup
	$(PY) -m demo.chaos --orders $(SOAK_ORDERS) --processes 3 --kill-every 5 --duplicate-share 0.05 \
		--late-share 0.03 --pause-every 30 --outage-every 30 --long-share 0.03 --claim-kill-share 0.02 \
		--skew --clients 3 --seed $(SEED) --report soak-report.json

.PHONY: bench
bench: demo-deps setup $(WORKER_VENV)/.installed
	$(PY) -m bench --orders $(ORDERS) --concurrency $(CONCURRENCY) --processes "$(BENCH_PROCESSES)" \
		--sweep-sizes "$(SWEEP_SIZES)" --peers "$(PEERS)" --hard-down-orders $(HARD_DOWN_ORDERS) \
		--cpu-pairs $(CPU_PAIRS) --sdk-calls $(SDK_CALLS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) scripts/system_installs.py tests

typecheck: setup
	$(VENV)/bin/mypy .

# The doctor scans what the deployment package holds: pyproject.toml's [tool.azure-functions-doctor]
# excludes what .funcignore leaves out. It runs from the project's venv, which VIRTUAL_ENV names as
# activating it would. The warnings it leaves, and why: docs/functions.md.
doctor: setup
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/azure-functions-doctor --path . --verbose

# Two pytest-xdist workers, each with its own emulators on free ports; the tests that run devhost
# processes under a deadline share one group, so they never compete with each other for the cores.
PYTEST_WORKERS ?= 2

pytest: system-deps setup $(INFRA_VENV)/.installed $(WORKER_VENV)/.installed
	$(VENV)/bin/pytest -n $(PYTEST_WORKERS) --dist loadgroup -rfEs

$(PY312_VENV)/.installed: requirements.txt
	@test -n "$(PYTHON312)" || { echo "make worker-test needs Python 3.12: pyenv install 3.12 (or apt-get install python3.12), or PYTHON312=/path/to/python3.12" >&2; exit 1; }
	$(PYTHON312) -m venv $(PY312_VENV)
	$(PY312_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

worker-test: system-deps $(WORKER_VENV)/.installed $(PY312_VENV)/.installed $(VENV)/.installed
	$(WORKER_VENV)/bin/python -m pytest -p no:cacheprovider tests/worker

test: system-deps lint typecheck doctor pytest worker-test

# The protocol's model searched at a larger bound than make test's (tests/model); docs/model.md.
model-check: system-deps setup
	@bash scripts/model-check.sh

# make test in a fresh clone of the current commit (committed work only), in a temporary folder, as CI
# runs it; the folder is removed when it passes and kept for reading when it fails.
fresh-check:
	@bash scripts/fresh-check.sh

clean:
	rm -rf $(VENV) $(WORKER_VENV) $(PY312_VENV) $(INFRA_VENV) node_modules .data .run .mypy_cache .ruff_cache .pytest_cache
