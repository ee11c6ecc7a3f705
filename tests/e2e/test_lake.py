"""Source → setup DAG → stream DAG (stream task, then the Spark job through SparkSubmitOperator) → Iceberg, compared
row for row with an independent reader (pyiceberg).

The lake job's behaviours are tested in the tests' own Spark session in ``tests/integration/test_lake*.py``; this is
the end-to-end run through Airflow and spark-submit.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import airflow_connector, lake_rows, run_dag, unique

pytestmark = pytest.mark.timeout(900)
ROOT = Path(__file__).resolve().parents[2]


#: the lake catalog's credential, in its Airflow Connection only
CATALOG_SECRET = "catalog-token-" + uuid.uuid4().hex


@pytest.fixture()
def lake_connector(
    tmp_path: Path, database: str, kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """A connector whose lake catalog (the warehouse's Hadoop catalog) is given by an Airflow Connection of walflow's
    own type, ``walflow_iceberg``, as its form saves it (the catalog type and warehouse fields, one more property in
    the extras) with a credential, as a REST catalog's would be: the job gets them through its environment."""
    name = unique("lake")
    env = airflow_connector(
        tmp_path,
        name,
        database,
        kafka_bootstrap,
        "skipped.operations: none",
        "walflow.lake.changelog: true",
        "walflow.lake.maintain.snapshot.retention.hours: 0",
        f"walflow.lake.catalog.conn.id: {name}_catalog",
    )
    form = {
        "extra__walflow_iceberg__catalog_type": "hadoop",
        "warehouse": os.environ["WALFLOW_WAREHOUSE"],
        "cache-enabled": "false",
    }
    catalog = {"conn_type": "walflow_iceberg", "password": CATALOG_SECRET, "extra": form}
    env[f"AIRFLOW_CONN_{name.upper()}_CATALOG"] = json.dumps(catalog)
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
    assert set(lake) == set(source), (
        f"{table}: keys differ: lake-only {set(lake) - set(source)}, source-only {set(source) - set(lake)}"
    )
    for key, row in source.items():
        for column, value in row.items():
            assert lake[key][column] == value, (
                f"{table}[{key}].{column}: lake {lake[key][column]!r} != source {value!r}"
            )


def assert_changelog_complete(name: str, table: str) -> None:
    """The changelog holds each event of the topic exactly once (no gap, no duplicate after reruns)."""
    from tests.support import read_topic

    events = [(r.partition, r.offset) for r in read_topic(f"{name}.public.{table}") if r.value is not None]
    logged = sorted(
        (r["_walflow_partition"], r["_walflow_offset"]) for r in lake_rows(name, f"public__{table}__changelog")
    )
    assert logged == sorted(events), f"changelog of {table}: {len(logged)} rows for {len(events)} events"


BIG = "(SELECT string_agg(md5(i::text || 'x'), '') FROM generate_series(1, 400) i)"


@pytest.mark.long
def test_workload_reaches_the_lake_exactly(lake_connector: dict[str, str], capfd: pytest.CaptureFixture[str]) -> None:
    name, dsn = lake_connector["name"], lake_connector["dsn"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, balance numeric(12,2), opened date,"
            " seen timestamptz, doc text)"
        )
        conn.execute("CREATE TABLE events (id bigint PRIMARY KEY, kind text, at timestamp)")
        conn.execute(
            "INSERT INTO accounts SELECT g, 'o' || g, g * 1.5, date '2020-01-01' + g, now(),"
            " NULL FROM generate_series(1, 300) g"
        )
        conn.execute(
            "INSERT INTO events SELECT g, 'k', timestamp '2024-01-01' + g * interval '1 minute'"
            " FROM generate_series(1, 50) g"
        )
        # tables for migrations that change rows without change events (issue 45)
        conn.execute("CREATE TYPE mood AS ENUM ('sad', 'ok')")
        conn.execute("CREATE TABLE ledger (id int PRIMARY KEY, amount int, note varchar(20), feel mood)")
        conn.execute(
            "INSERT INTO ledger SELECT g, g * 10, 'n' || g, CASE WHEN g % 2 = 0 THEN 'sad' ELSE 'ok' END::mood FROM"
            " generate_series(1, 40) g"
        )
        conn.execute("CREATE TABLE refresh (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO refresh SELECT g, 'old' || g FROM generate_series(1, 10) g")
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
        # a value Spark cannot hold: clamped, its exact text kept (docs/lake.md, "Value representations")
        conn.execute("CREATE TABLE ranges (id int PRIMARY KEY, valid_to timestamp)")
        conn.execute("INSERT INTO ranges VALUES (1, 'infinity'), (2, '2024-01-01')")
        # migrations no event carries: a rewrite with USING (every key changes too), an enum value renamed, a full
        # refresh (the table dropped and created again in one transaction with its rows): the stream re-reads those
        # tables and the lake sweeps what it held from before, in this one DAG run
        conn.execute(
            "ALTER TABLE ledger ALTER COLUMN id TYPE bigint USING id * 1000, ALTER COLUMN note TYPE text USING"
            " upper(note)"
        )
        conn.execute("ALTER TYPE mood RENAME VALUE 'sad' TO 'unhappy'")
        conn.execute(
            "BEGIN; DROP TABLE refresh; CREATE TABLE refresh (id int PRIMARY KEY, v text); "
            "INSERT INTO refresh SELECT g, 'new' || g FROM generate_series(5, 15) g; COMMIT"
        )
    run_dag(f"{name}__stream")  # stream + apply
    assert_lake_equals_source(name, dsn, "accounts")
    assert_lake_equals_source(name, dsn, "events")
    assert_lake_equals_source(name, dsn, "ledger")
    assert_lake_equals_source(name, dsn, "refresh")
    lake = {r["id"]: r for r in lake_rows(name, "public__accounts")}
    assert len(lake[10]["doc"]) == 12800 and lake[10]["owner"] == "toasted row"
    assert lake[11]["tier"] == 2 and lake[1003]["_walflow_op"] == "c"
    assert isinstance(lake[5]["balance"], Decimal)
    assert_changelog_complete(name, "accounts")
    ranges = {r["id"]: (r["valid_to"], r["_walflow_overflow"]) for r in lake_rows(name, "public__ranges")}
    assert ranges == {
        1: (dt.datetime(9999, 12, 31, 23, 59, 59, 999999), [("valid_to", "infinity")]),
        2: (dt.datetime(2024, 1, 1), None),
    }
    history = sorted(
        (r for r in lake_rows(name, "public__accounts__changelog") if r["id"] == 10), key=lambda r: r["_walflow_offset"]
    )
    assert [r["_walflow_op"] for r in history] == ["r", "u", "u"] and history[-1]["owner"] == "toasted row"

    # `walflow status` sees the slot, the last batch and the lake's commits
    from walflow.admin.cli import render
    from walflow.airflow.status import status

    report = status(name, dsn=dsn)
    assert report["source"]["exists"] and report["source"]["last_batch"]["events"] > 0
    lake_tables = {t["table"]: t for t in report["lake"]["tables"]}
    assert lake_tables[f"{name}.public__accounts"]["rows"] == len(source_rows(dsn, "accounts"))
    assert lake_tables[f"{name}.public__accounts"]["offsets"]
    # the stream DAG applied what it streamed: nothing between the lake's offsets and the topic's end
    assert lake_tables[f"{name}.public__accounts"]["records_behind"] == 0, lake_tables
    assert report["state"] == "flowing", report["problems"]
    assert "retained WAL" in render(report)

    # merge-on-read: every apply into a table with rows adds a delete file and a data file
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE accounts SET balance = balance + 2 WHERE id % 5 = 0")
        conn.execute("DELETE FROM accounts WHERE id % 9 = 0")
    run_dag(f"{name}__stream")
    assert_lake_equals_source(name, dsn, "accounts")

    # the maintain DAG: fewer data and delete files, as many snapshots as the next apply needs, the same rows
    files_before = _files(name, "public__accounts")
    assert files_before["delete"] >= 1 and files_before["data"] >= 2, files_before
    run_dag(f"{name}__maintain")
    files_after = _files(name, "public__accounts")
    assert files_after["data"] < files_before["data"] and files_after["delete"] == 0, (files_before, files_after)
    assert_lake_equals_source(name, dsn, "accounts")

    # (that an apply after maintenance reads its offsets from maintenance's snapshot and commits nothing new is
    # tests/integration/test_lake_maintain.py's, in the tests' own Spark session)
    assert_changelog_complete(name, "accounts")

    # the example downstream DAG reads the table with pyiceberg
    from airflow.dag_processing.dagbag import DagBag

    consumer = DagBag(dag_folder=str(ROOT / "dags" / "example_lake_consumer.py")).dags["example_lake_consumer"]
    run = consumer.test(run_conf={"connector": name, "table": "public__accounts"})
    assert run.state == "success"

    # the catalog's credential reached the jobs through their environment only: in no task log, no command line
    logs = capfd.readouterr()
    text = logs.out + logs.err
    for path in (Path(os.environ["AIRFLOW_HOME"]) / "logs").glob(f"**/*{name}*/**/*"):
        if path.is_file():
            text += path.read_text(errors="replace")
    assert "Spark-Submit cmd" in text or "spark-submit" in text  # the apply tasks' logs were read
    assert CATALOG_SECRET not in text


def _files(name: str, table: str) -> dict[str, int]:
    """The data and delete files the table's current snapshot reads (pyiceberg's ``files`` metadata table)."""
    import os

    from walflow.lake import read_hadoop_table

    files = (
        read_hadoop_table(os.environ["WALFLOW_WAREHOUSE"], name, table).inspect.files().column("content").to_pylist()
    )
    return {"data": files.count(0), "delete": files.count(1) + files.count(2)}


def test_a_record_the_lake_cannot_apply_fails_at_once_and_is_accepted_on_purpose(
    lake_connector: dict[str, str], capfd: pytest.CaptureFixture[str]
) -> None:
    """A LakeError cannot pass by itself: the apply task fails at once (not retried by the stream DAG's retries),
    with the job's own message leading its log; the documented way past it (walflow.lake.accept.records) reaches the
    job."""
    import os

    from confluent_kafka import Producer

    from tests.support import bootstrap
    from walflow.airflow.dag_factory import build_connector_dags

    name, dsn = lake_connector["name"], lake_connector["dsn"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 20) g")
    run_dag(f"{name}__setup")
    topic = f"{name}.public.t"
    producer = Producer({"bootstrap.servers": bootstrap()})
    delivered: list[int] = []
    producer.produce(
        topic,
        b"this is not a change event",
        b"not a key",
        partition=0,
        on_delivery=lambda err, msg: delivered.append(msg.offset()),
    )
    producer.flush(10)
    (offset,) = delivered
    run = build_connector_dags()[f"{name}__stream"].test()
    assert run.state == "failed"
    apply = run.get_task_instance("apply_to_lake")
    assert apply.state == "failed" and apply.try_number == 1, (apply.state, apply.try_number)
    assert run.get_task_instance("stream").state == "success"
    log = capfd.readouterr()
    text = log.out + log.err
    assert "not retried: this needs a fix first" in text and "walflow.lake.accept.records" in text
    assert " INFO SparkContext" not in text  # Spark's start-up chatter stays out of the task log (WARN)
    # accepted on purpose: the key reaches the job in its settings argument (that the job then skips that one record
    # and the lake equals the source is tests/integration/test_lake.py's, in the tests' own Spark session)
    from walflow.lake.settings import LakeSettings

    path = Path(os.environ["WALFLOW_CONNECTORS_DIR"]) / f"{name}.yaml"
    path.write_text(path.read_text() + f"\nwalflow.lake.accept.records: {topic}:0:{offset}\n")
    args = build_connector_dags()[f"{name}__stream"].get_task("apply_to_lake").application_args
    assert LakeSettings.from_argument(args[args.index("--settings") + 1]).accepted(topic) == {(0, offset)}
