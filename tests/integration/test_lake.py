"""The lake job's modules driven in the tests' own Spark session (no spark-submit): real PostgreSQL, broker, Spark
and Iceberg, the lake read back with an independent reader (pyiceberg).

The stream DAG's SparkSubmitOperator runs the same job end to end in ``tests/e2e/test_lake.py``; the SIGKILLed
job in ``tests/faults``.
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import apply_lake, connector, lake_rows, lake_snapshot_id, read_topic, setup, stream, unique
from walflow.errors import LakeHistoryError, LakeSchemaError, TopicMismatchError, UnappliableRecordError
from walflow.lake.hooks import POINTS, ApplyHooks
from walflow.lake.naming import table_name

pytestmark = [pytest.mark.timeout(900), pytest.mark.spark]


def source_rows(dsn: str, table: str, key: str = "id") -> dict[Any, dict[str, Any]]:
    with psycopg.connect(dsn) as conn:
        cur = conn.execute(f"SELECT * FROM {table}")
        cols = [d.name for d in cur.description]
        return {row[cols.index(key)]: dict(zip(cols, row)) for row in cur.fetchall()}


def assert_lake_equals_source(namespace: str, dsn: str, table: str, key: str = "id") -> None:
    source = source_rows(dsn, table, key)
    lake = {r[key]: r for r in lake_rows(namespace, f"public__{table}")}
    assert set(lake) == set(source), (
        f"{table}: keys differ: lake-only {set(lake) - set(source)}, source-only {set(source) - set(lake)}"
    )
    for k, row in source.items():
        for column, value in row.items():
            assert lake[k][column] == value, f"{table}[{k}].{column}: lake {lake[k][column]!r} != source {value!r}"


def assert_changelog_complete(namespace: str, topic: str, table: str) -> None:
    """The changelog holds each event of the topic exactly once (no gap, no duplicate after reruns)."""
    events = [(r.partition, r.offset) for r in read_topic(topic) if r.value is not None]
    logged = sorted(
        (r["_walflow_partition"], r["_walflow_offset"]) for r in lake_rows(namespace, f"public__{table}__changelog")
    )
    assert logged == sorted(events), f"changelog of {table}: {len(logged)} rows for {len(events)} events"


def new_connector(**overrides: Any) -> Any:
    return connector(unique("lake"), **{"skipped.operations": "none", **overrides})


class Crash(Exception):
    """Raised by :class:`CrashAt`: the job stops where it is, leaving the lake as a kill there would."""


class CrashAt(ApplyHooks):
    """Stops the job at one of its points. The lake's state on disk is then what a SIGKILL there leaves (the SIGKILL
    itself is tested through spark-submit in tests/faults)."""

    def __init__(self, point: str) -> None:
        self.point, self.fired = point, False

    def reached(self, point: str, table: str) -> None:
        if point == self.point and not self.fired:
            self.fired = True
            raise Crash(point)


@pytest.mark.long
def test_job_stopped_at_each_point_leaves_the_lake_consistent(spark: Any, database: str) -> None:
    """The job stopped once at each of its points (a different batch of changes each time), then one clean run:
    the table and its changelog are what one clean run would have made."""
    dsn = database
    config = new_connector(**{"walflow.lake.changelog": True})
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, balance numeric(12,2), opened date,"
            " seen timestamptz, doc text)"
        )
        conn.execute("INSERT INTO accounts SELECT g, 'o' || g, g, NULL, NULL, NULL FROM generate_series(1, 2000) g")
    setup(config, dsn)
    rounds = {
        "after_read": ["UPDATE accounts SET balance = balance + 1 WHERE id % 5 = 0"],
        "after_ddl": ["DELETE FROM accounts WHERE id % 97 = 1"],  # the first run that gets this far creates the table
        "after_commit": ["UPDATE accounts SET owner = owner || '+' WHERE id % 7 = 2"],
        "after_changelog": [
            "ALTER TABLE accounts ADD COLUMN tier int DEFAULT 3",
            "UPDATE accounts SET tier = 4 WHERE id % 11 = 0",
        ],
        "after_truncate": [
            "UPDATE accounts SET balance = 0 WHERE id < 50",
            "TRUNCATE accounts",
            "INSERT INTO accounts SELECT g, 'n' || g, g, NULL, NULL, NULL, 5 FROM generate_series(1, 300) g",
        ],
    }
    assert set(rounds) == set(POINTS)
    for point, statements in rounds.items():
        with psycopg.connect(dsn, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)
        stream(config, dsn)
        hooks = CrashAt(point)
        with pytest.raises(Crash):
            apply_lake(spark, config, hooks=hooks)
        assert hooks.fired
    apply_lake(spark, config)
    assert_lake_equals_source(config.topic_prefix, dsn, "accounts")
    assert_changelog_complete(config.topic_prefix, f"{config.topic_prefix}.public.accounts", "accounts")
    # and nothing new: nothing committed
    before = lake_snapshot_id(config.topic_prefix, "public__accounts")
    assert not any(r["committed"] for r in apply_lake(spark, config))
    assert lake_snapshot_id(config.topic_prefix, "public__accounts") == before


@pytest.mark.long
def test_pgbench_workload_reaches_the_lake(spark: Any, database: str) -> None:
    """pgbench's own schema and transactions (a workload nobody here wrote), including the key-less history table."""
    dsn = database
    config = new_connector()
    params = dict(p.split("=", 1) for p in dsn.split())
    bindir = Path(os.environ.get("WALFLOW_PG_BINDIR", ""))
    pgbench = str(bindir / "pgbench") if (bindir / "pgbench").exists() else "pgbench"
    conn_args = ["-h", params["host"], "-p", params["port"], "-U", params["user"], params["dbname"]]
    env = {**os.environ, "PGPASSWORD": params.get("password", "")}
    subprocess.run([pgbench, "-i", "-s", "1", "-q", *conn_args], check=True, capture_output=True, env=env)
    with psycopg.connect(dsn, autocommit=True) as conn:  # 10,000 of its 100,000 accounts are plenty here
        conn.execute("DELETE FROM pgbench_accounts WHERE aid > 10000")
    setup(config, dsn)  # initial snapshot
    subprocess.run(
        [pgbench, "-c", "4", "-j", "2", "-t", "250", "-n", *conn_args], check=True, capture_output=True, env=env
    )
    while stream(config, dsn).events:
        pass
    apply_lake(spark, config)
    name = config.topic_prefix
    with psycopg.connect(dsn) as conn:
        for table, key in (("pgbench_accounts", "aid"), ("pgbench_branches", "bid"), ("pgbench_tellers", "tid")):
            cur = conn.execute(f"SELECT * FROM {table}")
            cols = [d.name for d in cur.description]
            source = {row[cols.index(key)]: dict(zip(cols, row)) for row in cur.fetchall()}
            lake = {r[key]: {c: r[c] for c in cols} for r in lake_rows(name, f"public__{table}")}
            assert len(lake) == len(source), f"{table}: lake has {len(lake)} rows, source {len(source)}"
            different = [k for k in source if lake.get(k) != source[k]]
            assert not different, (
                f"{table}: {len(different)} rows differ, e.g. {different[0]}: lake {lake.get(different[0])} source"
                f" {source[different[0]]}"
            )
        source_history = sorted(
            conn.execute("SELECT tid, bid, aid, delta, mtime, filler FROM pgbench_history").fetchall()
        )
    assert len(source_history) == 1000
    lake_history = sorted(
        tuple(r[c] for c in ("tid", "bid", "aid", "delta", "mtime", "filler"))
        for r in lake_rows(name, "public__pgbench_history")
    )
    assert lake_history == source_history


