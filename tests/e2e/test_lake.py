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
    """The job SIGKILLed once at each of its fault points (a different batch of changes each time), then one clean
    run: the table and its changelog are what one clean run would have made."""
    from walflow.config import resolve

    from tests.support import run_apply_fault
    from tests.support import stream as stream_batch

    name, dsn = lake_connector["name"], lake_connector["dsn"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, balance numeric(12,2), opened date, seen timestamptz, doc text)")
        conn.execute("INSERT INTO accounts SELECT g, 'o' || g, g, NULL, NULL, NULL FROM generate_series(1, 2000) g")
    run_dag(f"{name}__setup")
    config = resolve(name)
    rounds = [
        ("after_read", ["UPDATE accounts SET balance = balance + 1 WHERE id % 5 = 0"]),
        ("after_ddl", ["DELETE FROM accounts WHERE id % 97 = 1"]),  # the first run that gets this far creates the table
        ("after_commit", ["UPDATE accounts SET owner = owner || '+' WHERE id % 7 = 2"]),
        ("after_changelog", ["ALTER TABLE accounts ADD COLUMN tier int DEFAULT 3", "UPDATE accounts SET tier = 4 WHERE id % 11 = 0"]),
        ("after_truncate", ["UPDATE accounts SET balance = 0 WHERE id < 50", "TRUNCATE accounts", "INSERT INTO accounts SELECT g, 'n' || g, g, NULL, NULL, NULL, 5 FROM generate_series(1, 300) g"]),
    ]
    for point, statements in rounds:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)
        stream_batch(config, dsn)
        proc, fired = run_apply_fault(config, point, None, "--changelog")
        assert fired, f"the job was not killed at {point} (exit {proc.returncode}): {(proc.stdout + proc.stderr)[-3000:]}"
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


def _connector(tmp_path: Path, database: str, kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch, *settings: str) -> str:
    name = unique("lake")
    for key, value in airflow_connector(tmp_path, name, database, kafka_bootstrap, "skipped.operations: none", *settings).items():
        monkeypatch.setenv(key, value)
    return name


def _multiset(rows: list[dict[str, Any]], columns: list[str]) -> list[tuple[Any, ...]]:
    return sorted((tuple(r[c] for c in columns) for r in rows), key=repr)


def _parent_of(namespace: str, table: str, snapshot_id: int | None) -> int:
    from walflow.lake import read_hadoop_table

    static = read_hadoop_table(os.environ["WALFLOW_WAREHOUSE"], namespace, table)
    assert static is not None and snapshot_id is not None
    parent = static.snapshot_by_id(snapshot_id).parent_snapshot_id
    assert parent is not None
    return parent


