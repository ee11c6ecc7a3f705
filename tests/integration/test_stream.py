"""Streaming against the embedded PostgreSQL and broker: the records Debezium would produce."""

from __future__ import annotations

import base64

import psycopg
import pytest

from tests.privileges import as_connector, database_role
from tests.support import connector, prepare_source, read_topic, replay, stream, unique
from walflow.errors import ConcurrentRunError, SlotError
from walflow.source.connection import connect


def setup(dsn: str, **overrides: object):
    config = connector(unique("s"), **overrides)
    prepare_source(config, dsn)
    return config


def run_sql(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


CUSTOMERS = """
CREATE TABLE customers (
    id int PRIMARY KEY,
    first_name text NOT NULL,
    email varchar(255),
    balance numeric(10, 2),
    joined date,
    updated timestamp(6),
    active boolean DEFAULT true
)
"""


def test_insert_update_delete_with_tombstone(database: str) -> None:
    run_sql(database, CUSTOMERS)
    config = setup(database)
    run_sql(
        database,
        "INSERT INTO customers VALUES (1, 'Anne', 'annek@noanswer.org', 12.50, '2020-02-29',"
        " '2018-06-20 15:13:16.945104', true)",
        "UPDATE customers SET first_name = 'Anne Marie' WHERE id = 1",
        "DELETE FROM customers WHERE id = 1",
    )
    summary = stream(config, database)
    topic = f"{config.topic_prefix}.public.customers"
    assert summary.events == 3 and summary.events_per_topic == {topic: 3}
    records = read_topic(topic)
    assert [r.op for r in records] == ["c", "u", "d", None]
    create, update, delete, tombstone = records

    # key: schema + payload, named <prefix>.<schema>.<table>.Key
    assert create.key["schema"] == {
        "type": "struct",
        "fields": [{"type": "int32", "optional": False, "field": "id"}],
        "optional": False,
        "name": f"{config.topic_prefix}.public.customers.Key",
    }
    assert create.key_payload == {"id": 1}

    # value: the envelope
    schema = create.value["schema"]
    assert schema["name"] == f"{config.topic_prefix}.public.customers.Envelope"
    assert [f["field"] for f in schema["fields"]] == [
        "before",
        "after",
        "source",
        "transaction",
        "op",
        "ts_ms",
        "ts_us",
        "ts_ns",
    ]
    after_fields = {f["field"]: f for f in schema["fields"][1]["fields"]}
    assert after_fields["id"] == {"type": "int32", "optional": False, "field": "id"}
    assert after_fields["first_name"] == {"type": "string", "optional": False, "field": "first_name"}
    assert after_fields["email"] == {"type": "string", "optional": True, "field": "email"}
    assert after_fields["balance"]["name"] == "org.apache.kafka.connect.data.Decimal"
    assert after_fields["joined"]["name"] == "io.debezium.time.Date"
    assert after_fields["updated"]["name"] == "io.debezium.time.MicroTimestamp"
    assert schema["fields"][2]["name"] == "io.debezium.connector.postgresql.Source"

    p = create.payload
    assert p["before"] is None
    assert p["after"] == {
        "id": 1,
        "first_name": "Anne",
        "email": "annek@noanswer.org",
        "balance": base64.b64encode((1250).to_bytes(2, "big")).decode(),
        "joined": 18321,
        "updated": 1529507596945104,
        "active": True,
    }
    src = p["source"]
    assert src["connector"] == "postgresql" and src["name"] == config.topic_prefix
    assert src["db"] == database.split("dbname=")[1]
    assert (src["schema"], src["table"], src["snapshot"]) == ("public", "customers", "false")
    assert isinstance(src["txId"], int) and isinstance(src["lsn"], int) and src["xmin"] is None
    assert isinstance(src["ts_ms"], int) and isinstance(p["ts_ms"], int) and p["ts_ms"] >= src["ts_ms"]
    assert p["transaction"] is None

    assert update.payload["before"] is None  # REPLICA IDENTITY DEFAULT
    assert update.payload["after"]["first_name"] == "Anne Marie"
    assert delete.payload["before"]["id"] == 1 and delete.payload["after"] is None
    assert tombstone.value is None and tombstone.key_payload == {"id": 1}
    assert src["lsn"] < update.payload["source"]["lsn"] < delete.payload["source"]["lsn"]


def test_second_run_without_changes_produces_nothing(database: str) -> None:
    run_sql(database, CUSTOMERS)
    config = setup(database)
    run_sql(database, "INSERT INTO customers (id, first_name) VALUES (1, 'a')")
    assert stream(config, database).events == 1
    again = stream(config, database)
    assert again.events == 0 and again.records == 0
    assert len(read_topic(f"{config.topic_prefix}.public.customers")) == 1


def test_primary_key_change_is_delete_tombstone_create(database: str) -> None:
    run_sql(database, CUSTOMERS, "INSERT INTO customers (id, first_name) VALUES (1, 'a')")
    config = setup(database)
    run_sql(database, "UPDATE customers SET id = 2 WHERE id = 1")
    stream(config, database)
    delete, tombstone, create = read_topic(f"{config.topic_prefix}.public.customers")
    assert (delete.op, tombstone.value, create.op) == ("d", None, "c")
    assert delete.key_payload == {"id": 1} and tombstone.key_payload == {"id": 1} and create.key_payload == {"id": 2}
    assert b'"payload":{"id":2}' in delete.headers["__debezium.newkey"]
    assert b'"payload":{"id":1}' in create.headers["__debezium.oldkey"]
    assert create.payload["after"]["first_name"] == "a"


def test_replica_identity_full_fills_before(database: str) -> None:
    run_sql(
        database,
        CUSTOMERS,
        "ALTER TABLE customers REPLICA IDENTITY FULL",
        "INSERT INTO customers (id, first_name) VALUES (1, 'a')",
    )
    config = setup(database)
    run_sql(database, "UPDATE customers SET first_name = 'b' WHERE id = 1", "DELETE FROM customers WHERE id = 1")
    update, delete, _ = read_topic_after(config, database)
    assert update.payload["before"]["first_name"] == "a" and update.payload["after"]["first_name"] == "b"
    assert delete.payload["before"]["first_name"] == "b"


def read_topic_after(config, dsn):
    stream(config, dsn)
    return read_topic(f"{config.topic_prefix}.public.customers")


def test_truncate_event_only_when_not_skipped(database: str) -> None:
    run_sql(database, CUSTOMERS, "INSERT INTO customers (id, first_name) VALUES (1, 'a')")
    skipping = setup(database)
    including = setup(database, **{"skipped.operations": "none"})
    run_sql(database, "TRUNCATE customers")
    assert stream(skipping, database).events == 0
    assert stream(including, database).events == 1
    (truncate,) = read_topic(f"{including.topic_prefix}.public.customers")
    assert truncate.op == "t" and truncate.key is None
    assert truncate.payload["source"]["table"] == "customers"


def test_multi_table_transaction_metadata(database: str) -> None:
    run_sql(database, "CREATE TABLE a (id int PRIMARY KEY)", "CREATE TABLE b (id int PRIMARY KEY)")
    config = setup(database, **{"provide.transaction.metadata": True})
    with psycopg.connect(database, autocommit=False) as conn:
        conn.execute("INSERT INTO a VALUES (1), (2)")
        conn.execute("INSERT INTO b VALUES (1)")
        conn.commit()
    stream(config, database)
    begin, end = read_topic(f"{config.topic_prefix}.transaction")
    assert begin.payload["status"] == "BEGIN" and begin.payload["event_count"] is None
    assert end.payload["status"] == "END" and end.payload["event_count"] == 3
    # ids are txId:LSN; BEGIN's LSN may be its own record's (newer reference) while END and the data
    # events carry the commit's, so only the transaction parts must agree
    begin_txid, begin_lsn = begin.payload["id"].split(":")
    txid, lsn = end.payload["id"].split(":")
    assert begin_txid == txid and int(txid) > 0 and int(lsn) > 0 and int(begin_lsn) > 0
    assert sorted((d["data_collection"], d["event_count"]) for d in end.payload["data_collections"]) == [
        ("public.a", 2),
        ("public.b", 1),
    ]
    assert begin.key_payload == {"id": begin.payload["id"]} and end.key_payload == {"id": end.payload["id"]}
    a_events = read_topic(f"{config.topic_prefix}.public.a")
    b_events = read_topic(f"{config.topic_prefix}.public.b")
    blocks = [e.payload["transaction"] for e in a_events + b_events]
    # Debezium 3.6: each record's id is the transaction id and the LSN of that record (END: the commit's end)
    xid = end.payload["id"].split(":")[0]
    assert [e.payload["transaction"]["id"] for e in a_events + b_events] == [
        f"{xid}:{e.payload['source']['lsn']}" for e in a_events + b_events
    ]
    assert begin.payload["id"].split(":")[0] == xid
    assert sorted(b["total_order"] for b in blocks) == [1, 2, 3]
    assert [b["data_collection_order"] for b in (e.payload["transaction"] for e in a_events)] == [1, 2]


def test_column_added_mid_stream(database: str) -> None:
    run_sql(database, "CREATE TABLE t (id int PRIMARY KEY, v text)")
    config = setup(database)
    run_sql(
        database,
        "INSERT INTO t VALUES (1, 'a')",
        "ALTER TABLE t ADD COLUMN w int NOT NULL DEFAULT 5",
        "INSERT INTO t VALUES (2, 'b', 6)",
    )
    stream(config, database)
    first, second = read_topic(f"{config.topic_prefix}.public.t")
    assert first.payload["after"] == {"id": 1, "v": "a"}
    assert second.payload["after"] == {"id": 2, "v": "b", "w": 6}
    fields = second.value["schema"]["fields"][1]["fields"]
    assert fields[-1] == {"type": "int32", "optional": False, "default": 5, "field": "w"}


def test_table_without_primary_key_has_null_key(database: str) -> None:
    run_sql(database, "CREATE TABLE log (msg text)")
    config = setup(database)
    run_sql(database, "INSERT INTO log VALUES ('hello')")
    stream(config, database)
    (record,) = read_topic(f"{config.topic_prefix}.public.log")
    assert record.key is None and record.payload["after"] == {"msg": "hello"}
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
        run_sql(database, "UPDATE log SET msg = 'x'")  # PostgreSQL refuses: no replica identity


def test_filters_and_key_columns(database: str) -> None:
    run_sql(database, CUSTOMERS, "CREATE TABLE secret (id int PRIMARY KEY)")
    config = setup(
        database,
        **{
            "table.include.list": r"public\.customers",
            "column.exclude.list": r"public\.customers\.email",
            "message.key.columns": "public.customers:first_name",
        },
    )
    run_sql(
        database,
        "INSERT INTO customers (id, first_name, email) VALUES (1, 'a', 'x@y')",
        "INSERT INTO secret VALUES (1)",
    )
    summary = stream(config, database)
    assert summary.events == 1 and summary.filtered == 1
    (record,) = read_topic(f"{config.topic_prefix}.public.customers")
    assert "email" not in record.payload["after"]
    assert record.key_payload == {"first_name": "a"}
    assert read_topic(f"{config.topic_prefix}.public.secret") == []


def test_schemas_disabled(database: str) -> None:
    run_sql(database, CUSTOMERS)
    config = setup(database, **{"key.converter.schemas.enable": False, "value.converter.schemas.enable": False})
    run_sql(database, "INSERT INTO customers (id, first_name) VALUES (1, 'a')")
    stream(config, database)
    (record,) = read_topic(f"{config.topic_prefix}.public.customers")
    assert record.key == {"id": 1}
    assert "schema" not in record.value and record.value["op"] == "c"


def test_replay_gives_source_state(database: str) -> None:
    run_sql(database, CUSTOMERS)
    config = setup(database)
    run_sql(
        database,
        "INSERT INTO customers (id, first_name) SELECT g, 'n' || g FROM generate_series(1, 500) g",
        "UPDATE customers SET first_name = first_name || '!' WHERE id % 3 = 0",
        "DELETE FROM customers WHERE id % 7 = 0",
        "UPDATE customers SET id = id + 1000 WHERE id % 11 = 0",
    )
    stream(
        config,
        database,
    )
    state = replay(read_topic(f"{config.topic_prefix}.public.customers"))
    with psycopg.connect(database) as conn:
        rows = dict(conn.execute("SELECT id, first_name FROM customers").fetchall())
    assert {v["id"]: v["first_name"] for v in state.values()} == rows


def test_asynchronous_commits_are_never_skipped(database: str) -> None:
    """Transactions committed with synchronous_commit=off are written to WAL before they are flushed, and logical
    decoding reads only flushed WAL: batches running beside such a writer must stream every one of them (a batch that
    streamed up to the written end and moved the slot there skipped about half of them)."""
    import threading

    run_sql(database, "CREATE TABLE async_t (id int PRIMARY KEY, pad text)")
    config = setup(database)
    rows = 8_000
    done = threading.Event()

    def writer() -> None:
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute("SET synchronous_commit = off")
            for i in range(1, rows + 1):
                conn.execute("INSERT INTO async_t VALUES (%s, repeat('x', 200))", (i,))
        done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    batches = 0
    while not done.is_set():
        stream(config, database)
        batches += 1
    thread.join()
    # a synchronous commit flushes the WAL before it, so that the last batches can read the rest
    run_sql(database, "SELECT pg_logical_emit_message(true, 'walflow-test', 'flush')")
    while stream(config, database).events:
        pass
    assert batches >= 3, "the batches did not run beside the writer"
    streamed = [r.key_payload["id"] for r in read_topic(f"{config.topic_prefix}.public.async_t")]
    assert sorted(set(streamed)) == list(range(1, rows + 1)), (
        f"{rows - len(set(streamed))} of {rows} rows never streamed"
    )


def test_batch_limit_stops_at_transaction_boundary(database: str) -> None:
    run_sql(database, "CREATE TABLE t (id int PRIMARY KEY)")
    config = setup(database, **{"walflow.batch.max.events": 10})
    for start in range(0, 60, 15):
        run_sql(database, f"INSERT INTO t SELECT generate_series({start}, {start + 14})")
    first = stream(config, database)
    assert first.stopped_by == "walflow.batch.max.events"
    assert first.events % 15 == 0 and first.events >= 15
    total = first.events
    while True:
        summary = stream(config, database)
        total += summary.events
        if summary.events == 0:
            break
    assert total == 60
    assert sorted(r.key_payload["id"] for r in read_topic(f"{config.topic_prefix}.public.t")) == list(range(60))


def test_concurrent_run_fails_fast(database: str) -> None:
    run_sql(database, "CREATE TABLE t (id int PRIMARY KEY)")
    config = setup(database)
    with connect(as_connector(database)) as holder:  # another walflow task of the same connector
        holder.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (f"walflow:{config.slot_name}",))
        with pytest.raises(ConcurrentRunError, match="already streaming slot"):
            stream(config, database)