def _multiset(rows: list[dict[str, Any]], columns: list[str]) -> list[tuple[Any, ...]]:
    return sorted((tuple(r[c] for c in columns) for r in rows), key=repr)


@pytest.mark.long
def test_two_partitions_truncate_keyless_table_and_other_writers(spark: Any, database: str) -> None:
    """Topics of two partitions: truncates (null key, any partition) cut by source position, not by offsets; a
    table without key (REPLICA IDENTITY FULL, duplicate rows) takes updates and deletes; stale redelivered events
    never overwrite newer rows; a commit by another writer stops the job; so does an expired history."""
    from confluent_kafka import Producer

    dsn = database
    config = new_connector(**{"topic.creation.default.partitions": 2})
    name = config.topic_prefix
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, v text, n int)")
        conn.execute("INSERT INTO items SELECT g, 'r' || g, g FROM generate_series(1, 200) g")
        conn.execute("CREATE TABLE loose (a int, b text)")
        conn.execute("ALTER TABLE loose REPLICA IDENTITY FULL")
        conn.execute("INSERT INTO loose SELECT g % 10, 'x' FROM generate_series(1, 40) g")  # each row 4 times
    setup(config, dsn)
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
    stream(config, dsn)
    apply_lake(spark, config)
    records = read_topic(f"{name}.public.items")
    assert {r.partition for r in records} == {0, 1}
    assert any(r.op == "t" for r in records)
    assert_lake_equals_source(name, dsn, "items")
    with psycopg.connect(dsn) as conn:
        source_loose = sorted(conn.execute("SELECT a, b FROM loose").fetchall(), key=repr)
    assert _multiset(lake_rows(name, "public__loose"), ["a", "b"]) == source_loose

    # stale events delivered again (older updates, and everything from before the truncate) change nothing
    stale = [
        r
        for r in records
        if r.raw_value is not None and (r.op in ("r", "d") or (r.op == "u" and r.payload["after"]["v"].startswith("a")))
    ]
    stale += [r for r in records if r.op == "u" and r.payload["after"]["v"].startswith("b")][:20]
    producer = Producer({"bootstrap.servers": os.environ["WALFLOW_KAFKA_BOOTSTRAP"]})
    for r in stale:
        producer.produce(r.topic, r.raw_value, r.raw_key, partition=r.partition)
    assert producer.flush(30) == 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE items SET v = 'c' || id WHERE id % 5 = 0")
    stream(config, dsn)
    apply_lake(spark, config)
    assert_lake_equals_source(name, dsn, "items")

    # another writer commits to a lake table: the job stops and says which table, which snapshot and what to do
    spark.sql(f"DELETE FROM lake.`{name}`.public__items WHERE id = 151").collect()
    foreign = lake_snapshot_id(name, "public__items")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE items SET v = 'd' WHERE id = 152")
    stream(config, dsn)
    with pytest.raises(LakeHistoryError) as refused:
        apply_lake(spark, config)
    message = str(refused.value)
    assert (
        "was changed by another writer" in message
        and f"snapshot {foreign}" in message
        and "rollback_to_snapshot" in message
    )
    assert table_name("public", "items") in message

    # undone as the message says, then compacted (accepted) and every older snapshot expired: the history no longer
    # reaches a snapshot with offsets, so the job stops instead of reading the topic again from offset 0
    table = f"`{name}`.public__items"
    parent = spark.sql(f"SELECT parent_id FROM lake.{table}.snapshots WHERE snapshot_id = {foreign}").collect()[0][0]
    for statement in (
        f"CALL lake.system.rollback_to_snapshot('{table}', {parent})",
        f"CALL lake.system.rewrite_data_files(table => '{table}', options => map('rewrite-all', 'true'))",
        f"CALL lake.system.expire_snapshots(table => '{table}',"
        " older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)",
    ):
        spark.sql(statement).collect()
    with pytest.raises(LakeHistoryError, match="was expired") as refused:
        apply_lake(spark, config)
    assert "cannot tell which Kafka records it already applied" in str(refused.value)


