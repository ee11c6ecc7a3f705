"""Hostile and oversized input, as an attacker and as a careless user would send it (the connector runs as the
least-privilege role of include/sql/roles.sql): no smuggled statement runs, no secret leaks, no record stops the
slot for good, no drift goes unnoticed, no pattern stalls the task."""

from __future__ import annotations

import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from walflow.connectors import load_all, load_config
from walflow.errors import ConfigError, DriftError, PatternError, RecordTooLargeError, SourceError
from walflow.kafka import EventProducer, producer_settings
from walflow.setup import ConnectorSetup
from walflow.stream import StreamBatch

from tests.privileges import as_connector, hand_over
from tests.support import airflow_connector, bootstrap, connector, pg_dsn, read_topic, setup, stream, unique

SIGNALS = "public.walflow_signal"


def run_sql(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def query(dsn: str, text: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(text, params or None).fetchall()


def send_signal(dsn: str, kind: str, data: dict[str, Any]) -> str:
    signal_id = uuid.uuid4().hex[:12]
    run_sql_params(dsn, f"INSERT INTO {SIGNALS} VALUES (%s, %s, %s)", signal_id, kind, json.dumps(data))
    return signal_id


def run_sql_params(dsn: str, text: str, *params: Any) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(text, params)


def signal_status(dsn: str, config: Any, signal_id: str) -> dict[str, Any]:
    rows = query(dsn, "SELECT value FROM walflow_state WHERE connector = %s AND key = %s", config.name, f"signal:{signal_id}")
    assert rows, f"no status recorded for signal {signal_id}"
    return rows[0][0]


def slot_lsn(dsn: str, slot: str) -> str | None:
    rows = query(dsn, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", slot)
    return rows[0][0] if rows else None


def signals_connector(dsn: str, **overrides: Any) -> Any:
    raw = {"signal.data.collection": SIGNALS, "snapshot.mode": "no_data", "incremental.snapshot.chunk.size": 100, **overrides}
    config = connector(unique("hostile"), **raw)
    setup(config, dsn)
    return config


# -- 1. statements smuggled into additional-condition -------------------------------------------------------------
def test_statements_in_a_condition_never_run(database: str) -> None:
    """The reported attack (several statements), a way out of the WHERE clause into another table, and a function
    that deletes: none changes or leaks anything, each fails its signal, the stream goes on."""
    run_sql(
        database,
        "CREATE TABLE orders (id int PRIMARY KEY, v text)",
        "INSERT INTO orders SELECT g, 'o' || g FROM generate_series(1, 50) g",
        "CREATE TABLE victim (id int PRIMARY KEY, secret text)",
        "INSERT INTO victim SELECT g, 'secret' || g FROM generate_series(1, 10) g",
        # a superuser's function the connector role may call (EXECUTE is PUBLIC): it deletes when evaluated
        "CREATE FUNCTION public.evil() RETURNS boolean LANGUAGE sql SECURITY DEFINER AS "
        "'DELETE FROM public.victim; SELECT true'",
    )
    # the role owns the captured tables (a 'filtered' publication needs it), so a statement it runs could drop them
    hand_over(database, "orders", "victim")
    config = signals_connector(database, **{"publication.autocreate.mode": "filtered", "table.include.list": r"public\.orders,public\.victim"})
    smuggled = send_signal(database, "execute-snapshot", {
        "data-collections": ["public.orders"],
        "additional-condition": "1=1); DELETE FROM public.victim; DROP TABLE public.orders CASCADE; SELECT (1",
    })
    union = send_signal(database, "execute-snapshot", {
        "data-collections": ["public.orders"],
        "additional-condition": "true) UNION SELECT id::text, secret FROM public.victim WHERE (true",
    })
    per_table = send_signal(database, "execute-snapshot", {
        "data-collections": ["public.orders"],
        "additional-conditions": [{"data-collection": "public.orders", "filter": "true); DELETE FROM public.victim; SELECT (1"}],
    })
    function = send_signal(database, "execute-snapshot", {"data-collections": ["public.orders"], "additional-condition": "public.evil()"})
    good = send_signal(database, "execute-snapshot", {"data-collections": ["public.orders"], "additional-condition": "id <= 5"})
    for _ in range(10):
        summary = stream(config, database)
        if not summary.events and not summary.snapshot_rows:
            break
    assert query(database, "SELECT count(*) FROM victim") == [(10,)]
    assert query(database, "SELECT to_regclass('public.orders') IS NOT NULL") == [(True,)]
    for signal_id in (smuggled, union, per_table):
        status = signal_status(database, config, signal_id)
        assert status["status"] == "failed" and "not one SQL expression" in status["error"], status
    status = signal_status(database, config, function)
    assert status["status"] == "failed" and "read-only transaction" in status["error"], status
    assert signal_status(database, config, good)["status"] == "completed"
    rows = read_topic(f"{config.topic_prefix}.public.orders")
    assert sorted(r.key_payload["id"] for r in rows) == [1, 2, 3, 4, 5]  # nothing of victim's rows leaked in
    assert not any(b"secret" in (r.raw_value or b"") for r in rows)


# -- 2. the snapshot form renders no Connection ----------------------------------------------------------------------
def test_the_snapshot_form_renders_no_connection_secret(database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    from walflow.airflow.dag_factory import build_connector_dags

    run_sql(database, "CREATE TABLE t (id int PRIMARY KEY, updated_at timestamp)")
    name = unique("form")
    env = airflow_connector(tmp_path, name, database, bootstrap(), f"signal.data.collection: {SIGNALS}", "walflow.lake.enabled: false", "snapshot.mode: no_data")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    password = json.loads(env[f"AIRFLOW_CONN_{name.upper()}_PG"])["password"]
    dags = build_connector_dags()
    assert dags[f"{name}__setup"].test().state == "success"
    snapshot = dags[f"{name}__snapshot"]
    leak = snapshot.test(
        run_conf={"data_collections": ["public.t"], "additional_condition": "'{{ conn." + f"{name}_pg" + ".password }}' <> ''"},
        mark_success_pattern="wait_for_snapshot",
    )
    assert leak.state == "failed"
    assert query(database, f"SELECT count(*) FROM {SIGNALS}") == [(0,)]  # refused before anything was written
    # the run's interval is still there for backfills, rendered in the sandbox
    allowed = snapshot.test(
        run_conf={"data_collections": ["public.t"], "additional_condition": "updated_at < '{{ data_interval_end }}'"},
        mark_success_pattern="wait_for_snapshot",
    )
    assert allowed.state == "success"
    (data,) = query(database, f"SELECT data FROM {SIGNALS}")[0]
    assert "{{" not in data and "updated_at < '" in data
    out = capfd.readouterr()
    text = out.out + out.err
    for path in (Path(__import__("os").environ["AIRFLOW_HOME"]) / "logs").glob(f"**/*{name}*/**/*"):
        if path.is_file():
            text += path.read_text(errors="replace")
    assert "may use only data_interval_start" in text  # the refusal says what is allowed
    assert password not in text and password not in data


# -- 3. a record too large for Kafka -------------------------------------------------------------------------------
def test_oversized_record_stops_before_it_and_loses_nothing(database: str) -> None:
    run_sql(database, "CREATE TABLE big (id int PRIMARY KEY, v text, a int[])")
    config = signals_connector(database)
    run_sql(database, "INSERT INTO big VALUES (1, 'small', NULL)")
    before = slot_lsn(database, config.slot_name)
    run_sql(database, "INSERT INTO big VALUES (2, repeat('x', 2000000), NULL)")
    run_sql(database, "INSERT INTO big VALUES (3, 'small', array_fill(7, ARRAY[1000000]))")
    run_sql(database, "INSERT INTO big VALUES (4, 'after', NULL)")
    with pytest.raises(RecordTooLargeError) as raised:
        stream(config, database)
    message = str(raised.value)
    for part in ("table public.big", '"id":2', "LSN ", "2000", "message.max.bytes=1000000", "max.message.bytes", "largest column is 'v'", "column.truncate.to"):
        assert part in message, (part, message)
    # the transaction before it was delivered and confirmed; the slot waits at the oversized one
    after = slot_lsn(database, config.slot_name)
    assert after != before
    assert [r.key_payload["id"] for r in read_topic(f"{config.topic_prefix}.public.big")] == [1]
    with pytest.raises(RecordTooLargeError, match="table public.big"):  # the same, not a stuck or skipped slot
        stream(config, database)
    assert slot_lsn(database, config.slot_name) == after

    # the documented way past it: raise the limits (the embedded broker takes what the producer sends)
    roomy = EventProducer(producer_settings({"bootstrap.servers": bootstrap(), "message.max.bytes": 20_000_000}))
    StreamBatch(config, as_connector(database), roomy).run()
    records = read_topic(f"{config.topic_prefix}.public.big")
    assert [r.key_payload["id"] for r in records] == [1, 2, 3, 4]  # nothing lost, nothing twice
    assert len(records[1].payload["after"]["v"]) == 2_000_000 and len(records[2].payload["after"]["a"]) == 1_000_000

    # an incremental snapshot meeting the row fails its signal with the same explanation; streaming goes on
    signal_id = send_signal(database, "execute-snapshot", {"data-collections": ["public.big"]})
    run_sql(database, "INSERT INTO big VALUES (5, 'streamed', NULL)")
    stream(config, database)
    status = signal_status(database, config, signal_id)
    assert status["status"] == "failed" and "message.max.bytes" in status["error"], status
    assert '"id":2' in status["error"], status  # the row refused, not its neighbour (rows before it were queued)
    assert 5 in [r.key_payload["id"] for r in read_topic(f"{config.topic_prefix}.public.big") if r.op == "c"]

    # and an initial snapshot names the table too
    initial = connector(unique("bigsnap"))
    with pytest.raises(RecordTooLargeError, match=r"table public\.big.*message\.max\.bytes") as raised:
        setup(initial, database)
    assert '"id":2' in str(raised.value)  # the row refused (rows are encoded a run at a time, then queued)


def test_a_value_the_stream_cannot_convert_stops_before_its_transaction_with_the_way_past(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL prints every value walflow streams, so a converter refusing one is a walflow bug; should it happen,
    the batch stops before that transaction (nothing after it confirmed, nothing before it sent again), naming the
    table, column, value and LSN, and column.exclude.list is the documented way past it. The refusal is injected:
    walflow's converters take every value PostgreSQL prints (tests/integration/test_types.py)."""
    import dataclasses

    from walflow import events
    from walflow.errors import ConversionError

    real = events.build_converter

    def refusing_13(ctype: Any, settings: Any) -> Any:
        converter = real(ctype, settings)
        if converter is None or ctype.base_name != "int8":
            return converter

        def convert(text: str, original: Any = converter.convert) -> Any:
            if text == "13":
                raise ValueError("refused for the test")
            return original(text)

        return dataclasses.replace(converter, convert=convert)

    run_sql(database, "CREATE TABLE conv (id int PRIMARY KEY, n bigint)")
    config = connector(unique("conv"))
    setup(config, database)
    for statement in ("INSERT INTO conv VALUES (1, 1)", "INSERT INTO conv VALUES (2, 13)", "INSERT INTO conv VALUES (3, 3)"):
        run_sql(database, statement)
    monkeypatch.setattr(events, "build_converter", refusing_13)
    for _ in range(2):  # the same place each time: not a stuck or a skipped slot
        with pytest.raises(ConversionError) as raised:
            stream(config, database)
        message = str(raised.value)
        for part in ("table public.conv column 'n'", "'13'", "at LSN ", "column.exclude.list"):
            assert part in message, (part, message)
        assert [r.key_payload["id"] for r in read_topic(f"{config.topic_prefix}.public.conv")] == [1]
    # the batch's state is saved before it fails: the next batch's source.sequence starts where the slot is
    with psycopg.connect(database) as conn:
        slot_at = conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (config.slot_name,)).fetchone()[0]
        (last,) = conn.execute("SELECT value FROM walflow_state WHERE connector = %s AND key = 'last_batch'", (config.name,)).fetchone()
    assert last["confirmed_to"] == slot_at and last["stopped_by"] == "value not convertible", last
    past = connector(config.name, **{"slot.name": config.slot_name, "publication.name": config.publication_name, "column.exclude.list": r"public\.conv\.n"})
    stream(past, database)
    records = read_topic(f"{config.topic_prefix}.public.conv")
    assert [r.key_payload["id"] for r in records] == [1, 2, 3] and "n" not in records[1].payload["after"]


# -- 4. one slot, one topic prefix, one connector ------------------------------------------------------------------
def test_a_slot_or_topic_prefix_belongs_to_one_connector(database: str, tmp_path: Path) -> None:
    run_sql(database, "CREATE TABLE t (id int PRIMARY KEY)")
    first = connector(unique("owner"), **{"snapshot.mode": "no_data"})
    setup(first, database)
    same_slot = connector(unique("thief"), **{"slot.name": first.slot_name, "snapshot.mode": "no_data"})
    with pytest.raises(DriftError, match=f"slot '{first.slot_name}' belongs to connector '{first.name}'"):
        setup(same_slot, database)
    with pytest.raises(DriftError, match=f"belongs to connector '{first.name}'"):
        stream(same_slot, database)
    same_prefix = connector(unique("mixer"), **{"topic.prefix": first.topic_prefix, "snapshot.mode": "no_data"})
    with pytest.raises(DriftError, match=f"topic prefix '{first.topic_prefix}' belongs to connector '{first.name}'"):
        setup(same_prefix, database)
    # refused before anything was created
    assert query(database, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", same_prefix.slot_name) == [(0,)]
    run_sql(database, "INSERT INTO t VALUES (1)")
    assert stream(first, database).events == 1  # the owner streams on

    # the connectors folder refuses the same clash before any DAG exists
    for name, prefix in (("one", "shared"), ("two", "shared")):
        (tmp_path / f"{name}.yaml").write_text(f"name: {name}\ntopic.prefix: {prefix}\nslot.name: slot_{name}\n")
    with pytest.raises(ConfigError, match="topic prefix 'shared' is used by both"):
        load_all(tmp_path)


# -- 5. drift: publication, recreated tables, topic collisions -----------------------------------------------------
def test_a_table_dropped_from_a_filtered_publication_is_put_back(database: str) -> None:
    run_sql(database, "CREATE TABLE a (id int PRIMARY KEY)", "CREATE TABLE b (id int PRIMARY KEY)")
    hand_over(database, "a", "b")
    config = connector(unique("pubdrift"), **{"publication.autocreate.mode": "filtered", "snapshot.mode": "no_data"})
    setup(config, database)
    run_sql(database, f"ALTER PUBLICATION {config.publication_name} DROP TABLE b")
    summary = stream(config, database)
    assert any("lacked table(s) public.b" in w and "incremental snapshot" in w for w in summary.warnings), summary.warnings
    assert query(database, "SELECT tablename FROM pg_publication_tables WHERE pubname = %s ORDER BY 1", config.publication_name) == [("a",), ("b",)]
    run_sql(database, "INSERT INTO b VALUES (1)")
    assert stream(config, database).events == 1


def test_a_table_dropped_from_an_unmanaged_publication_fails_with_the_fix(database: str) -> None:
    run_sql(database, "CREATE TABLE a (id int PRIMARY KEY)", "CREATE TABLE b (id int PRIMARY KEY)")
    config = connector(unique("dbapub"), **{"publication.autocreate.mode": "disabled", "snapshot.mode": "no_data"})
    run_sql(database, f"CREATE PUBLICATION {config.publication_name} FOR TABLE a, b")  # the DBA's publication
    setup(config, database)
    run_sql(database, f"ALTER PUBLICATION {config.publication_name} DROP TABLE b")
    with pytest.raises(DriftError, match=rf"public\.b left publication .*ALTER PUBLICATION {config.publication_name} ADD TABLE"):
        stream(config, database)


def test_a_recreated_table_with_another_key_type_is_refused_until_accepted(database: str) -> None:
    run_sql(database, "CREATE TABLE t (id int PRIMARY KEY, v text)")
    config = connector(unique("rekey"), **{"snapshot.mode": "no_data"})
    setup(config, database)
    run_sql(database, "INSERT INTO t VALUES (1, 'int key')")
    assert stream(config, database).events == 1
    run_sql(database, "INSERT INTO t VALUES (2, 'before the drop')", "DROP TABLE t", "CREATE TABLE t (id text PRIMARY KEY, v text)",
            "INSERT INTO t VALUES ('x', 'text key')")
    with pytest.raises(DriftError, match=r"key of table public\.t changed from \(id int32\) to \(id string\)"):
        stream(config, database)
    assert [r.key_payload["id"] for r in read_topic(f"{config.topic_prefix}.public.t")] == [1, 2]  # confirmed up to the drop
    setup(config, database)  # accepts the new key
    assert stream(config, database).events == 1
    assert [r.key_payload["id"] for r in read_topic(f"{config.topic_prefix}.public.t")] == [1, 2, "x"]


def test_tables_sharing_a_topic_are_refused(database: str) -> None:
    run_sql(database, 'CREATE TABLE "a""b" (id int PRIMARY KEY)', "CREATE TABLE a_b (id int PRIMARY KEY)")
    config = connector(unique("collide"))
    with pytest.raises(DriftError, match=r"""'public\.a"b' and 'public\.a_b' -> topic"""):
        setup(config, database)
    assert slot_lsn(database, config.slot_name) is None
    run_sql(database, 'DROP TABLE "a""b"', 'CREATE TABLE "αβ" (id int PRIMARY KEY)', 'CREATE TABLE "γδ" (id int PRIMARY KEY)')
    with pytest.raises(DriftError, match=r"'public\.αβ' and 'public\.γδ'"):
        setup(config, database)
    # a table created later that collides stops the stream before its events mix with another table's
    run_sql(database, 'DROP TABLE "γδ"')
    config = connector(unique("collide"), **{"snapshot.mode": "no_data"})
    setup(config, database)
    run_sql(database, 'CREATE TABLE "γδ" (id int PRIMARY KEY)', 'INSERT INTO "γδ" VALUES (1)')
    with pytest.raises(DriftError, match="share a topic"):
        stream(config, database)


# -- 6. runaway patterns and queries ---------------------------------------------------------------------------------
@pytest.mark.timeout(120)
def test_runaway_patterns_are_bounded(database: str) -> None:
    schema = "a" * 60
    run_sql(database, f"CREATE SCHEMA {schema}", f"CREATE TABLE {schema}.t (id int PRIMARY KEY)",
            "CREATE TABLE orders_in_the_warehouse_of_the_north (id int PRIMARY KEY)")
    # the reported pattern: minutes of backtracking in Python's re on such names; bounded now
    started = time.monotonic()
    config = connector(unique("regex"), **{"table.include.list": r"(?:[a-z_.]+)+\d", "snapshot.mode": "no_data"})
    setup(config, database)
    assert stream(config, database).events == 0
    assert time.monotonic() - started < 60
    # a pattern that exceeds the bound on a name fails clearly, naming the pattern, the list and the name
    runaway = r"(?:(?:a|a)|(?:a|aa))+!"
    config = connector(unique("regex"), **{"schema.include.list": runaway, "snapshot.mode": "no_data"})
    with pytest.raises(PatternError, match=r"'schema\.include\.list'.*took more than .* of CPU time"):
        setup(config, database)
    # ... and in a signal it fails the signal, not the stream
    config = signals_connector(database)
    signal_id = send_signal(database, "execute-snapshot", {"data-collections": [runaway + ".*"]})
    stream(config, database)
    status = signal_status(database, config, signal_id)
    assert status["status"] == "failed" and "of CPU time" in status["error"], status


def test_snapshot_queries_have_a_statement_timeout(database: str) -> None:
    run_sql(database, "CREATE TABLE t (id int PRIMARY KEY)", "INSERT INTO t SELECT generate_series(1, 20)")
    config = signals_connector(database, **{"database.query.timeout.ms": 500})
    signal_id = send_signal(database, "execute-snapshot", {"data-collections": ["public.t"], "additional-condition": "pg_sleep(5) IS NOT NULL"})
    started = time.monotonic()
    stream(config, database)
    assert time.monotonic() - started < 30
    status = signal_status(database, config, signal_id)
    assert status["status"] == "failed" and "database.query.timeout.ms=500" in status["error"], status


# -- 7. duplicate keys, forged log lines, encodings ----------------------------------------------------------------
def test_duplicate_yaml_keys_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("name: dup\ntopic.prefix: dup\nslot.name: first\npublication.name: p\nslot.name: second\n")
    with pytest.raises(ConfigError, match=r"'slot\.name' appears twice \(lines 3 and 5\)"):
        load_config(path)


def test_log_signal_text_cannot_forge_log_lines(database: str, caplog: pytest.LogCaptureFixture) -> None:
    run_sql(database, "CREATE TABLE t (id int PRIMARY KEY)")
    config = signals_connector(database)
    forged = "hello\n2026-01-01 00:00:00 WARNING walflow: slot dropped\x1b[31m, \u202eevil"
    send_signal(database, "log", {"message": forged})
    run_sql_params(database, f"INSERT INTO {SIGNALS} VALUES (%s, 'log', '{{}}')", "id\nwith a newline")
    with caplog.at_level(logging.INFO, logger="walflow"):
        stream(config, database)
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("walflow")]
    logged = [m for m in messages if "(log): hello" in m]
    assert logged and "\n" not in logged[0] and "\x1b" not in logged[0] and "\u202e" not in logged[0]
    assert "\\n2026-01-01" in logged[0] and "\\x1b[31m" in logged[0]
    assert any("must be printable" in m for m in messages)
    assert all("\n" not in m for m in messages if "signal" in m)


def test_a_database_not_in_utf8_is_named_as_the_cause() -> None:
    name = f"ascii_{uuid.uuid4().hex[:8]}"
    run_sql(pg_dsn(), f"CREATE DATABASE {name} ENCODING 'SQL_ASCII' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'")
    try:
        run_sql(pg_dsn(name), "CREATE TABLE t (id int PRIMARY KEY)")
        config = connector(unique("ascii"))
        with pytest.raises(SourceError, match=rf"database '{name}' uses encoding SQL_ASCII; walflow needs UTF8") as raised:
            ConnectorSetup(config, pg_dsn(name), lambda: None).run()
        assert "wal_level" not in str(raised.value)
    finally:
        run_sql(pg_dsn(), f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_an_oversized_logical_message_names_its_prefix_and_position(database: str) -> None:
    """A logical decoding message too large for a record stops the batch before its transaction, like an oversized
    row, naming the message's prefix, its LSN and the way past it."""
    config = connector(unique("bigmsg"))
    run_sql(database, "CREATE TABLE small (id int PRIMARY KEY)")
    setup(config, database)
    run_sql(database, "BEGIN; SELECT pg_logical_emit_message(true, 'bulky', repeat('m', 2000000)); COMMIT")
    with pytest.raises(RecordTooLargeError) as raised:
        stream(config, database)
    message = str(raised.value)
    for part in ("prefix 'bulky'", "at LSN ", "message.max.bytes=1000000", "message.prefix.exclude.list"):
        assert part in message, (part, message)