def test_missing_slot_is_never_recreated(database: str) -> None:
    run_sql(database, "CREATE TABLE t (id int PRIMARY KEY)")
    config = setup(database)
    run_sql(database, f"SELECT pg_drop_replication_slot('{config.slot_name}')")
    with pytest.raises(SlotError, match=r"does not exist.*may have been missed"):
        stream(config, database)
    with psycopg.connect(database) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (config.slot_name,)
        ).fetchone() == (0,)


def test_heartbeat_record(database: str) -> None:
    run_sql(
        database,
        "CREATE TABLE t (id int PRIMARY KEY)",
        "CREATE TABLE hb (id int PRIMARY KEY, ts timestamptz)",
        "INSERT INTO hb VALUES (1, now())",
        f'GRANT UPDATE ON hb TO "{database_role(database)}"',
    )  # the action query runs as the connector role
    config = setup(
        database,
        **{"heartbeat.interval.ms": 1000, "heartbeat.action.query": "UPDATE hb SET ts = now() WHERE id = 1"},
    )
    summary = stream(config, database)
    assert summary.heartbeat_sent
    (hb,) = read_topic(f"__debezium-heartbeat.{config.topic_prefix}")
    assert hb.key_payload == {"serverName": config.topic_prefix} and isinstance(hb.payload["ts_ms"], int)
    # the action query's own change is captured like any other
    assert [r.op for r in read_topic(f"{config.topic_prefix}.public.hb")] == ["u"]