def _spark_sql(config: Any, folder: Path, *statements: str) -> None:
    """Run Spark SQL statements, in order, against the lake's catalog, as another writer would."""
    from walflow.airflow.lake import APPLICATION

    from tests.support import apply_command

    command = apply_command(config)
    script = folder / "other_writer.py"
    script.write_text("import sys\nfrom pyspark.sql import SparkSession\nspark = SparkSession.builder.getOrCreate()\nfor s in sys.argv[1:]:\n    spark.sql(s).collect()\n")
    proc = subprocess.run([*command[: command.index(str(APPLICATION))], str(script), *statements], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_two_partitions_truncate_keyless_table_and_other_writers(
    tmp_path: Path, database: str, kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Topics of two partitions: truncates (null key, any partition) cut by source position, not by offsets; a
    table without key (REPLICA IDENTITY FULL, duplicate rows) takes updates and deletes; stale redelivered events
    never overwrite newer rows; a commit by another writer stops the job."""
    from confluent_kafka import Producer

    from walflow.config import resolve
    from walflow.lake import table_name

    from tests.support import read_topic

    name = _connector(tmp_path, database, kafka_bootstrap, monkeypatch, "topic.creation.default.partitions: 2")
    dsn = database
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, v text, n int)")
        conn.execute("INSERT INTO items SELECT g, 'r' || g, g FROM generate_series(1, 200) g")
        conn.execute("CREATE TABLE loose (a int, b text)")
        conn.execute("ALTER TABLE loose REPLICA IDENTITY FULL")
        conn.execute("INSERT INTO loose SELECT g % 10, 'x' FROM generate_series(1, 40) g")  # each row 4 times
    run_dag(f"{name}__setup")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE items SET v = 'a' || id WHERE id % 2 = 0")
        conn.execute("DELETE FROM items WHERE id % 9 = 0")
        conn.execute("TRUNCATE items")
        conn.execute("INSERT INTO items SELECT g, 'after' || g, g FROM generate_series(150, 260) g")
        conn.execute("UPDATE items SET v = 'b' || id WHERE id % 3 = 0")
        conn.execute("UPDATE items SET n = -n WHERE id % 4 = 0")
        conn.execute("DELETE FROM items WHERE id % 25 = 0")
        # one copy of a duplicated row changes, one goes, then the changed copy changes again
        conn.execute("UPDATE loose SET b = 'y' WHERE ctid = (SELECT min(ctid) FROM loose WHERE a = 1)")
        conn.execute("DELETE FROM loose WHERE ctid = (SELECT min(ctid) FROM loose WHERE a = 2)")
        conn.execute("UPDATE loose SET b = 'z' WHERE b = 'y'")
        conn.execute("DELETE FROM loose WHERE a = 3")
        conn.execute("INSERT INTO loose VALUES (1, 'x'), (11, NULL), (11, NULL)")
        conn.execute("UPDATE loose SET a = 12 WHERE a = 11")
    run_dag(f"{name}__stream")
    records = read_topic(f"{name}.public.items")
    assert {r.partition for r in records} == {0, 1}
    assert any(r.op == "t" for r in records)
    assert_lake_equals_source(name, dsn, "items")
    with psycopg.connect(dsn) as conn:
        source_loose = sorted(conn.execute("SELECT a, b FROM loose").fetchall(), key=repr)
    assert _multiset(lake_rows(name, "public__loose"), ["a", "b"]) == source_loose

    # stale events delivered again (older updates, and everything from before the truncate) change nothing
    stale = [r for r in records if r.raw_value is not None and (r.op in ("r", "d") or (r.op == "u" and r.payload["after"]["v"].startswith("a")))]
    stale += [r for r in records if r.op == "u" and r.payload["after"]["v"].startswith("b")][:20]
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for r in stale:
        producer.produce(r.topic, r.raw_value, r.raw_key, partition=r.partition)
    assert producer.flush(30) == 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE items SET v = 'c' || id WHERE id % 5 = 0")
    config = resolve(name)
    from tests.support import stream as stream_batch

    stream_batch(config, dsn)
    result = run_apply(config)
    assert result is not None and result.returncode == 0, result.stderr[-3000:]
    assert_lake_equals_source(name, dsn, "items")

    # another writer commits to a lake table: the job stops and says which table, which snapshot and what to do
    _spark_sql(config, tmp_path, f"DELETE FROM lake.`{name}`.public__items WHERE id = 151")
    foreign = lake_snapshot_id(name, "public__items")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE items SET v = 'd' WHERE id = 152")
    stream_batch(config, dsn)
    result = run_apply(config)
    assert result is not None and result.returncode != 0
    output = result.stdout + result.stderr
    assert "was changed by another writer" in output and f"snapshot {foreign}" in output and "rollback_to_snapshot" in output, output[-3000:]
    assert table_name("public", "items") in output

    # undone as the message says, then compacted (accepted) and every older snapshot expired: the history no longer
    # reaches a snapshot with offsets, so the job stops instead of reading the topic again from offset 0
    table = f"`{name}`.public__items"
    _spark_sql(
        config,
        tmp_path,
        f"CALL lake.system.rollback_to_snapshot('{table}', {_parent_of(name, 'public__items', foreign)})",
        f"CALL lake.system.rewrite_data_files(table => '{table}', options => map('rewrite-all', 'true'))",
        f"CALL lake.system.expire_snapshots(table => '{table}', older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)",
    )
    result = run_apply(config)
    assert result is not None and result.returncode != 0
    output = result.stdout + result.stderr
    assert "was expired" in output and "cannot tell which Kafka records it already applied" in output, output[-3000:]


def test_widening_is_applied_and_an_incompatible_change_stops_the_job(
    tmp_path: Path, database: str, kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """int→bigint, real→double and numeric(8,2)→numeric(12,2) mid-stream widen the lake columns in place (values
    beyond the old range included); int→text afterwards stops the job with a message naming table, column, types
    and the fix, and commits nothing."""
    from walflow.config import resolve
    from walflow.lake import read_hadoop_table

    from tests.support import stream as stream_batch

    name = _connector(tmp_path, database, kafka_bootstrap, monkeypatch)
    dsn = database
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE measures (id int PRIMARY KEY, n int, p numeric(8,2), f real, note text)")
        conn.execute("INSERT INTO measures SELECT g, g, g * 1.25, g / 4.0, 'm' FROM generate_series(1, 50) g")
    run_dag(f"{name}__setup")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE measures SET n = n + 1 WHERE id <= 10")
        conn.execute("ALTER TABLE measures ALTER COLUMN n TYPE bigint, ALTER COLUMN p TYPE numeric(12,2), ALTER COLUMN f TYPE double precision")
        conn.execute("UPDATE measures SET n = 5000000000 + id, p = 1234567890.12, f = 0.1 WHERE id % 5 = 0")
        conn.execute("INSERT INTO measures VALUES (51, 9000000000, 9999999999.99, 1e300, 'big')")
    run_dag(f"{name}__stream")
    assert_lake_equals_source(name, dsn, "measures")
    table = read_hadoop_table(os.environ["WALFLOW_WAREHOUSE"], name, "public__measures")
    types = {f.name: str(f.field_type) for f in table.schema().fields}
    assert types["n"] == "long" and types["p"] == "decimal(12, 2)" and types["f"] == "double", types

    before = lake_snapshot_id(name, "public__measures")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE measures ALTER COLUMN n TYPE text")
        conn.execute("UPDATE measures SET n = 'many' WHERE id = 1")
    config = resolve(name)
    stream_batch(config, dsn)
    result = run_apply(config)
    assert result is not None and result.returncode != 0
    output = result.stdout + result.stderr
    assert "public__measures" in output and "column 'n' changes from bigint to string" in output and "re-snapshot" in output, output[-3000:]
    assert lake_snapshot_id(name, "public__measures") == before


ODD_TABLE = 'Wé.i\'rd "ta`b le'
ODD_COLUMN = "va`l.ue 'x'"


def test_soft_deletes_and_odd_names(tmp_path: Path, database: str, kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``walflow.lake.delete.mode: soft`` flags deleted and truncated rows instead of removing them, on a table and a
    column whose names hold quotes, a backquote, a dot, a space and non-ASCII letters."""
    from psycopg import sql

    from walflow.lake import table_name

    name = _connector(tmp_path, database, kafka_bootstrap, monkeypatch, "walflow.lake.delete.mode: soft")
    dsn = database
    table, column = sql.Identifier(ODD_TABLE), sql.Identifier(ODD_COLUMN)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, {} text, ünï int)").format(table, column))
        conn.execute(sql.SQL("INSERT INTO {} SELECT g, 'v''' || g, g FROM generate_series(1, 40) g").format(table))
    run_dag(f"{name}__setup")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("UPDATE {} SET {} = 'changed \\ `x`' WHERE id % 3 = 0").format(table, column))
        conn.execute(sql.SQL("DELETE FROM {} WHERE id % 4 = 0").format(table))
        conn.execute(sql.SQL("TRUNCATE {}").format(table))
        conn.execute(sql.SQL("INSERT INTO {} SELECT g, 'again' || g, -g FROM generate_series(30, 60) g").format(table))
        conn.execute(sql.SQL("DELETE FROM {} WHERE id % 7 = 0").format(table))
        conn.execute(sql.SQL("UPDATE {} SET ünï = 0 WHERE id = 31").format(table))
    run_dag(f"{name}__stream")
    with psycopg.connect(dsn) as conn:
        source = {r[0]: (r[1], r[2]) for r in conn.execute(sql.SQL("SELECT id, {}, ünï FROM {}").format(column, table)).fetchall()}
    lake_name = table_name("public", ODD_TABLE)
    assert lake_name != "public__" + ODD_TABLE.lower()
    rows = {r["id"]: r for r in lake_rows(name, lake_name)}
    live = {k: (r[ODD_COLUMN], r["ünï"]) for k, r in rows.items() if not r["_walflow_deleted"]}
    assert live == source
    deleted = {k: r for k, r in rows.items() if r["_walflow_deleted"]}
    # every row the truncate removed is kept, flagged, with the truncate as its last operation
    assert {k for k, r in deleted.items() if r["_walflow_op"] == "t"} == set(range(1, 30)) - {k for k in range(1, 30) if k % 4 == 0}
    assert {k for k, r in deleted.items() if r["_walflow_op"] == "d"} == {k for k in range(30, 61) if k % 7 == 0} | {k for k in range(1, 30) if k % 4 == 0}
    assert rows[33][ODD_COLUMN] == "again33" and rows[27]["_walflow_deleted"] and rows[27][ODD_COLUMN] == "changed \\ `x`"


