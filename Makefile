# goclaw — `make run` sets everything up and serves; `make test` runs the whole suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.txt | cksum | cut -d' ' -f1)

.PHONY: run test bench check bytecode browser sandbox-deps docker-deps conformance-deps help soak

help:
	@echo "make run    - install (venv + requirements), set up embedded PostgreSQL, migrate, create admin, serve"
	@echo "make test   - make check, then run the whole test suite"
	@echo "make bench  - run the benchmarks (results in benchmarks/results/)"
	@echo "make check  - Django system checks, migration drift check, import-linter contracts (.importlinter)"
	@echo "make bytecode - compile goclaw's modules once (run, test and bench do it first)"
	@echo "make soak   - soak with faults, two replicas, WebSocket fan-out (~25 min; docs/soak-and-faults.md)"

$(STAMP): requirements.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	@rm -f $(VENV)/.installed-*; touch $@

run: $(STAMP) bytecode sandbox-deps
	$(PY) manage.py up

# Every process an agent starts runs in bubblewrap (the default sandbox profile); as root, install it once.
sandbox-deps:
	@command -v bwrap >/dev/null 2>&1 && command -v prlimit >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's bubblewrap (the default sandbox)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap util-linux >/dev/null; \
	  else echo "bubblewrap is missing: install your distribution's bubblewrap package (the default sandbox needs it)" >&2; exit 1; fi; }

# The docker backend's tests start their own engine (Debian's docker.io) and build their image from busybox-static.
docker-deps:
	@command -v dockerd >/dev/null 2>&1 && [ -x /bin/busybox ] && [ -x /bin/bash-static ] || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's docker.io, busybox-static and bash-static for the docker sandbox tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io busybox-static bash-static >/dev/null; \
	  else echo "dockerd is missing: install Debian's docker.io, busybox-static and bash-static (needed by the docker sandbox tests)" >&2; exit 1; fi; }

# The approval-queue browser test drives Debian's chromium through Playwright (no browser download).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium for the browser test"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is missing: install Debian's chromium package (needed by the browser test)" >&2; exit 1; fi; }

# The official MCP conformance suite (tools/conformance, pinned by its package-lock.json; docs/mcp-conformance.md),
# with the Node >= 22 it needs (the npm package `node`): `npm ci` again only when the lock changes.
CONFORMANCE := tools/conformance
CONFORMANCE_STAMP := $(CONFORMANCE)/node_modules/.installed-$(shell cksum < $(CONFORMANCE)/package-lock.json | cut -d' ' -f1)

$(CONFORMANCE_STAMP): $(CONFORMANCE)/package-lock.json
	npm ci --prefix $(CONFORMANCE) --no-audit --no-fund
	@rm -f $(CONFORMANCE)/node_modules/.installed-*; touch $@

conformance-deps: $(CONFORMANCE_STAMP)

test: $(STAMP) bytecode check browser sandbox-deps docker-deps conformance-deps
	$(PY) -m pytest

# goclaw's own modules compiled once (incremental: up-to-date files are skipped). Python reads .pyc files even when
# PYTHONDONTWRITEBYTECODE is set (as on these machines), where it would otherwise compile every module in every process
# it starts: ~0.3 s of CPU each for `manage.py`, every server process and worker.
bytecode: $(STAMP)
	@$(PY) -m compileall -q -j 0 manage.py goclaw $(wildcard *_app) tests benchmarks

check: $(STAMP)
	$(PY) manage.py check
	$(PY) manage.py makemigrations --check --dry-run
	$(VENV)/bin/lint-imports --no-cache

bench: $(STAMP) bytecode
	$(PY) benchmarks/run_all.py

# Not part of `make test`: a 10-minute soak with faults, the two-replica checks (Redis db 9 on 127.0.0.1:6379) and the
# 1,000-client WebSocket fan-out; results in benchmarks/results/{soak,replicas,ws_fanout}.json (docs/soak-and-faults.md).
SOAK_ARGS ?= --faults
soak: $(STAMP) sandbox-deps
	$(PY) benchmarks/soak.py $(SOAK_ARGS)
	$(PY) benchmarks/bench_replicas.py
	$(PY) benchmarks/bench_ws_fanout.py