def test_filtered_backlog_never_skips_later_changes(database: str) -> None:
    """Many transactions of an excluded table fill PostgreSQL's upto_nchanges before the batch's end LSN:
    the slot must then move only past what was read, never to the end LSN."""
    run_sql(database, "CREATE TABLE noise (id int PRIMARY KEY)", "CREATE TABLE wanted (id int PRIMARY KEY)")
    config = setup(database, **{"table.include.list": r"public\.wanted", "walflow.batch.max.events": 5})
    with psycopg.connect(database, autocommit=True) as conn:
        for i in range(200):
            conn.execute("INSERT INTO noise VALUES (%s)", (i,))
        conn.execute("INSERT INTO wanted VALUES (1)")
    first = stream(config, database)
    assert first.stopped_by == "upto_nchanges" and first.events == 0
    events = 0
    for _ in range(50):
        summary = stream(config, database)
        events += summary.events
        if summary.stopped_by == "end":
            break
    assert events == 1
    assert [r.key_payload for r in read_topic(f"{config.topic_prefix}.public.wanted")] == [{"id": 1}]


def test_retained_wal_above_the_limits_warns_then_fails_after_delivering(
    database: str, caplog: pytest.LogCaptureFixture
) -> None:
    run_sql(database, CUSTOMERS)
    config = setup(database, **{"walflow.slot.max.retained.wal.bytes": 1})
    run_sql(database, "INSERT INTO customers (id, first_name) VALUES (1, 'a')")
    with caplog.at_level("WARNING", logger="walflow.capture.stream"):
        summary = stream(config, database)
    assert summary.events == 1 and summary.retained_wal_bytes is not None
    assert any("walflow.slot.max.retained.wal.bytes=1" in r.getMessage() for r in caplog.records)

    hard = config.model_copy(update={"walflow_slot_fail_retained_wal_bytes": 1})
    run_sql(database, "INSERT INTO customers (id, first_name) VALUES (2, 'b')")
    with pytest.raises(
        SlotError, match=r"walflow.slot.fail.retained.wal.bytes=1: .* \(this batch itself was delivered"
    ):
        stream(hard, database)
    # the failure came after delivery and the slot advance: nothing is streamed twice or lost
    assert [r.key["payload"]["id"] for r in read_topic(f"{config.topic_prefix}.public.customers")] == [1, 2]
    assert stream(config, database).events == 0


