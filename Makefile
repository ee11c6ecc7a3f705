# walflow: the two commands are `make demo` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
ENV := source .walflow/env.sh &&

.PHONY: venv up down status demo test test-unit test-integration test-e2e test-faults bench-stream bench-snapshot bench-apply clean

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r requirements.txt
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

# make test runs two lanes of tests at once (most of their time is spent waiting on PostgreSQL, the broker, Spark
# and Airflow, not computing), then alone the fault scenarios that restart PostgreSQL or the broker. Lane B holds
# every test that uses Airflow's SQLite metadata database, lane A none; the rest is split to even their times.
# Each lane's output is printed when it ends.
LANE_B := tests/e2e tests/integration/test_lake.py tests/integration/test_incremental.py tests/integration/test_roles.py tests/integration/test_setup.py
LANE_A := tests/unit tests/integration tests/faults $(patsubst %,--ignore=%,$(filter tests/integration/%,$(LANE_B)))
PYTEST_ARGS ?=
PYTEST := python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

test: up
	@mkdir -p .walflow/test-logs
	@$(ENV) started=$$(date +%s); \
	  ( $(PYTEST) $(LANE_A) -m "not disruptive" > .walflow/test-logs/lane-a.log 2>&1; echo $$? > .walflow/test-logs/lane-a.rc ) & \
	  ( $(PYTEST) $(LANE_B) > .walflow/test-logs/lane-b.log 2>&1; echo $$? > .walflow/test-logs/lane-b.rc ) & \
	  wait; \
	  for lane in a b; do echo "== lane $$lane"; cat .walflow/test-logs/lane-$$lane.log; done; \
	  echo "== fault scenarios that restart a shared service"; \
	  $(PYTEST) tests/faults -m disruptive; last=$$?; \
	  echo "make test: $$(( $$(date +%s) - started )) s of tests"; \
	  [ "$$(cat .walflow/test-logs/lane-a.rc)" = 0 ] && [ "$$(cat .walflow/test-logs/lane-b.rc)" = 0 ] && [ $$last = 0 ]

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

clean: down
	rm -rf .walflow