@pytest.mark.long
def test_merge_reads_only_the_rows_the_batch_can_match(
    spark: Any, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small batch narrows the MERGE's target to its keys (their values for one integral key, their hashes for
    text, composite and nullable keys); a large one merges against the whole table (here: every batch counts as
    large in the second round). Both leave the lake equal to the source: null key parts still match, TOASTed values
    are still carried, the first load is an append."""
    from walflow.lake import sql as lake_sql

    dsn = database
    config = new_connector()
    name = config.topic_prefix
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE codes (code text PRIMARY KEY, n int, doc text)")
        conn.execute("CREATE TABLE pairs (a int NOT NULL, b varchar(20) NOT NULL, n int, PRIMARY KEY (a, b))")
        # no primary key: the key is the unique index, whose nullable column gives an optional key field
        conn.execute("CREATE TABLE maybe (k int, tag text, n int)")
        conn.execute("CREATE UNIQUE INDEX maybe_k ON maybe (k)")
        conn.execute("ALTER TABLE maybe REPLICA IDENTITY FULL")
        conn.execute("INSERT INTO codes SELECT 'c' || g, g, repeat(md5(g::text), 400) FROM generate_series(1, 300) g")
        conn.execute("INSERT INTO pairs SELECT g % 30, 'b' || (g / 30), g FROM generate_series(0, 299) g")
        conn.execute("INSERT INTO maybe SELECT g, 't' || g, g FROM generate_series(1, 100) g")
        conn.execute("INSERT INTO maybe VALUES (NULL, 'null key', 0)")
    setup(config, dsn)
    first = {r["table"].rsplit(".", 1)[1]: r for r in apply_lake(spark, config)}
    assert {r["ops"].get("r") for r in first.values()} == {300, 101}
    for narrowed, step in ((True, 0), (False, 1)):
        if not narrowed:
            monkeypatch.setattr(lake_sql, "PREFILTER_MAX_KEYS", 0)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "UPDATE codes SET n = -n WHERE n %% 7 = %s", (step,)
            )  # doc is TOASTed and unchanged: a placeholder
            conn.execute("DELETE FROM codes WHERE n %% 11 = %s", (step,))
            conn.execute(
                "INSERT INTO codes VALUES (%s, 1, 'x'), (%s, 2, 'trailing space')",
                (f"new{step}", f"c1{' ' * (step + 1)}"),
            )
            conn.execute("UPDATE pairs SET n = n + 1 WHERE a = %s", (3 + step,))
            conn.execute("UPDATE pairs SET b = b || '!' WHERE a = %s", (4 + 2 * step,))  # key changes: delete + create
            conn.execute("DELETE FROM pairs WHERE a = %s", (5 + 2 * step,))
            conn.execute("UPDATE maybe SET n = n + 42 WHERE k IS NULL")
            conn.execute("UPDATE maybe SET n = -n WHERE k %% 10 = %s", (step,))
            conn.execute("DELETE FROM maybe WHERE k %% 9 = %s", (step,))
        stream(config, dsn)
        apply_lake(spark, config)
        assert_lake_equals_source(name, dsn, "codes", key="code")
        with psycopg.connect(dsn) as conn:
            for table, columns in (("pairs", "a, b, n"), ("maybe", "k, tag, n")):
                source = sorted(conn.execute(f"SELECT {columns} FROM {table}").fetchall(), key=repr)
                lake = sorted(
                    (tuple(r[c.strip()] for c in columns.split(",")) for r in lake_rows(name, f"public__{table}")),
                    key=repr,
                )
                assert lake == source, (table, "narrowed" if narrowed else "whole target")


def test_widening_is_applied_and_an_incompatible_change_stops_the_job(spark: Any, database: str) -> None:
    """int→bigint, real→double and numeric(8,2)→numeric(12,2) mid-stream widen the lake columns in place (values
    beyond the old range included); int→text afterwards stops the job with a message naming table, column, types
    and the fix, and commits nothing."""
    from walflow.lake import read_hadoop_table

    dsn = database
    config = new_connector()
    name = config.topic_prefix
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE measures (id int PRIMARY KEY, n int, p numeric(8,2), f real, note text)")
        conn.execute("INSERT INTO measures SELECT g, g, g * 1.25, g / 4.0, 'm' FROM generate_series(1, 50) g")
    setup(config, dsn)
    apply_lake(spark, config)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE measures SET n = n + 1 WHERE id <= 10")
        conn.execute(
            "ALTER TABLE measures ALTER COLUMN n TYPE bigint, ALTER COLUMN p TYPE numeric(12,2),"
            " ALTER COLUMN f TYPE double precision"
        )
        conn.execute("UPDATE measures SET n = 5000000000 + id, p = 1234567890.12, f = 0.1 WHERE id % 5 = 0")
        conn.execute("INSERT INTO measures VALUES (51, 9000000000, 9999999999.99, 1e300, 'big')")
    stream(config, dsn)
    apply_lake(spark, config)
    assert_lake_equals_source(name, dsn, "measures")
    table = read_hadoop_table(os.environ["WALFLOW_WAREHOUSE"], name, "public__measures")
    types = {f.name: str(f.field_type) for f in table.schema().fields}
    assert types["n"] == "long" and types["p"] == "decimal(12, 2)" and types["f"] == "double", types

    before = lake_snapshot_id(name, "public__measures")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE measures ALTER COLUMN n TYPE text")
        conn.execute("UPDATE measures SET n = 'many' WHERE id = 1")
    stream(config, dsn)
    with pytest.raises(LakeSchemaError) as refused:
        apply_lake(spark, config)
    message = str(refused.value)
    assert (
        "public__measures" in message
        and "column 'n' changes from bigint to string" in message
        and "re-snapshot" in message
    )
    assert lake_snapshot_id(name, "public__measures") == before


ODD_TABLE = "Wé.i'rd \"ta`b le"
ODD_COLUMN = "va`l.ue 'x'"


def test_soft_deletes_and_odd_names(spark: Any, database: str) -> None:
    """``walflow.lake.delete.mode: soft`` flags deleted and truncated rows instead of removing them, on a table and a
    column whose names hold quotes, a backquote, a dot, a space and non-ASCII letters."""
    from psycopg import sql

    dsn = database
    config = new_connector(**{"walflow.lake.delete.mode": "soft"})
    table, column = sql.Identifier(ODD_TABLE), sql.Identifier(ODD_COLUMN)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, {} text, ünï int)").format(table, column))
        conn.execute(sql.SQL("INSERT INTO {} SELECT g, 'v''' || g, g FROM generate_series(1, 40) g").format(table))
    setup(config, dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("UPDATE {} SET {} = 'changed \\ `x`' WHERE id % 3 = 0").format(table, column))
        conn.execute(sql.SQL("DELETE FROM {} WHERE id % 4 = 0").format(table))
        conn.execute(sql.SQL("TRUNCATE {}").format(table))
        conn.execute(sql.SQL("INSERT INTO {} SELECT g, 'again' || g, -g FROM generate_series(30, 60) g").format(table))
        conn.execute(sql.SQL("DELETE FROM {} WHERE id % 7 = 0").format(table))
        conn.execute(sql.SQL("UPDATE {} SET ünï = 0 WHERE id = 31").format(table))
    stream(config, dsn)
    apply_lake(spark, config)
    with psycopg.connect(dsn) as conn:
        source = {
            r[0]: (r[1], r[2])
            for r in conn.execute(sql.SQL("SELECT id, {}, ünï FROM {}").format(column, table)).fetchall()
        }
    lake_name = table_name("public", ODD_TABLE)
    assert lake_name != "public__" + ODD_TABLE.lower()
    rows = {r["id"]: r for r in lake_rows(config.topic_prefix, lake_name)}
    live = {k: (r[ODD_COLUMN], r["ünï"]) for k, r in rows.items() if not r["_walflow_deleted"]}
    assert live == source
    deleted = {k: r for k, r in rows.items() if r["_walflow_deleted"]}
    # every row the truncate removed is kept, flagged, with the truncate as its last operation
    assert {k for k, r in deleted.items() if r["_walflow_op"] == "t"} == set(range(1, 30)) - {
        k for k in range(1, 30) if k % 4 == 0
    }
    assert {k for k, r in deleted.items() if r["_walflow_op"] == "d"} == {k for k in range(30, 61) if k % 7 == 0} | {
        k for k in range(1, 30) if k % 4 == 0
    }
    assert (
        rows[33][ODD_COLUMN] == "again33" and rows[27]["_walflow_deleted"] and rows[27][ODD_COLUMN] == "changed \\ `x`"
    )


@pytest.mark.long
def test_soft_truncate_stopped_after_its_commit_still_flags_the_rows_of_its_batch(spark: Any, database: str) -> None:
    """Soft deletes, the job stopped after the truncate's commit and before the MERGE's: the rerun still writes the
    rows known only from events before the truncate in that batch, flagged, as one clean run does."""
    dsn = database
    config = new_connector(**{"walflow.lake.delete.mode": "soft"})
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE cut (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO cut SELECT g, 'v' || g FROM generate_series(1, 10) g")
    setup(config, dsn)
    apply_lake(spark, config)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO cut SELECT g, 'n' || g FROM generate_series(11, 15) g")
        conn.execute("UPDATE cut SET v = 'u1' WHERE id = 1")
        conn.execute("TRUNCATE cut")
        conn.execute("INSERT INTO cut SELECT g, 'a' || g FROM generate_series(20, 22) g")
    stream(config, dsn)
    hooks = CrashAt("after_truncate")
    with pytest.raises(Crash):
        apply_lake(spark, config, hooks=hooks)
    apply_lake(spark, config)
    rows = {r["id"]: r for r in lake_rows(config.topic_prefix, "public__cut")}
    assert {k for k, r in rows.items() if not r["_walflow_deleted"]} == {20, 21, 22}
    truncated = {k for k, r in rows.items() if r["_walflow_deleted"] and r["_walflow_op"] == "t"}
    assert truncated == set(range(1, 16)), f"flagged by the truncate: {sorted(truncated)}"
    assert rows[1]["v"] == "u1" and rows[13]["v"] == "n13"


def test_schemaless_records_reach_the_lake(spark: Any, database: str, caplog: pytest.LogCaptureFixture) -> None:
    """``value.converter.schemas.enable: false`` (and keys without schema): the lake types new columns from the JSON
    values (docs/lake.md: numbers, booleans, strings; objects and arrays as JSON text; semantic types as their JSON
    form), then keeps the lake table's types for later records; a value its lake column cannot take stops the job with
    topic, partition, offset, column and value, and ``walflow.lake.accept.records`` gets past it."""
    import datetime as dt
    import json

    from walflow.lake import read_hadoop_table

    dsn = database
    config = new_connector(
        **{
            "value.converter.schemas.enable": False,
            "key.converter.schemas.enable": False,
            "decimal.handling.mode": "string",
        }
    )
    name = config.topic_prefix
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE things (id int PRIMARY KEY, name text, qty bigint, price numeric(10,2),"
            " ratio double precision, ok boolean, meta jsonb, tags text[], at timestamp)"
        )
        conn.execute(
            "INSERT INTO things SELECT g, 'n' || g, g * 1000, g * 1.5, g / 4.0, g % 2 = 0, jsonb_build_object('g', g), "
            "ARRAY['a', 'b' || g], timestamp '2024-01-01' + g * interval '1 hour' FROM generate_series(1, 30) g"
        )
    setup(config, dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE things SET name = 'changed', ratio = 2 WHERE id % 3 = 0")
        conn.execute("DELETE FROM things WHERE id % 7 = 0")
        conn.execute("INSERT INTO things (id) VALUES (100)")
        conn.execute("ALTER TABLE things ADD COLUMN extra int")
        conn.execute("UPDATE things SET extra = id WHERE id < 5")
    stream(config, dsn)
    apply_lake(spark, config)

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
            assert (got["name"], got["qty"], got["ok"], got["extra"]) == (
                row["name"],
                row["qty"],
                row["ok"],
                row["extra"],
            )
            assert got["price"] == (None if row["price"] is None else str(row["price"]))
            assert got["ratio"] == row["ratio"]
            assert (None if got["meta"] is None else json.loads(got["meta"])) == row["meta"]
            assert (None if got["tags"] is None else json.loads(got["tags"])) == row["tags"]
            assert got["at"] == (None if row["at"] is None else (row["at"] - epoch) // dt.timedelta(microseconds=1))

    check()
    table = read_hadoop_table(os.environ["WALFLOW_WAREHOUSE"], name, "public__things")
    types = {f.name: str(f.field_type) for f in table.schema().fields}
    assert {k: types[k] for k in ("id", "name", "qty", "price", "ratio", "ok", "meta", "tags", "at", "extra")} == {
        "id": "long",
        "name": "string",
        "qty": "long",
        "price": "string",
        "ratio": "double",
        "ok": "boolean",
        "meta": "string",
        "tags": "string",
        "at": "long",
        "extra": "long",
    }
    # later records are typed by the lake table (ratio stays double even when every new value is integral)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE things SET ratio = 7, extra = 1 WHERE id = 1")
    stream(config, dsn)
    apply_lake(spark, config)
    check()

    # text in a long column: refused with its place, nothing committed; accepted, it is null with its text kept
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE things ALTER COLUMN qty TYPE text")
        conn.execute("UPDATE things SET qty = 'many' WHERE id = 2")
        conn.execute("UPDATE things SET qty = 'lots' WHERE id = 3")
    stream(config, dsn)
    before = lake_snapshot_id(name, "public__things")
    with caplog.at_level(logging.ERROR, logger="walflow.apply"), pytest.raises(UnappliableRecordError) as refused:
        apply_lake(spark, config)
    # the two updates, then every row again: the type change rewrote the table, which the stream re-read (issue 45)
    problems = sorted(refused.value.problems, key=lambda p: p["offset"])
    problem = problems[0]
    topic = f"{name}.public.things"
    assert (problem["topic"], problem["column"], problem["value"]) == (topic, "qty", "many")
    assert len(problems) == 2 + 26 and {p["value"] for p in problems[2:]} >= {"many", "lots", "1000"}, problems
    message = str(refused.value)
    assert (
        f"offset {problem['offset']}" in message
        and "walflow.lake.accept.records" in message
        and "schemas.enable" in message
    )
    assert (
        f"{len(problems)} record(s) cannot be applied" in message
        and f"and the {len(problems) - 1} other(s) the log line before this one lists" in message
    )
    # one run of the fix gets past every record: the log lists them all, ready to paste
    entries = [f"{topic}:{p['partition']}:{p['offset']}" for p in problems]
    assert any(json.dumps(entries, separators=(",", ":")) in r.getMessage() for r in caplog.records), [
        r.getMessage() for r in caplog.records
    ]
    assert lake_snapshot_id(name, "public__things") == before
    apply_lake(spark, config, accept_records=tuple(entries))
    rows = {r["id"]: r for r in lake_rows(name, "public__things")}
    assert rows[2]["qty"] is None and rows[2]["_walflow_overflow"] == [("qty", "many")]
    assert rows[3]["qty"] is None and rows[3]["_walflow_overflow"] == [("qty", "lots")]


def test_topic_delimiter_and_transaction_topic_are_honoured(spark: Any, database: str) -> None:
    """``topic.delimiter: _`` and ``topic.transaction: tx_meta`` with transaction metadata on: the job applies the
    table topics and leaves the transaction topic alone, whatever their names."""
    dsn = database
    config = new_connector(
        **{"topic.delimiter": "_", "topic.transaction": "tx_meta", "provide.transaction.metadata": True}
    )
    prefix = config.topic_prefix
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY, item text)")
        conn.execute("INSERT INTO orders VALUES (1, 'a'), (2, 'b')")
    setup(config, dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE orders SET item = 'c' WHERE id = 1")
        conn.execute("INSERT INTO orders VALUES (3, 'd')")
    stream(config, dsn)
    assert read_topic(f"{prefix}_tx_meta") and read_topic(f"{prefix}_public_orders")
    results = apply_lake(spark, config)
    assert [r["topic"] for r in results] == [f"{prefix}_public_orders"]
    assert_lake_equals_source(prefix, dsn, "orders")


@pytest.mark.long
def test_columns_added_with_array_and_map_defaults_fill_the_existing_rows(spark: Any, database: str) -> None:
    """PostgreSQL gives a table's existing rows a new column's default without a change event; array and hstore
    (map) defaults reach the lake's existing rows as well, not only numbers and text."""
    dsn = database
    config = new_connector(**{"hstore.handling.mode": "map"})
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS hstore")
        conn.execute("CREATE TABLE tagged (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO tagged SELECT g, 'v' || g FROM generate_series(1, 20) g")
    setup(config, dsn)
    apply_lake(spark, config)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "ALTER TABLE tagged ADD COLUMN tags text[] DEFAULT '{a,b}', ADD COLUMN none int[] DEFAULT '{}',"
            " ADD COLUMN attrs hstore DEFAULT 'k=>v'"
        )
        conn.execute("INSERT INTO tagged (id, v) VALUES (21, 'new')")
    stream(config, dsn)
    apply_lake(spark, config)
    lake = {r["id"]: r for r in lake_rows(config.topic_prefix, "public__tagged")}
    assert sorted(lake) == list(range(1, 22))
    for row in lake.values():
        assert (row["tags"], row["none"], row["attrs"]) == (["a", "b"], [], [("k", "v")]), (
            row
        )  # a map read back as pairs