def test_tombstones_on_delete_false(database: str) -> None:
    run_sql(database, CUSTOMERS, "INSERT INTO customers (id, first_name) VALUES (1, 'a'), (2, 'b')")
    config = setup(database, **{"tombstones.on.delete": False})
    run_sql(database, "DELETE FROM customers WHERE id = 1", "UPDATE customers SET id = 3 WHERE id = 2")
    stream(config, database)
    records = read_topic(f"{config.topic_prefix}.public.customers")
    # the delete, then the key change's delete and create: no record with a null value at all
    assert [(r.op, r.key_payload) for r in records] == [("d", {"id": 1}), ("d", {"id": 2}), ("c", {"id": 3})]
    assert all(r.value is not None for r in records)


def test_schema_include_and_exclude_lists(database: str) -> None:
    run_sql(
        database,
        "CREATE SCHEMA sales",
        "CREATE SCHEMA hr",
        "CREATE TABLE sales.orders (id int PRIMARY KEY)",
        "CREATE TABLE hr.people (id int PRIMARY KEY)",
        "CREATE TABLE public.misc (id int PRIMARY KEY)",
    )
    including = setup(database, **{"schema.include.list": "sales"})
    excluding = setup(database, **{"schema.exclude.list": "sales,public"})
    run_sql(
        database,
        "INSERT INTO sales.orders VALUES (1)",
        "INSERT INTO hr.people VALUES (1)",
        "INSERT INTO public.misc VALUES (1)",
    )
    assert stream(including, database).events_per_topic == {f"{including.topic_prefix}.sales.orders": 1}
    assert stream(excluding, database).events_per_topic == {f"{excluding.topic_prefix}.hr.people": 1}
    assert read_topic(f"{including.topic_prefix}.hr.people") == []
    assert [r.key_payload for r in read_topic(f"{excluding.topic_prefix}.hr.people")] == [{"id": 1}]


