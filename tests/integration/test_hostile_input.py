"""Hostile and oversized input, as an attacker and as a careless user would send it (the connector runs as the
least-privilege role of walflow/source/sql/roles.sql): no smuggled statement runs, no secret leaks, no record stops the
slot for good, no drift goes unnoticed, no pattern stalls the task."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.privileges import as_connector, hand_over
from tests.support import airflow_connector, bootstrap, connector, pg_dsn, read_topic, setup, stream, unique
from walflow.capture.setup import ConnectorSetup
from walflow.capture.stream import StreamBatch
from walflow.config.files import load_all, load_config
from walflow.config.patterns import Pattern
from walflow.errors import ConfigError, DriftError, PatternError, RecordTooLargeError, SourceError
from walflow.kafka import EventProducer, producer_settings

# most of these run DAGs through Airflow; the one that needs the lake job is marked spark by its fixture
pytestmark = pytest.mark.airflow

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
    rows = query(
        dsn, "SELECT value FROM walflow_state WHERE connector = %s AND key = %s", config.name, f"signal:{signal_id}"
    )
    assert rows, f"no status recorded for signal {signal_id}"
    return rows[0][0]


def slot_lsn(dsn: str, slot: str) -> str | None:
    rows = query(dsn, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", slot)
    return rows[0][0] if rows else None


def signals_connector(dsn: str, **overrides: Any) -> Any:
    raw = {
        "signal.data.collection": SIGNALS,
        "snapshot.mode": "no_data",
        "incremental.snapshot.chunk.size": 100,
        **overrides,
    }
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
    config = signals_connector(
        database, **{"publication.autocreate.mode": "filtered", "table.include.list": r"public\.orders,public\.victim"}
    )
    smuggled = send_signal(
        database,
        "execute-snapshot",
        {
            "data-collections": ["public.orders"],
            "additional-condition": "1=1); DELETE FROM public.victim; DROP TABLE public.orders CASCADE; SELECT (1",
        },
    )
    union = send_signal(
        database,
        "execute-snapshot",
        {
            "data-collections": ["public.orders"],
            "additional-condition": "true) UNION SELECT id::text, secret FROM public.victim WHERE (true",
        },
    )
    per_table = send_signal(
        database,
        "execute-snapshot",
        {
            "data-collections": ["public.orders"],
            "additional-conditions": [
                {"data-collection": "public.orders", "filter": "true); DELETE FROM public.victim; SELECT (1"}
            ],
        },
    )
    function = send_signal(
        database, "execute-snapshot", {"data-collections": ["public.orders"], "additional-condition": "public.evil()"}
    )
    good = send_signal(
        database, "execute-snapshot", {"data-collections": ["public.orders"], "additional-condition": "id <= 5"}
    )
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
    assert status["status"] == "failed" and "evil(), which is VOLATILE" in status["error"], status
    assert signal_status(database, config, good)["status"] == "completed"
    rows = read_topic(f"{config.topic_prefix}.public.orders")
    assert sorted(r.key_payload["id"] for r in rows) == [1, 2, 3, 4, 5]  # nothing of victim's rows leaked in
    assert not any(b"secret" in (r.raw_value or b"") for r in rows)


# -- 2. the snapshot form renders no Connection ----------------------------------------------------------------------
def test_the_snapshot_form_renders_no_connection_secret(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from walflow.airflow.dag_factory import build_connector_dags

    run_sql(database, "CREATE TABLE t (id int PRIMARY KEY, updated_at timestamp)")
    name = unique("form")
    env = airflow_connector(
        tmp_path,
        name,
        database,
        bootstrap(),
        f"signal.data.collection: {SIGNALS}",
        "walflow.lake.enabled: false",
        "snapshot.mode: no_data",
    )
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    password = json.loads(env[f"AIRFLOW_CONN_{name.upper()}_PG"])["password"]
    dags = build_connector_dags()
    assert dags[f"{name}__setup"].test().state == "success"
    snapshot = dags[f"{name}__snapshot"]
    leak = snapshot.test(
        run_conf={
            "data_collections": ["public.t"],
            "additional_condition": "'{{ conn." + f"{name}_pg" + ".password }}' <> ''",
        },
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
    # templates that would take the worker's CPU or memory are refused before anything is rendered or written
    # (each kind is refused in tests/unit/test_expressions.py; one goes through the form here)
    for bomb in ("{{ 9**9**9 }}",):
        started = time.monotonic()
        refused = snapshot.test(
            run_conf={"data_collections": ["public.t"], "additional_condition": f"id::text = '{bomb}'"},
            mark_success_pattern="wait_for_snapshot",
        )
        assert refused.state == "failed" and time.monotonic() - started < 30, bomb
    assert query(database, f"SELECT count(*) FROM {SIGNALS}") == [(1,)]
    # a condition that would act passes the form (it is one expression) and fails its signal in the stream
    killer = snapshot.test(
        run_conf={"data_collections": ["public.t"], "additional_condition": "pg_terminate_backend(pg_backend_pid())"},
        mark_success_pattern="wait_for_snapshot",
    )
    assert killer.state == "success"
    assert dags[f"{name}__stream"].test().state == "success"
    (status,) = query(
        database,
        "SELECT value FROM walflow_state WHERE key LIKE 'signal:%%'"
        " AND value->>'error' LIKE '%%pg_terminate_backend%%'",
    )[0]
    assert status["status"] == "failed" and "VOLATILE" in status["error"]
    assert dags[f"{name}__stream"].test().state == "success"  # the stream goes on: no backend was terminated
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
    for part in (
        "table public.big",
        '"id":2',
        "LSN ",
        "2000",
        "message.max.bytes=1000000",
        "max.message.bytes",
        "largest column is 'v'",
        "column.truncate.to",
    ):
        assert part in message, (part, message)
    # the transaction before it was delivered and confirmed; the slot waits at the oversized one
    after = slot_lsn(database, config.slot_name)
    assert after != before
    assert [r.key_payload["id"] for r in read_topic(f"{config.topic_prefix}.public.big")] == [1]
    with pytest.raises(RecordTooLargeError, match=r"table public\.big"):  # the same, not a stuck or skipped slot
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


def test_an_event_debezium_cannot_build_stops_the_batch_or_is_left_out_as_configured(database: str) -> None:
    """NaN in a NOT NULL precise decimal: Debezium cannot build the event (a null in a required field). Under
    event.processing.failure.handling.mode fail (the default) the snapshot and the stream stop on it, naming the
    table, column, value, position and the ways past it, and never publish the null the schema forbids; under warn
    the event is left out, said in the task's summary and counted on walflow's status (tests/compat's failures
    scenario holds the records to Debezium's)."""
    from walflow.admin.cli import render
    from walflow.airflow.status import connector_status
    from walflow.errors import ConversionError

    run_sql(
        database,
        "CREATE TABLE nan (id int PRIMARY KEY, n numeric(10,2) NOT NULL)",
        "INSERT INTO nan VALUES (1, 1), (2, 'NaN'), (3, 3)",
    )
    failing = connector(unique("nan"))
    with pytest.raises(ConversionError) as raised:
        setup(failing, database)
    message = str(raised.value)
    for part in ("table public.nan column 'n'", "'NaN'", "decimal.handling.mode", "event.processing.failure"):
        assert part in message, (part, message)

    config = connector(unique("nan"), **{"event.processing.failure.handling.mode": "warn"})
    report = setup(config, database)
    assert report["snapshot"]["rows"] == 2
    run_sql(database, "INSERT INTO nan VALUES (4, 'NaN')", "INSERT INTO nan VALUES (5, 5)")
    summary = stream(config, database)
    assert summary.events_left_out == 1, summary
    assert any("public.nan" in w and "'NaN'" in w and "LSN" in w for w in summary.warnings), summary.warnings
    records = read_topic(f"{config.topic_prefix}.public.nan")
    assert sorted(r.key_payload["id"] for r in records) == [1, 3, 5]
    status = connector_status(config, database, lake=False)
    assert status["source"]["events_left_out"] == 2, status["source"]  # the snapshot's row and the stream's event
    assert "INCOMPLETE: 2 event(s)" in render(status)

    # fail mode in the stream: the batch stops before the transaction, naming its position
    strict = connector(
        config.name,
        **{"slot.name": config.slot_name, "publication.name": config.publication_name},
    )
    run_sql(database, "INSERT INTO nan VALUES (6, 'NaN')")
    with pytest.raises(ConversionError) as raised:
        stream(strict, database)
    message = str(raised.value)
    for part in ("table public.nan column 'n'", "'NaN'", "at LSN ", "event.processing.failure.handling.mode"):
        assert part in message, (part, message)
    assert "walflow bug" not in message


def test_a_value_the_stream_cannot_convert_stops_before_its_transaction_with_the_way_past(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL prints every value walflow streams, so a converter refusing one is a walflow bug; should it happen,
    the batch stops before that transaction (nothing after it confirmed, nothing before it sent again), naming the
    table, column, value and LSN, and column.exclude.list is the documented way past it. The refusal is injected:
    walflow's converters take every value PostgreSQL prints (tests/integration/test_types.py)."""
    import dataclasses

    from walflow.errors import ConversionError
    from walflow.records import events

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
    for statement in (
        "INSERT INTO conv VALUES (1, 1)",
        "INSERT INTO conv VALUES (2, 13)",
        "INSERT INTO conv VALUES (3, 3)",
    ):
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
        slot_at = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (config.slot_name,)
        ).fetchone()[0]
        (last,) = conn.execute(
            "SELECT value FROM walflow_state WHERE connector = %s AND key = 'last_batch'", (config.name,)
        ).fetchone()
    assert last["confirmed_to"] == slot_at and last["stopped_by"] == "value not convertible", last
    past = connector(
        config.name,
        **{
            "slot.name": config.slot_name,
            "publication.name": config.publication_name,
            "column.exclude.list": r"public\.conv\.n",
        },
    )
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
    assert query(database, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", same_prefix.slot_name) == [
        (0,)
    ]
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
    assert any("lacked table(s) public.b" in w and "incremental snapshot" in w for w in summary.warnings), (
        summary.warnings
    )
    assert query(
        database, "SELECT tablename FROM pg_publication_tables WHERE pubname = %s ORDER BY 1", config.publication_name
    ) == [("a",), ("b",)]
    run_sql(database, "INSERT INTO b VALUES (1)")
    assert stream(config, database).events == 1


def test_a_table_dropped_from_an_unmanaged_publication_fails_with_the_fix(database: str) -> None:
    run_sql(database, "CREATE TABLE a (id int PRIMARY KEY)", "CREATE TABLE b (id int PRIMARY KEY)")
    config = connector(unique("dbapub"), **{"publication.autocreate.mode": "disabled", "snapshot.mode": "no_data"})
    run_sql(database, f"CREATE PUBLICATION {config.publication_name} FOR TABLE a, b")  # the DBA's publication
    setup(config, database)
    run_sql(database, f"ALTER PUBLICATION {config.publication_name} DROP TABLE b")
    with pytest.raises(
        DriftError, match=rf"public\.b left publication .*ALTER PUBLICATION {config.publication_name} ADD TABLE"
    ):
        stream(config, database)


def test_a_recreated_table_with_another_key_type_is_refused_until_accepted(database: str) -> None:
    run_sql(database, "CREATE TABLE t (id int PRIMARY KEY, v text)")
    config = connector(unique("rekey"), **{"snapshot.mode": "no_data"})
    setup(config, database)
    run_sql(database, "INSERT INTO t VALUES (1, 'int key')")
    assert stream(config, database).events == 1
    run_sql(
        database,
        "INSERT INTO t VALUES (2, 'before the drop')",
        "DROP TABLE t",
        "CREATE TABLE t (id text PRIMARY KEY, v text)",
        "INSERT INTO t VALUES ('x', 'text key')",
    )
    with pytest.raises(DriftError, match=r"key of table public\.t changed from \(id int32\) to \(id string\)"):
        stream(config, database)
    assert [r.key_payload["id"] for r in read_topic(f"{config.topic_prefix}.public.t")] == [
        1,
        2,
    ]  # confirmed up to the drop
    setup(config, database)  # accepts the new key
    assert stream(config, database).events == 1
    # the new table is another relation under the name: with the lake on, the batch that found it re-reads it (its row
    # once more, as an incremental snapshot's; docs/lake.md, "Rows changed without change events")
    records = read_topic(f"{config.topic_prefix}.public.t")
    assert [(r.key_payload["id"], r.op) for r in records] == [(1, "c"), (2, "c"), ("x", "c"), ("x", "r")]


def test_tables_sharing_a_topic_are_refused(database: str) -> None:
    run_sql(database, 'CREATE TABLE "a""b" (id int PRIMARY KEY)', "CREATE TABLE a_b (id int PRIMARY KEY)")
    config = connector(unique("collide"))
    with pytest.raises(DriftError, match=r"""'public\.a"b' and 'public\.a_b' -> topic"""):
        setup(config, database)
    assert slot_lsn(database, config.slot_name) is None
    run_sql(
        database,
        'DROP TABLE "a""b"',
        'CREATE TABLE "αβ" (id int PRIMARY KEY)',
        'CREATE TABLE "γδ" (id int PRIMARY KEY)',
    )
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
    schema = "_" * 60
    run_sql(
        database,
        f"CREATE SCHEMA {schema}",
        f"CREATE TABLE {schema}.t (id int PRIMARY KEY)",
        "CREATE TABLE orders_in_the_warehouse_of_the_north (id int PRIMARY KEY)",
    )
    # the reported pattern: minutes of backtracking in Python's re on such names; bounded now
    started = time.monotonic()
    config = connector(unique("regex"), **{"table.include.list": r"(?:[a-z_.]+)+\d", "snapshot.mode": "no_data"})
    setup(config, database)
    assert stream(config, database).events == 0
    assert time.monotonic() - started < 60
    # a pattern that exceeds the bound on a name fails clearly, naming the pattern, the list and the name
    runaway = r"(?:(?:_|_)|(?:_|__))+!"
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
    # an expression that only computes (IMMUTABLE functions), but for seconds per row
    slow = "md5(repeat(md5(id::text), 5000000)) IS NOT NULL"
    signal_id = send_signal(
        database, "execute-snapshot", {"data-collections": ["public.t"], "additional-condition": slow}
    )
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
        with pytest.raises(
            SourceError, match=rf"database '{name}' uses encoding SQL_ASCII; walflow needs UTF8"
        ) as raised:
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


# -- 8. names are data: '%', braces, quotes and every other character PostgreSQL allows ---------------------------
ODD_SCHEMA = 'Sch%s {x} "q" \\'
ODD_TABLE = 'T%d{0}\'s "t" . ü'
ODD_KEY = "k%s{}"
ODD_COLUMN = 'v%d {x} "q"'
ODD_TYPE = "dom%d{z}"


def ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def test_names_with_placeholder_signs_braces_and_quotes_work_from_setup_to_the_lake(spark: Any, database: str) -> None:
    """A schema, table, key column, column and key type whose names hold ``%`` (psycopg's placeholder sign), braces,
    quotes, a backslash, a dot and a non-ASCII letter: the initial snapshot, streaming (a key change included), an
    incremental snapshot whose condition names the odd column, and the lake all work, and the lake equals the source
    row by row."""
    import regex

    from tests.support import apply_lake, lake_rows, replay
    from walflow.lake.naming import table_name

    table = f"{ident(ODD_SCHEMA)}.{ident(ODD_TABLE)}"
    run_sql(
        database,
        f"CREATE SCHEMA {ident(ODD_SCHEMA)}",
        f"CREATE DOMAIN {ident(ODD_SCHEMA)}.{ident(ODD_TYPE)} AS integer",
        f"CREATE TABLE {table} ({ident(ODD_KEY)} {ident(ODD_SCHEMA)}.{ident(ODD_TYPE)} PRIMARY KEY,"
        f" {ident(ODD_COLUMN)} text)",
        f"INSERT INTO {table} SELECT g, 'v%' || g FROM generate_series(1, 250) g",
    )
    config = signals_connector(database, **{"snapshot.mode": "initial"})  # the initial snapshot pages by the odd key
    run_sql(
        database,
        f"INSERT INTO {table} VALUES (251, '{{new}} %s')",
        f"UPDATE {table} SET {ident(ODD_COLUMN)} = 'changed %d' WHERE {ident(ODD_KEY)} = 7",
        f"UPDATE {table} SET {ident(ODD_KEY)} = 1000 WHERE {ident(ODD_KEY)} = 8",  # a key change
        f"DELETE FROM {table} WHERE {ident(ODD_KEY)} = 9",
    )
    assert stream(config, database).events >= 4
    # an incremental snapshot of the table, chunked by the odd key, with a condition naming the odd column
    signal_id = send_signal(
        database,
        "execute-snapshot",
        {
            "data-collections": [regex.escape(f"{ODD_SCHEMA}.{ODD_TABLE}")],
            "additional-condition": f"{ident(ODD_COLUMN)} LIKE 'v%' OR {ident(ODD_KEY)} > 900",
        },
    )
    for _ in range(10):
        summary = stream(config, database)
        if not summary.events and not summary.snapshot_rows:
            break
    status = signal_status(database, config, signal_id)
    assert status["status"] == "completed" and status["rows"] == 248, status  # 250 - 3 changed + key 1000

    source = {row[0]: row[1] for row in query(database, f"SELECT {ident(ODD_KEY)}, {ident(ODD_COLUMN)} FROM {table}")}
    topic = (
        f"{config.topic_prefix}.{regex.sub(r'[^A-Za-z0-9._-]', '_', ODD_SCHEMA)}"
        f".{regex.sub(r'[^A-Za-z0-9._-]', '_', ODD_TABLE)}"
    )
    events = {json.loads(key)[ODD_KEY]: after[ODD_COLUMN] for key, after in replay(read_topic(topic)).items()}
    assert events == source
    apply_lake(spark, config)
    lake = {row[ODD_KEY]: row[ODD_COLUMN] for row in lake_rows(config.topic_prefix, table_name(ODD_SCHEMA, ODD_TABLE))}
    assert lake == source


# -- 9. a condition is data: it reads the row's visible columns and calls nothing that acts ----------------------
@contextmanager
def login_role(database: str, *grants: str) -> Iterator[str]:
    """A LOGIN role of the test with ``grants`` (statements, ``{role}`` standing for its name); yields its DSN and
    drops it afterwards."""
    from tests.privileges import PASSWORD

    role = f"w_{uuid.uuid4().hex[:8]}"
    run_sql(database, f"CREATE ROLE {role} LOGIN PASSWORD '{PASSWORD}'", *(g.format(role=role) for g in grants))
    try:
        yield " ".join(
            [
                *(p for p in database.split() if not p.startswith(("user=", "password="))),
                f"user={role}",
                f"password={PASSWORD}",
            ]
        )
    finally:
        run_sql(database, f"DROP OWNED BY {role}", f"DROP ROLE {role}")


def signal_writer(database: str) -> Any:
    """A role that may insert into the signal table and do nothing else (roles.sql's -v signal_writers)."""
    return login_role(database, f"GRANT INSERT ON {SIGNALS} TO {{role}}")


def slots(database: str) -> list[tuple[str, str]]:
    """This test database's slots, and every physical slot of the server (other tests' logical slots come and go)."""
    return query(
        database,
        "SELECT slot_name, slot_type FROM pg_replication_slots WHERE database = current_database() OR slot_type ="
        " 'physical' ORDER BY 1",
    )


def test_a_condition_that_would_act_or_read_hidden_columns_is_refused_and_changes_nothing(
    database: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The conditions of the second round's report, inserted by a role that may only insert signals and streamed by the
    connector role, with conditions evaluated as the reader role: each fails its signal naming the cause; no backend
    is terminated, no slot is moved or created, no session setting changes the floats of later snapshot rows, no value
    of an excluded or masked column (nor of a visible one) reaches the state table or the log,
    and the stream goes on."""
    run_sql(
        database,
        "CREATE TABLE people (id int PRIMARY KEY, name text, email text, ssn text, score float8)",
        "INSERT INTO people SELECT g, 'name' || g, 'secret.mail' || g || '@example.com', 'ssn-' || g,"
        " 1::float8 / 3 + g FROM generate_series(1, 30) g",
        # a cast to it runs its CHECK, which calls a volatile function
        "CREATE DOMAIN acting AS int CHECK (VALUE > random() - 1)",
    )
    config = signals_connector(
        database,
        **{"column.exclude.list": r"public\.people\.email", "column.mask.with.4.chars": r"public\.people\.ssn"},
    )
    writing = signal_writer(database)
    writer = writing.__enter__()
    before_slots = slots(database)
    slot_at = slot_lsn(database, config.slot_name)
    hostile = {
        "terminate": ("pg_terminate_backend(pg_backend_pid())", "pg_terminate_backend"),
        "advance": (
            f"pg_replication_slot_advance('{config.slot_name}', pg_current_wal_flush_lsn()) IS NOT NULL",
            "pg_replication_slot_advance",
        ),
        "physical": (
            "pg_create_physical_replication_slot('walflow_evil') IS NOT NULL",
            "pg_create_physical_replication_slot",
        ),
        "setting": ("set_config('extra_float_digits', '-15', false) IS NOT NULL", "set_config"),
        "file": ("length(pg_read_file('/etc/hostname')) > 0", "pg_read_file"),
        "excluded": ("CAST(email AS int) = 0", "reads column 'email' of public.people, which the events leave out"),
        "masked": ("CAST(ssn AS int) = 0", "reads column 'ssn' of public.people, which the events carry changed"),
        "visible": ("CAST(name AS int) = 0", "SQLSTATE 22P02"),  # evaluated, fails on the rows: told without the value
        "subquery": ("id IN (SELECT id FROM people)", "a subquery"),
        "whole_row": ("walflow_t::text LIKE '%secret%'", "'walflow_t', which is not a column"),
        "domain": ("CAST(id AS acting) = 1", "casts to acting, whose CHECK "),
    }
    ids = {}
    for label, (condition, _) in hostile.items():
        ids[label] = send_signal(
            writer, "execute-snapshot", {"data-collections": ["public.people"], "additional-condition": condition}
        )
    good = send_signal(
        writer,
        "execute-snapshot",
        {"data-collections": ["public.people"], "additional-condition": "id <= 10 AND lower(name) LIKE 'name%'"},
    )
    run_sql(database, "INSERT INTO people VALUES (100, 'after the signals', 'x@example.com', 'ssn-x', 0.5)")
    with caplog.at_level(logging.INFO, logger="walflow"):
        for _ in range(10):
            summary = stream(config, database)
            if not summary.events and not summary.snapshot_rows:
                break
    writing.__exit__(None, None, None)
    for label, (_condition, cause) in hostile.items():
        status = signal_status(database, config, ids[label])
        assert status["status"] == "failed" and cause in status["error"], (label, status)
        if label in ("terminate", "advance", "physical", "setting", "file", "domain"):
            assert "which is VOLATILE" in status["error"], status
    assert "calls random(), which is VOLATILE" in signal_status(database, config, ids["domain"])["error"]
    assert signal_status(database, config, good)["status"] == "completed"
    # nothing changed on the server: the same slots, the connector's not moved by a condition (the row inserted after
    # the signals was streamed, not skipped), no backend terminated (the batches all ran)
    assert slots(database) == before_slots and slot_lsn(database, config.slot_name) != slot_at
    records = read_topic(f"{config.topic_prefix}.public.people")
    assert [r.key_payload["id"] for r in records if r.op == "c"] == [100]
    snapshot_rows = {r.payload["after"]["id"]: r.payload["after"] for r in records if r.op == "r"}
    assert sorted(snapshot_rows) == list(range(1, 11))
    assert all(row["score"] == 1.0 / 3 + row["id"] for row in snapshot_rows.values())  # full float precision
    # no value revealed: not the excluded e-mails, not the masked numbers, not the visible names the cast failed on
    revealed = json.dumps([signal_status(database, config, i) for i in ids.values()]) + "\n".join(
        r.getMessage() for r in caplog.records
    )
    for value in ("secret.mail", "ssn-", '"name1"', 'name1"'):
        assert value not in revealed, value
    assert stream(config, database).events == 0  # the stream goes on


def test_a_numeric_of_any_length_never_stops_the_stream(database: str) -> None:
    """Values an application role may write into an unconstrained numeric column: one of 5,001 digits (beyond Python's
    4,300-digit limit, which stopped every batch) and the longest PostgreSQL accepts, streamed and snapshotted as
    Debezium sends them (its VariableScaleDecimal: scale, and the unscaled value's bytes)."""
    from tests.integration.test_types import LONGEST_FRACTION, LONGEST_NUMERIC, LONGEST_WHOLE, long_int, unscaled

    run_sql(database, "CREATE TABLE amounts (id int PRIMARY KEY, n numeric)")
    config = signals_connector(database)
    run_sql(
        database,
        f"INSERT INTO amounts VALUES (1, '{'9' * 5001}'), (2, '{LONGEST_NUMERIC}'), (3, '-{LONGEST_NUMERIC}'),"
        " (4, 1.5)",
    )
    send_signal(database, "execute-snapshot", {"data-collections": ["public.amounts"]})
    for _ in range(5):
        summary = stream(config, database)
        if not summary.events and not summary.snapshot_rows:
            break
    longest = long_int(LONGEST_WHOLE + LONGEST_FRACTION)
    want = {
        1: {"scale": 0, "value": unscaled(long_int("9" * 5001))},
        2: {"scale": 16383, "value": unscaled(longest)},
        3: {"scale": 16383, "value": unscaled(-longest)},
        4: {"scale": 1, "value": unscaled(15)},
    }
    records = read_topic(f"{config.topic_prefix}.public.amounts")
    for op in ("c", "r"):  # streamed, then the incremental snapshot's rows
        assert {r.payload["after"]["id"]: r.payload["after"]["n"] for r in records if r.op == op} == want, op


def test_only_the_connector_writes_logical_decoding_messages_and_an_oversized_one_can_be_skipped(database: str) -> None:
    """roles.sql revokes pg_logical_emit_message from PUBLIC: an application's login cannot write a message into the
    WAL the connector reads (one too large for a Kafka record stopped every batch, from any login, with a new prefix
    each time). The connector's own oversized message is skipped, with a warning, under
    walflow.message.oversized.handling.mode: skip."""
    from tests.privileges import as_connector

    run_sql(database, "CREATE TABLE t (id int PRIMARY KEY)")
    with login_role(database) as app, pytest.raises(psycopg.errors.InsufficientPrivilege):
        run_sql(app, "SELECT pg_logical_emit_message(true, 'bulky', repeat('m', 2000000))")
    config = connector(unique("skipmsg"), **{"walflow.message.oversized.handling.mode": "skip"})
    setup(config, database)
    run_sql(as_connector(database), "SELECT pg_logical_emit_message(true, 'bulky', repeat('m', 2000000))")
    run_sql(database, "INSERT INTO t VALUES (1)")
    summary = stream(config, database)
    assert summary.events == 1 and any("prefix 'bulky'" in w and "skip" in w for w in summary.warnings), (
        summary.warnings
    )
    assert [r.key_payload["id"] for r in read_topic(f"{config.topic_prefix}.public.t")] == [1]


def test_thousands_of_signals_in_one_insert_wait_instead_of_queueing(
    database: str, caplog: pytest.LogCaptureFixture
) -> None:
    """One INSERT ... SELECT generate_series(...) of signals by a role that may only insert them: at most
    walflow.signal.queue.max are queued at a time, the rest wait in the state table (never hundreds of snapshots
    queued at once) and are queued in arrival order as snapshots end; a stop-snapshot reaches waiting ones too."""
    run_sql(database, "CREATE TABLE t (id int PRIMARY KEY)", "INSERT INTO t SELECT generate_series(1, 5)")
    config = signals_connector(database, **{"walflow.signal.queue.max": 2})
    data = json.dumps({"data-collections": ["public.t"]})
    with signal_writer(database) as writer:
        run_sql_params(
            writer,
            f"INSERT INTO {SIGNALS} SELECT 'bulk-' || g, 'execute-snapshot', %s FROM generate_series(1, 60) g",
            data,
        )
        with caplog.at_level(logging.INFO, logger="walflow"):
            stream(config, database)
        # each round of the batch finished one snapshot and queued the next waiting one: all ran, in arrival order
        messages = [r.getMessage() for r in caplog.records]
        assert sum(" waits: 2 incremental snapshot(s) are queued" in m for m in messages) == 60 - 3
        started = [m.split()[2] for m in messages if m.startswith("incremental snapshot bulk-") and " completed" in m]
        assert started == [f"bulk-{g}" for g in range(1, 61)]
        assert len(read_topic(f"{config.topic_prefix}.public.t")) == 60 * 5
        # a stop-snapshot without tables, in the same transaction as more signals: the running, the queued and every
        # waiting one end 'stopped'
        with psycopg.connect(writer, autocommit=True) as conn, conn.transaction():
            conn.execute(
                f"INSERT INTO {SIGNALS} SELECT 'more-' || g, 'execute-snapshot', %s FROM generate_series(1, 50) g",
                (data,),
            )
            conn.execute(f"INSERT INTO {SIGNALS} VALUES ('stop-all', 'stop-snapshot', '{{}}')")
    stream(config, database)
    statuses = query(
        database, "SELECT value->>'status', count(*) FROM walflow_state WHERE key LIKE 'signal:more-%%' GROUP BY 1"
    )
    assert statuses == [("stopped", 50)], statuses
    run_sql(database, "INSERT INTO t VALUES (6)")
    assert stream(config, database).events == 1


def _slow_name_length(pattern: str) -> tuple[int, float]:
    """How many underscores make matching ``pattern`` (which backtracks over them) against ``public.<underscores>0``
    take 0.05 to 0.2 s of CPU time here, and the time it takes."""
    compiled = Pattern(pattern, "the test's calibration")
    for length in range(6, 20):
        started = time.thread_time()
        compiled.fullmatch(f"public.{'_' * length}0")
        spent = time.thread_time() - started
        if spent >= 0.05:
            assert spent < 0.2, f"no length of name takes 0.05-0.2 s: {length} took {spent:.3f} s"
            return length, spent
    raise AssertionError(f"{pattern!r} never took 0.05 s on names of up to 19 underscores")


def test_a_signals_patterns_share_one_time_bound(database: str) -> None:
    """Each match of a pattern is bounded (0.25 s of CPU time), but a signal naming a slow pattern against many tables
    took that bound per table: all the matches of one signal now share 1 s."""
    slow_pattern = r"public\.(?:(?:_|_)|(?:_|__))+!"
    length, spent = _slow_name_length(slow_pattern)
    # each match well under the per-match bound, all of them together twice the signal's (tables named to suit the
    # machine: the pattern's time triples with each underscore, and machines differ)
    names = [f"{'_' * length}{i}" for i in range(min(60, int(2.0 / spent) + 1))]
    run_sql(database, *(f"CREATE TABLE {n} (id int PRIMARY KEY)" for n in names))
    config = signals_connector(database)
    slow = send_signal(database, "execute-snapshot", {"data-collections": [slow_pattern]})
    started = time.monotonic()
    stream(config, database)
    assert time.monotonic() - started < 30
    status = signal_status(database, config, slow)
    assert status["status"] == "failed" and "s of CPU time in all" in status["error"], status


# -- 9b. roles.sql never merges applications' roles ------------------------------------------------------------------
def test_each_table_owner_has_a_group_of_its_own_and_no_login_but_the_connector_writes_the_wal(
    database: str, connector_role: dict[str, str]
) -> None:
    """roles.sql never merges applications' roles: each table owner's captured tables go to a group of its own
    (the connector and that owner its members), so neither application gains the other's tables, and the signal
    table is the connector's. Logical decoding messages can be written by the connector role only; the reader role
    reads the captured tables and nothing else."""
    role = connector_role["role"]
    with psycopg.connect(database) as conn:
        owners = dict(
            conn.execute(
                "SELECT relname, relowner::regrole::text FROM pg_class WHERE relname IN ('customers', 'orders',"
                " 'audit', 'walflow_signal')"
            ).fetchall()
        )
    assert owners == {
        "customers": f"{role}_owns_{role}_app_a",
        "orders": f"{role}_owns_{role}_app_b",
        "audit": f"{role}_app_a",
        "walflow_signal": role,
    }
    with psycopg.connect(connector_role["app_a_dsn"], autocommit=True) as conn:
        conn.execute("ALTER TABLE customers ADD COLUMN IF NOT EXISTS extra text")  # still its own
        for statement in (
            "ALTER TABLE orders ADD COLUMN extra text",
            "DROP TABLE walflow_signal",
            "SELECT count(*) FROM orders",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
    with psycopg.connect(connector_role["app_b_dsn"], autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("ALTER TABLE customers ADD COLUMN extra2 text")
    # logical decoding messages: revoked from PUBLIC, granted to the connector role
    for who in ("writer_dsn", "reader_dsn", "app_a_dsn"):
        with psycopg.connect(connector_role[who], autocommit=True) as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT pg_logical_emit_message(false, 'x', 'y')")
    with psycopg.connect(connector_role["dsn"], autocommit=True) as conn:
        conn.execute("SELECT pg_logical_emit_message(false, 'walflow.test', 'y')")
    with psycopg.connect(connector_role["reader_dsn"], autocommit=True) as conn:
        flags = conn.execute(
            "SELECT rolsuper, rolreplication, rolbypassrls FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        assert flags == (False, False, False)
        assert conn.execute("SELECT count(*) FROM customers").fetchone() == (250,)
        for statement in (
            "SELECT count(*) FROM audit",
            "SELECT count(*) FROM walflow_signal",
            "INSERT INTO customers VALUES (5000, 'x')",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)


# -- 10. the embedded runtime is closed ------------------------------------------------------------------------------
def test_the_embedded_runtime_asks_for_passwords_and_listens_on_loopback_only() -> None:
    """The tests' own runtime is made by the same code as the one `make demo` and `airflow standalone` use: Airflow's
    API on 127.0.0.1 with the simple auth manager's admin (no 'all admins'), PostgreSQL with scram-sha-256 everywhere
    (a login without the password is refused), the demo Connection as the least-privilege role, the generated
    passwords in files only their owner reads, the cluster's folder private. (The UI test logs in with the password.)"""
    import os
    import stat

    from sandbox import embedded

    env = dict(
        line.removeprefix("export ").split("=", 1)
        for line in embedded.ENV_FILE.read_text().splitlines()
        if line.startswith("export ")
    )
    env = {k: v.strip("'") for k, v in env.items()}
    assert env["AIRFLOW__API__HOST"] == "127.0.0.1" and "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS" not in env
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] == "admin:admin"
    assert json.loads(env["AIRFLOW_CONN_POSTGRES_DEFAULT"].replace("'\"'\"'", "'"))["login"] == embedded.CONNECTOR_ROLE
    for path in (embedded.ENV_FILE, embedded.SECRETS_FILE, embedded.AIRFLOW_PASSWORDS):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(embedded.STATE.stat().st_mode) == 0o700
    params = dict(p.split("=", 1) for p in pg_dsn().split())
    for user in ("postgres", embedded.CONNECTOR_ROLE):
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(
                f"host=127.0.0.1 port={params['port']} user={user} dbname=postgres password=", connect_timeout=5
            ).close()
    with psycopg.connect(pg_dsn()) as conn:
        rules = conn.execute("SELECT DISTINCT auth_method FROM pg_hba_file_rules").fetchall()
        listen = conn.execute("SHOW listen_addresses").fetchone()
    assert rules == [("scram-sha-256",)] and listen == ("127.0.0.1",)
    if os.geteuid() == 0:
        root = embedded._pg_data_root()
        info = os.lstat(root)
        assert (
            root.parent in (embedded.DISK_PARENT, embedded.MEMORY_PARENT)
            and stat.S_IMODE(info.st_mode) == 0o700
            and info.st_uid == embedded._pg_uid()
        )
        assert len(root.name) > len("walflow-pg-") + 6  # a random name, not one derived from the project's path


# -- 11. lake catalog credentials come from a Connection -----------------------------------------------------------
def test_lake_catalog_credentials_never_reach_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A credential in walflow.lake.spark.conf (which reaches spark-submit's command line, the task log and the
    serialized DAG) is refused with the fix; from the catalog's Connection it reaches the job's environment only."""
    from walflow.airflow.dag_factory import build_connector_dags
    from walflow.config.connector import parse_config
    from walflow.lake.settings import CATALOG_ENV

    with pytest.raises(
        ConfigError,
        match=r"'spark\.sql\.catalog\.lake\.credential' holds a credential.*walflow\.lake\.catalog\.conn\.id",
    ):
        parse_config(
            {
                "name": "x",
                "topic.prefix": "x",
                "walflow.lake.spark.conf": {"spark.sql.catalog.lake.credential": "id:secret"},
            },
            "<test>",
        )
    parse_config(
        {
            "name": "x",
            "topic.prefix": "x",
            "walflow.lake.spark.conf": {"spark.hadoop.fs.s3a.aws.credentials.provider": "x.Y"},
        },
        "<test>",
    )  # no secret

    secret = f"s3cr3t-{uuid.uuid4().hex}"
    name = unique("cat")
    (tmp_path / f"{name}.yaml").write_text(
        f"name: {name}\ntopic.prefix: {name}\nwalflow.lake.catalog.conn.id: {name}_catalog\n"
    )
    monkeypatch.setenv("WALFLOW_CONNECTORS_DIR", str(tmp_path))
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{name.upper()}_CATALOG",
        json.dumps(
            {
                "conn_type": "generic",
                "login": "client",
                "password": secret,
                "extra": {"type": "rest", "uri": "https://catalog.invalid/api"},
            }
        ),
    )
    apply = build_connector_dags()[f"{name}__stream"].get_task("apply_to_lake")
    (config,) = load_all(tmp_path)
    apply._add_catalog(config)
    shown = json.dumps([apply.conf, apply.application_args, apply.name])
    assert secret not in shown and "catalog.invalid" not in shown
    hidden = json.loads(apply.env_vars[CATALOG_ENV])
    assert (
        hidden["spark.sql.catalog.lake.credential"] == f"client:{secret}"
        and hidden["spark.sql.catalog.lake.type"] == "rest"
    )