def test_a_recreated_topic_is_refused(spark: Any, database: str) -> None:
    """A topic deleted and filled again (as many records, other ones) no longer lines up with the lake's offsets:
    the job stops with the cause instead of skipping or re-applying anything."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    dsn = database
    config = new_connector()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
        conn.execute("INSERT INTO t SELECT g, 'v' FROM generate_series(1, 5) g")
    setup(config, dsn)
    apply_lake(spark, config)
    topic = f"{config.topic_prefix}.public.t"
    records = read_topic(topic)
    bootstrap = os.environ["WALFLOW_KAFKA_BOOTSTRAP"]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for r in reversed(records):  # as many records, in another order
        producer.produce(topic, r.raw_value, r.raw_key)
    assert producer.flush(30) == 0
    with pytest.raises(TopicMismatchError, match="the topic was recreated or the broker lost its data"):
        apply_lake(spark, config)


BIG = "(SELECT string_agg(md5(i::text || 'x'), '') FROM generate_series(1, 400) i)"
BIG_TAGS = "(SELECT array_agg(md5(i::text || '{salt}')) FROM generate_series(1, 400) i)"


def test_unchanged_toast_values_are_carried_forward(spark: Any, database: str) -> None:
    """Values PostgreSQL does not send (unchanged TOAST, REPLICA IDENTITY DEFAULT) in a text and a text[] column:
    a later run keeps the lake's value; inside one run the value of an earlier event of the key is carried
    forward; the changelog names the columns it did not get."""
    dsn = database
    config = new_connector(**{"walflow.lake.changelog": True})
    name = config.topic_prefix
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE docs (id int PRIMARY KEY, n int, doc text, tags text[])")
        conn.execute(f"INSERT INTO docs SELECT g, 0, {BIG}, {BIG_TAGS.format(salt='a')} FROM generate_series(1, 3) g")
    setup(config, dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE docs SET n = 1")  # doc and tags unchanged: placeholders
    stream(config, dsn)
    apply_lake(spark, config)
    assert_lake_equals_source(name, dsn, "docs")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE docs SET tags = {BIG_TAGS.format(salt='b')}, doc = 'short' WHERE id = 2")  # sent
        conn.execute("UPDATE docs SET n = 2 WHERE id = 2")  # tags unchanged again: a placeholder in the same run
        conn.execute("UPDATE docs SET n = 3 WHERE id = 3")
    stream(config, dsn)
    records = [r for r in read_topic(f"{name}.public.docs") if r.op == "u"]
    assert records[-1].payload["after"]["tags"] == ["__debezium_unavailable_value"], (
        "the test needs the placeholder in the events"
    )
    apply_lake(spark, config)
    assert_lake_equals_source(name, dsn, "docs")
    logged = [r for r in lake_rows(name, "public__docs__changelog") if r["id"] == 2 and r["n"] == 2]
    assert logged and sorted(logged[0]["_walflow_toast"]) == ["tags"]


def test_events_left_out_mark_the_lake_table_incomplete(spark: Any, database: str) -> None:
    """Under event.processing.failure.handling.mode warn, events Debezium cannot build (NaN in a NOT NULL precise
    decimal) are left out of the topics: the lake cannot hold those rows, so the job marks the lake table incomplete
    (its walflow.incomplete property: how many, where, why) from the facts the capture wrote, and the rows that
    were built reach it."""
    import json

    from walflow.lake import read_hadoop_table

    config = new_connector(**{"event.processing.failure.handling.mode": "warn"})
    prefix = config.topic_prefix
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE nan (id int PRIMARY KEY, n numeric(10,2) NOT NULL)")
        conn.execute("INSERT INTO nan VALUES (1, 1), (2, 'NaN'), (3, 3)")
    setup(config, database)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("INSERT INTO nan VALUES (4, 'NaN'), (5, 5)")
    stream(config, database)
    apply_lake(spark, config)
    assert sorted(r["id"] for r in lake_rows(prefix, "public__nan")) == [1, 3, 5]
    table = read_hadoop_table(os.environ["WALFLOW_WAREHOUSE"], prefix, "public__nan")
    assert table is not None
    incomplete = json.loads(table.properties["walflow.incomplete"])
    assert incomplete["events_left_out"] == 2, incomplete
    assert incomplete["by"] == ["event.processing.failure.handling.mode=warn"], incomplete
    assert "snapshot" in incomplete["last"][0]["position"] and "LSN" in incomplete["last"][1]["position"], incomplete
    assert all("'NaN'" in e["reason"] for e in incomplete["last"]), incomplete