def test_column_include_list_keeps_key_columns_and_propagates_types(database: str) -> None:
    run_sql(database, CUSTOMERS)
    config = setup(
        database,
        **{
            # the key column id is not listed: as in Debezium, it stays in the key (optional there) and leaves the value
            "column.include.list": r"public\.customers\.(first_name|balance)",
            # data types are matched as <schema>.<table>.<type name>
            "datatype.propagate.source.type": r".+\.numeric,.+\.TEXT",
        },
    )
    run_sql(database, "INSERT INTO customers (id, first_name, email, balance) VALUES (1, 'a', 'x@y', 1.25)")
    stream(config, database)
    (record,) = read_topic(f"{config.topic_prefix}.public.customers")
    assert record.payload["after"] == {
        "first_name": "a",
        "balance": base64.b64encode((125).to_bytes(1, "big")).decode(),
    }
    assert record.key_payload == {"id": 1}
    assert record.key["schema"]["fields"] == [{"type": "int32", "optional": True, "field": "id"}]
    fields = {f["field"]: f for f in record.value["schema"]["fields"][1]["fields"]}
    assert fields["balance"]["parameters"] == {
        "scale": "2",
        "connect.decimal.precision": "10",
        "__debezium.source.column.type": "NUMERIC",
        "__debezium.source.column.length": "10",
        "__debezium.source.column.scale": "2",
        "__debezium.source.column.name": "balance",
    }
    assert fields["first_name"]["parameters"] == {
        "__debezium.source.column.type": "TEXT",
        "__debezium.source.column.length": "2147483647",
        "__debezium.source.column.scale": "0",
        "__debezium.source.column.name": "first_name",
    }