def test_schemaless_records_reach_the_lake(tmp_path: Path, database: str, kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``value.converter.schemas.enable: false`` (and keys without schema): the lake types new columns from the JSON
    values (README: numbers, booleans, strings; objects and arrays as JSON text; semantic types as their JSON form),
    then keeps the lake table's types for later records."""
    import datetime as dt
    import json

    from walflow.config import resolve
    from walflow.lake import read_hadoop_table

    from tests.support import stream as stream_batch

    name = _connector(
        tmp_path, database, kafka_bootstrap, monkeypatch,
        "value.converter.schemas.enable: false", "key.converter.schemas.enable: false", "decimal.handling.mode: string",
    )
    dsn = database
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE things (id int PRIMARY KEY, name text, qty bigint, price numeric(10,2), ratio double precision, ok boolean, "
            "meta jsonb, tags text[], at timestamp)"
        )
        conn.execute(
            "INSERT INTO things SELECT g, 'n' || g, g * 1000, g * 1.5, g / 4.0, g % 2 = 0, jsonb_build_object('g', g), "
            "ARRAY['a', 'b' || g], timestamp '2024-01-01' + g * interval '1 hour' FROM generate_series(1, 30) g"
        )
    run_dag(f"{name}__setup")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE things SET name = 'changed', ratio = 2 WHERE id % 3 = 0")
        conn.execute("DELETE FROM things WHERE id % 7 = 0")
        conn.execute("INSERT INTO things (id) VALUES (100)")
        conn.execute("ALTER TABLE things ADD COLUMN extra int")
        conn.execute("UPDATE things SET extra = id WHERE id < 5")
    run_dag(f"{name}__stream")

    def check() -> None:
        with psycopg.connect(dsn) as conn:
            cur = conn.execute("SELECT * FROM things")
            cols = [d.name for d in cur.description]
            source = {r[0]: dict(zip(cols, r)) for r in cur.fetchall()}
        lake = {r["id"]: r for r in lake_rows(name, "public__things")}
        assert set(lake) == set(source)
        epoch = dt.datetime(1970, 1, 1)
        for key, row in source.items():
            got = lake[key]
            assert (got["name"], got["qty"], got["ok"], got["extra"]) == (row["name"], row["qty"], row["ok"], row["extra"])
            assert got["price"] == (None if row["price"] is None else str(row["price"]))
            assert got["ratio"] == row["ratio"]
            assert (None if got["meta"] is None else json.loads(got["meta"])) == row["meta"]
            assert (None if got["tags"] is None else json.loads(got["tags"])) == row["tags"]
            assert got["at"] == (None if row["at"] is None else (row["at"] - epoch) // dt.timedelta(microseconds=1))

    check()
    table = read_hadoop_table(os.environ["WALFLOW_WAREHOUSE"], name, "public__things")
    types = {f.name: str(f.field_type) for f in table.schema().fields}
    assert {k: types[k] for k in ("id", "name", "qty", "price", "ratio", "ok", "meta", "tags", "at", "extra")} == {
        "id": "long", "name": "string", "qty": "long", "price": "string", "ratio": "double", "ok": "boolean",
        "meta": "string", "tags": "string", "at": "long", "extra": "long",
    }
    # later records are typed by the lake table (ratio stays double even when every new value is integral)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE things SET ratio = 7, extra = 1 WHERE id = 1")
    config = resolve(name)
    stream_batch(config, dsn)
    result = run_apply(config)
    assert result is not None and result.returncode == 0, result.stderr[-3000:]
    check()
