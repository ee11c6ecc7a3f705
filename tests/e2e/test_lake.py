"""Source → setup → stream → Spark apply → Iceberg, compared row for row with an independent reader (pyiceberg)."""

from __future__ import annotations

import os
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import airflow_connector, lake_rows, lake_snapshot_id, run_apply, run_dag, unique

pytestmark = pytest.mark.timeout(900)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def lake_connector(tmp_path: Path, database: str, kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    name = unique("lake")
    env = airflow_connector(tmp_path, name, database, kafka_bootstrap, "skipped.operations: none", "walflow.lake.changelog: true")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return {"name": name, "dsn": database}


def source_rows(dsn: str, table: str) -> dict[Any, dict[str, Any]]:
    with psycopg.connect(dsn) as conn:
        cur = conn.execute(f"SELECT * FROM {table}")
        cols = [d.name for d in cur.description]
        return {row[0]: dict(zip(cols, row)) for row in cur.fetchall()}


def assert_lake_equals_source(name: str, dsn: str, table: str) -> None:
    source = source_rows(dsn, table)
    lake = {r["id"]: r for r in lake_rows(name, f"public__{table}")}
    assert set(lake) == set(source), f"{table}: keys differ: lake-only {set(lake) - set(source)}, source-only {set(source) - set(lake)}"
    for key, row in source.items():
        for column, value in row.items():
            assert lake[key][column] == value, f"{table}[{key}].{column}: lake {lake[key][column]!r} != source {value!r}"


def assert_changelog_complete(name: str, table: str) -> None:
    """The changelog holds each event of the topic exactly once (no gap, no duplicate after reruns)."""
    from tests.support import read_topic

    events = [(r.partition, r.offset) for r in read_topic(f"{name}.public.{table}") if r.value is not None]
    logged = sorted((r["_walflow_partition"], r["_walflow_offset"]) for r in lake_rows(name, f"public__{table}__changelog"))
    assert logged == sorted(events), f"changelog of {table}: {len(logged)} rows for {len(events)} events"


BIG = "(SELECT string_agg(md5(i::text || 'x'), '') FROM generate_series(1, 400) i)"


def test_workload_reaches_the_lake_exactly(lake_connector: dict[str, str]) -> None:
    name, dsn = lake_connector["name"], lake_connector["dsn"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, balance numeric(12,2), opened date, seen timestamptz, doc text)")
        conn.execute("CREATE TABLE events (id bigint PRIMARY KEY, kind text, at timestamp)")
        conn.execute("INSERT INTO accounts SELECT g, 'o' || g, g * 1.5, date '2020-01-01' + g, now(), NULL FROM generate_series(1, 300) g")
        conn.execute("INSERT INTO events SELECT g, 'k', timestamp '2024-01-01' + g * interval '1 minute' FROM generate_series(1, 50) g")
    run_dag(f"{name}__setup")  # initial snapshot
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE accounts SET balance = balance + 10 WHERE id % 3 = 0")
        conn.execute("DELETE FROM accounts WHERE id % 7 = 0")
        conn.execute("INSERT INTO accounts SELECT g, 'new' || g, 0, NULL, NULL, NULL FROM generate_series(301, 330) g")
        conn.execute("UPDATE accounts SET id = id + 1000 WHERE id IN (1, 2, 3)")  # key changes
        conn.execute(f"UPDATE accounts SET doc = {BIG} WHERE id = 10")
        conn.execute("UPDATE accounts SET owner = 'toasted row' WHERE id = 10")  # doc unchanged: TOAST placeholder
        conn.execute("ALTER TABLE accounts ADD COLUMN tier int DEFAULT 1")
        conn.execute("UPDATE accounts SET tier = 2 WHERE id = 11")
        conn.execute("TRUNCATE events")
        conn.execute("INSERT INTO events VALUES (100, 'after truncate', '2024-02-01')")
    run_dag(f"{name}__stream")  # stream + apply
    assert_lake_equals_source(name, dsn, "accounts")
    assert_lake_equals_source(name, dsn, "events")
    lake = {r["id"]: r for r in lake_rows(name, "public__accounts")}
    assert len(lake[10]["doc"]) == 12800 and lake[10]["owner"] == "toasted row"
    assert lake[11]["tier"] == 2 and lake[1003]["_walflow_op"] == "c"
    assert isinstance(lake[5]["balance"], Decimal)
    assert_changelog_complete(name, "accounts")
    history = sorted((r for r in lake_rows(name, "public__accounts__changelog") if r["id"] == 10), key=lambda r: r["_walflow_offset"])
    assert [r["_walflow_op"] for r in history] == ["r", "u", "u"] and history[-1]["owner"] == "toasted row"

    # `walflow status` sees the slot, the last batch and the lake's commits
    from walflow.cli import render, status

    report = status(name, dsn=dsn)
    assert report["source"]["exists"] and report["source"]["last_batch"]["events"] > 0
    lake_tables = {t["table"]: t for t in report["lake"]["tables"]}
    assert lake_tables[f"{name}.public__accounts"]["rows"] == len(source_rows(dsn, "accounts"))
    assert lake_tables[f"{name}.public__accounts"]["offsets"]
    assert "retained WAL" in render(report)

    # a second apply with no new events changes nothing
    before = lake_snapshot_id(name, "public__accounts")
    run_dag(f"{name}__stream")
    assert lake_snapshot_id(name, "public__accounts") == before

    # the example downstream DAG reads the table with pyiceberg
    from airflow.dag_processing.dagbag import DagBag

    consumer = DagBag(dag_folder=str(ROOT / "dags" / "example_lake_consumer.py")).dags["example_lake_consumer"]
    run = consumer.test(run_conf={"namespace": name, "table": "public__accounts"})
    assert run.state == "success"


def test_killed_spark_job_leaves_the_lake_consistent(lake_connector: dict[str, str]) -> None:
    from walflow.config import resolve

    name, dsn = lake_connector["name"], lake_connector["dsn"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, balance numeric(12,2), opened date, seen timestamptz, doc text)")
        conn.execute("INSERT INTO accounts SELECT g, 'o' || g, g, NULL, NULL, NULL FROM generate_series(1, 2000) g")
    run_dag(f"{name}__setup")
    config = resolve(name)
    for round_, delay in enumerate((6.0, 9.0, 12.0)):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE accounts SET balance = balance + 1 WHERE id %% 5 = %s" % round_)
            conn.execute("DELETE FROM accounts WHERE id %% 97 = %s" % round_)
        from tests.support import stream as stream_batch

        stream_batch(config, dsn)
        run_apply(config, None, "--changelog", kill_after=delay)
    result = run_apply(config, None, "--changelog")
    assert result is not None
    assert result.returncode == 0, result.stderr[-3000:]
    assert_lake_equals_source(name, dsn, "accounts")
    assert_changelog_complete(name, "accounts")


def test_pgbench_workload_reaches_the_lake(lake_connector: dict[str, str]) -> None:
    """pgbench's own schema and transactions (a workload nobody here wrote), including the key-less history table."""
    name, dsn = lake_connector["name"], lake_connector["dsn"]
    params = dict(p.split("=", 1) for p in dsn.split())
    bindir = Path(os.environ.get("WALFLOW_PG_BINDIR", ""))
    pgbench = str(bindir / "pgbench") if (bindir / "pgbench").exists() else "pgbench"
    conn_args = ["-h", params["host"], "-p", params["port"], "-U", params["user"], params["dbname"]]
    subprocess.run([pgbench, "-i", "-s", "1", "-q", *conn_args], check=True, capture_output=True)
    run_dag(f"{name}__setup")  # initial snapshot of 100,000 accounts
    subprocess.run([pgbench, "-c", "4", "-j", "2", "-t", "250", "-n", *conn_args], check=True, capture_output=True)
    run_dag(f"{name}__stream")
    with psycopg.connect(dsn) as conn:
        for table, key in (("pgbench_accounts", "aid"), ("pgbench_branches", "bid"), ("pgbench_tellers", "tid")):
            cur = conn.execute(f"SELECT * FROM {table}")
            cols = [d.name for d in cur.description]
            source = {row[cols.index(key)]: dict(zip(cols, row)) for row in cur.fetchall()}
            lake = {r[key]: {c: r[c] for c in cols} for r in lake_rows(name, f"public__{table}")}
            assert len(lake) == len(source), f"{table}: lake has {len(lake)} rows, source {len(source)}"
            different = [k for k in source if lake.get(k) != source[k]]
            assert not different, f"{table}: {len(different)} rows differ, e.g. {different[0]}: lake {lake.get(different[0])} source {source[different[0]]}"
        cur = conn.execute("SELECT tid, bid, aid, delta, mtime, filler FROM pgbench_history")
        source_history = sorted(cur.fetchall())
    assert len(source_history) == 1000
    lake_history = sorted(tuple(r[c] for c in ("tid", "bid", "aid", "delta", "mtime", "filler")) for r in lake_rows(name, "public__pgbench_history"))
    assert lake_history == source_history