def test_column_exclude_list_keeps_key_columns_in_the_key(database: str) -> None:
    """An excluded key column leaves the value but stays in the key, as in Debezium."""
    run_sql(database, CUSTOMERS)
    config = setup(database, **{"column.exclude.list": r"public\.customers\.(id|email)"})
    run_sql(
        database,
        "INSERT INTO customers (id, first_name, email) VALUES (7, 'a', 'x@y')",
        "DELETE FROM customers WHERE id = 7",
    )
    stream(config, database)
    create, delete, tombstone = read_topic(f"{config.topic_prefix}.public.customers")
    assert (
        create.key_payload == {"id": 7}
        and "id" not in create.payload["after"]
        and "email" not in create.payload["after"]
    )
    assert delete.key_payload == {"id": 7} and "id" not in delete.payload["before"]
    assert tombstone.value is None and tombstone.key_payload == {"id": 7}


@pytest.mark.parametrize("skipped,kept", [("c", ["u", "d"]), ("u", ["c", "d"]), ("d", ["c", "u"]), ("c,u,d", [])])
def test_skipped_operations(database: str, skipped: str, kept: list[str]) -> None:
    run_sql(database, CUSTOMERS)
    config = setup(database, **{"skipped.operations": skipped})
    run_sql(
        database,
        "INSERT INTO customers (id, first_name) VALUES (1, 'a')",
        "UPDATE customers SET first_name = 'b' WHERE id = 1",
        "DELETE FROM customers WHERE id = 1",
    )
    summary = stream(config, database)
    assert summary.events == len(kept) and summary.filtered == 3 - len(kept)
    records = read_topic(f"{config.topic_prefix}.public.customers")
    # a delete that is not skipped keeps its tombstone
    assert [r.op for r in records] == kept + ([None] if "d" in kept else [])


def test_replica_identity_nothing(database: str) -> None:
    """REPLICA IDENTITY NOTHING: the reference says updates and deletes carry no previous values. With
    pgoutput PostgreSQL goes further and refuses them while the table is published for updates and deletes;
    inserts are captured, keyed by the primary key."""
    run_sql(database, CUSTOMERS, "ALTER TABLE customers REPLICA IDENTITY NOTHING")
    config = setup(database)
    run_sql(database, "INSERT INTO customers (id, first_name) VALUES (1, 'a')")
    for statement in ("UPDATE customers SET first_name = 'b' WHERE id = 1", "DELETE FROM customers WHERE id = 1"):
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="does not have a replica identity"):
            run_sql(database, statement)
    stream(config, database)
    (record,) = read_topic(f"{config.topic_prefix}.public.customers")
    assert record.op == "c" and record.key_payload == {"id": 1} and record.payload["before"] is None


def test_replica_identity_using_index_without_the_primary_key(database: str) -> None:
    """The key stays the primary key; an old tuple holds only the index's columns. As Debezium does (the differential
    suite checks it), the before image gives the missing NOT NULL columns their zero value, so an update of an
    indexed column is a key change from {id: 0}, and a delete is keyed {id: 0}."""
    run_sql(
        database,
        "CREATE TABLE acct (id int PRIMARY KEY, code text NOT NULL, note text)",
        "CREATE UNIQUE INDEX acct_code ON acct (code)",
        "ALTER TABLE acct REPLICA IDENTITY USING INDEX acct_code",
        "INSERT INTO acct VALUES (1, 'a', 'x')",
    )
    config = setup(database)
    run_sql(
        database,
        "UPDATE acct SET code = 'b' WHERE id = 1",
        "UPDATE acct SET note = 'y' WHERE id = 1",
        "DELETE FROM acct WHERE id = 1",
    )
    stream(config, database)
    records = read_topic(f"{config.topic_prefix}.public.acct")
    assert [r.op for r in records] == ["d", None, "c", "u", "d", None]
    delete_old, tombstone_old, create_new, changed_note, delete, tombstone = records
    assert delete_old.key_payload == {"id": 0} and delete_old.payload["before"] == {"id": 0, "code": "a", "note": None}
    assert tombstone_old.key_payload == {"id": 0}
    assert create_new.key_payload == {"id": 1} and create_new.payload["after"] == {"id": 1, "code": "b", "note": "x"}
    assert changed_note.payload["before"] is None and changed_note.key_payload == {"id": 1}
    assert delete.payload["before"] == {"id": 0, "code": "b", "note": None} and delete.key_payload == {"id": 0}
    assert tombstone.key_payload == {"id": 0} and tombstone.value is None


def test_unique_key_is_the_key_without_a_primary_key(database: str) -> None:
    """Without a primary key the key is the first unique index (by name, as the JDBC driver lists them), whatever the
    replica identity index is: Debezium's choice (the differential suite checks these tables against it). A change
    of the identity index's column shows a before image with the key's NOT NULL column at zero: a key change. A
    table with neither has a null key, and its deletes a tombstone with a null key."""
    run_sql(
        database,
        "CREATE TABLE byindex (code text NOT NULL, other int NOT NULL, v text)",
        "CREATE UNIQUE INDEX byindex_a_other ON byindex (other)",
        "CREATE UNIQUE INDEX byindex_z_code ON byindex (code)",
        "ALTER TABLE byindex REPLICA IDENTITY USING INDEX byindex_z_code",
        "CREATE TABLE byfull (n int, ref text, v text)",
        "CREATE UNIQUE INDEX byfull_ref ON byfull (ref)",
        "ALTER TABLE byfull REPLICA IDENTITY FULL",
        "CREATE TABLE nokey (v text)",
        "ALTER TABLE nokey REPLICA IDENTITY FULL",
    )
    config = setup(database)
    run_sql(
        database,
        "INSERT INTO byindex VALUES ('a', 1, 'x')",
        "UPDATE byindex SET v = 'y' WHERE code = 'a'",
        "UPDATE byindex SET code = 'b' WHERE code = 'a'",
        "INSERT INTO byfull VALUES (1, 'r1', 'x')",
        "UPDATE byfull SET v = 'y' WHERE ref = 'r1'",
        "INSERT INTO nokey VALUES ('x')",
        "DELETE FROM nokey",
    )
    stream(config, database)
    records = read_topic(f"{config.topic_prefix}.public.byindex")
    assert [(r.op, r.key_payload) for r in records] == [
        ("c", {"other": 1}),
        ("u", {"other": 1}),
        ("d", {"other": 0}),
        (None, {"other": 0}),
        ("c", {"other": 1}),
    ]
    assert records[0].key["schema"]["fields"] == [{"type": "int32", "optional": False, "field": "other"}]
    full = read_topic(f"{config.topic_prefix}.public.byfull")
    assert [(r.op, r.key_payload) for r in full] == [("c", {"ref": "r1"}), ("u", {"ref": "r1"})]
    # a nullable unique column is an optional key field
    assert full[0].key["schema"]["fields"] == [{"type": "string", "optional": True, "field": "ref"}]
    assert full[1].payload["before"] == {"n": 1, "ref": "r1", "v": "x"}
    nokey = read_topic(f"{config.topic_prefix}.public.nokey")
    assert [(r.op, r.key) for r in nokey] == [("c", None), ("d", None), (None, None)]


def test_pre_2_6_event_format(database: str) -> None:
    """walflow.event.format: pre-2.6 keeps the envelope walflow wrote before Debezium 3.6 conformance, for consumers
    pinned to it: no ts_us/ts_ns, transaction after op, no schema versions on source and transaction records, no
    context headers, source.version 2.5.4.Final."""
    run_sql(database, CUSTOMERS)
    config = setup(database, **{"walflow.event.format": "pre-2.6", "provide.transaction.metadata": True})
    run_sql(database, "INSERT INTO customers (id, first_name) VALUES (1, 'a')", "DELETE FROM customers WHERE id = 1")
    stream(config, database)
    create, delete, tombstone = read_topic(f"{config.topic_prefix}.public.customers")
    assert list(create.payload) == ["before", "after", "source", "op", "ts_ms", "transaction"]
    envelope = create.value["schema"]
    assert envelope["version"] == 1 and [f["field"] for f in envelope["fields"]][3:] == ["op", "ts_ms", "transaction"]
    source = create.payload["source"]
    assert source["version"] == "2.5.4.Final" and "ts_us" not in source and "origin" not in source
    assert "version" not in envelope["fields"][2]
    assert create.headers == {} and tombstone.headers == {} and delete.headers == {}
    begin, end = read_topic(f"{config.topic_prefix}.transaction")[:2]
    assert "version" not in begin.value["schema"] and "version" not in begin.key["schema"]
    assert "name" not in end.value["schema"]["fields"][3]["items"]


def test_non_transactional_messages_move_the_slot_even_when_a_batch_is_cut_among_them(database: str) -> None:
    """A logical decoding message written outside a transaction is a commit of its own: a batch cut among many of
    them (by its change limit) confirms those it read, and the next batch goes on after them (it confirmed nothing
    and read the same ones again, forever)."""
    config = setup(database, **{"walflow.batch.max.events": 10})
    with psycopg.connect(database, autocommit=True) as conn:
        for i in range(200):
            conn.execute("SELECT pg_logical_emit_message(false, 'walflow-test', %s)", (f"m{i}",))
    # they are not flushed by themselves (logical decoding reads flushed WAL): a synchronous commit flushes them
    run_sql(database, "CREATE TABLE flushed (id int)")
    for _ in range(20):
        if not stream(config, database).events:
            break
    contents = [r.payload["message"]["content"] for r in read_topic(f"{config.topic_prefix}.message")]
    assert len(contents) == 200 and len(set(contents)) == 200, f"{len(contents)} records for 200 messages"


def test_a_table_renamed_inside_a_transaction_keeps_each_events_source(database: str) -> None:
    """Each event's source names the table as it was when the change was made, whatever pgoutput redefines within
    the transaction."""
    run_sql(
        database,
        "CREATE TABLE ra (id int PRIMARY KEY)",
        "CREATE TABLE rb (id int PRIMARY KEY)",
        "CREATE TABLE rc (id int PRIMARY KEY)",
    )
    config = setup(database)
    run_sql(
        database,
        "BEGIN; INSERT INTO ra VALUES (1); INSERT INTO rb VALUES (1); ALTER TABLE ra RENAME TO ra2;"
        " INSERT INTO ra2 VALUES (2); INSERT INTO rc VALUES (1); INSERT INTO rb VALUES (2); COMMIT",
    )
    stream(config, database)
    seen = {}
    for table in ("ra", "ra2", "rb", "rc"):
        for r in read_topic(f"{config.topic_prefix}.public.{table}"):
            seen[(table, r.key_payload["id"])] = r.payload["source"]["table"]
    assert seen == {("ra", 1): "ra", ("ra2", 2): "ra2", ("rb", 1): "rb", ("rb", 2): "rb", ("rc", 1): "rc"}, seen
