"""Bad input, one test per case: each ends in a clear error or a logged skip, never in a lost or half-applied change.

Covered elsewhere (not repeated here): invalid YAML and unknown keys (tests/unit/test_config.py), a missing
publication with autocreate disabled and a slot used by another process (test_setup.py), malformed and unknown
signals (test_incremental.py), too old a server (tests/unit/test_source.py: the version check is a pure function,
since no old server binaries are installed here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from sandbox.embedded import free_port
from tests.privileges import as_connector, hand_over
from tests.support import connector, prepare_source, producer, read_topic, setup, stream, unique
from walflow.capture.setup import ConnectorSetup
from walflow.capture.stream import StreamBatch
from walflow.errors import DeliveryError, SourceError
from walflow.kafka import EventProducer, producer_settings
from walflow.source.connection import connect


def run_sql(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def slot_position(dsn: str, slot: str) -> str | None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
    return row[0] if row else None


# -- a server without wal_level=logical -----------------------------------------------------------------------------
def _as_postgres(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    """PostgreSQL refuses to run as root: run its tools as the postgres user when the tests run as root."""
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    return subprocess.run(cmd, text=True, capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def replica_server() -> Iterator[str]:
    """A tiny second cluster with wal_level=replica, from the same binaries as the embedded one; yields its DSN."""
    from sandbox.embedded import pg_bindir

    bindir = pg_bindir()
    root = Path("/var/tmp") / f"walflow-test-replica-{uuid.uuid4().hex[:8]}"
    root.mkdir(parents=True)
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    data, port = root / "data", free_port()
    try:
        init = _as_postgres(
            [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"]
        )
        assert init.returncode == 0, init.stderr
        options = (
            f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={root} -c wal_level=replica"
            " -c fsync=off -c shared_buffers=16MB"
        )
        start = _as_postgres(
            [str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-w", "-t", "60", "-o", options, "start"]
        )
        assert start.returncode == 0, start.stderr
        yield f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    finally:
        _as_postgres([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"])
        shutil.rmtree(root, ignore_errors=True)


def test_server_without_logical_wal_level(replica_server: str) -> None:
    run_sql(replica_server, "CREATE TABLE IF NOT EXISTS t (id int PRIMARY KEY)")
    config = connector(unique("replica"))
    with pytest.raises(SourceError, match=r"wal_level='replica'.*ALTER SYSTEM SET wal_level = logical.*restart"):
        ConnectorSetup(config, replica_server, producer).run()  # superuser: a throwaway cluster, without the role
    with psycopg.connect(replica_server) as conn:  # the check came before any DDL
        assert conn.execute("SELECT count(*) FROM pg_publication").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM pg_replication_slots").fetchone() == (0,)


# -- Kafka unreachable at start -------------------------------------------------------------------------------------
def unreachable_producer() -> tuple[EventProducer, str]:
    bootstrap = f"127.0.0.1:{free_port()}"  # bound and released: nothing listens there
    # nothing will answer: waiting the production 15 s for it proves nothing more than 2 s does
    return EventProducer(producer_settings({"bootstrap.servers": bootstrap}), reachable_timeout=2.0), bootstrap


def test_kafka_unreachable_before_streaming_leaves_the_slot_untouched(database: str) -> None:
    run_sql(database, "CREATE TABLE t (id int PRIMARY KEY, v text)")
    config = connector(unique("nokafka"))
    prepare_source(config, database)
    run_sql(database, "INSERT INTO t SELECT g, 'v' FROM generate_series(1, 20) g")
    before = slot_position(database, config.slot_name)
    bad, bootstrap = unreachable_producer()
    with pytest.raises(DeliveryError, match=f"Kafka at '{bootstrap}' is unreachable.*nothing was read from the slot"):
        StreamBatch(config, as_connector(database), bad).run()
    assert slot_position(database, config.slot_name) == before
    # the broker is back: everything is delivered, nothing was lost
    assert stream(config, database).events == 20
    assert len(read_topic(f"{config.topic_prefix}.public.t")) == 20


def test_kafka_unreachable_before_the_initial_snapshot_creates_no_slot(database: str) -> None:
    run_sql(database, "CREATE TABLE t (id int PRIMARY KEY, v text)", "INSERT INTO t VALUES (1, 'a')")
    config = connector(unique("nokafkasnap"))
    bad, bootstrap = unreachable_producer()
    with pytest.raises(DeliveryError, match=f"Kafka at '{bootstrap}' is unreachable"):
        setup(config, database, lambda: bad)
    assert slot_position(database, config.slot_name) is None
    report = setup(config, database)  # the next setup run takes the snapshot
    assert report["snapshot"]["ran"] and report["snapshot"]["rows"] == 1


# -- a captured table dropped or renamed while streaming ------------------------------------------------------------
def test_captured_table_dropped_or_renamed_while_streaming(database: str) -> None:
    run_sql(database, "CREATE TABLE a (id int PRIMARY KEY, v text)", "CREATE TABLE b (id int PRIMARY KEY, v text)")
    hand_over(database, "a", "b")  # a 'filtered' publication names only tables its creator owns
    config = connector(
        unique("ddl"), **{"table.include.list": r"public\.a,public\.b", "publication.autocreate.mode": "filtered"}
    )
    prepare_source(config, database)
    run_sql(
        database,
        "INSERT INTO a VALUES (1, 'x'), (2, 'y')",
        "UPDATE a SET v = 'z' WHERE id = 2",
        "DROP TABLE a",
        "INSERT INTO b VALUES (1, 'x')",
        "ALTER TABLE b RENAME TO c",
        "INSERT INTO c VALUES (2, 'y')",
    )
    summary = stream(config, database)
    # every change made while the table was captured is delivered, decoded with the table's definition then
    assert [(r.op, r.key_payload["id"]) for r in read_topic(f"{config.topic_prefix}.public.a")] == [
        ("c", 1),
        ("c", 2),
        ("u", 2),
    ]
    assert [(r.op, r.key_payload["id"]) for r in read_topic(f"{config.topic_prefix}.public.b")] == [("c", 1)]
    # after the rename the table is public.c, which the include list does not capture: filtered, not streamed
    assert read_topic(f"{config.topic_prefix}.public.c") == [] and summary.filtered == 1
    assert stream(config, database).events == 0  # and the slot moved past all of it


def test_rename_out_of_the_include_list_is_logged(database: str, caplog: pytest.LogCaptureFixture) -> None:
    run_sql(database, "CREATE TABLE b (id int PRIMARY KEY, v text)")
    hand_over(database, "b")
    config = connector(unique("ren"), **{"table.include.list": r"public\.b", "publication.autocreate.mode": "filtered"})
    prepare_source(config, database)
    run_sql(database, "ALTER TABLE b RENAME TO c", "INSERT INTO c VALUES (1, 'y')")
    with caplog.at_level("WARNING"):
        stream(config, database)
    assert any("public.c" in r.getMessage() and "no longer captured" in r.getMessage() for r in caplog.records)


# -- an oversized signal --------------------------------------------------------------------------------------------
def test_oversized_signal_is_logged_with_its_id_and_skipped(database: str, caplog: pytest.LogCaptureFixture) -> None:
    from walflow.source.signals import MAX_SIGNAL_BYTES, signal_status

    # a signal table of the user's own, whose data column (text) accepts more than walflow reads
    run_sql(
        database,
        "CREATE TABLE t (id int PRIMARY KEY, v text)",
        "CREATE TABLE signals (id text PRIMARY KEY, type text NOT NULL, data text)",
    )
    config = connector(unique("bigsig"), **{"signal.data.collection": "public.signals", "snapshot.mode": "no_data"})
    setup(config, database)
    huge = '{"data-collections": ["public.t"], "pad": "' + "x" * (MAX_SIGNAL_BYTES + 1) + '"}'
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("INSERT INTO t VALUES (1, 'before')")
        conn.execute("INSERT INTO signals VALUES ('too-big-1', 'execute-snapshot', %s)", (huge,))
        conn.execute("INSERT INTO t VALUES (2, 'after')")
    with caplog.at_level("WARNING"):
        summary = stream(config, database)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("too-big-1" in w and "skipped" in w and f"more than {MAX_SIGNAL_BYTES}" in w for w in warnings), warnings
    # streaming went on: both rows delivered, no snapshot started
    assert [r.key_payload["id"] for r in read_topic(f"{config.topic_prefix}.public.t")] == [1, 2]
    assert summary.snapshot_rows == 0
    with connect(as_connector(database)) as conn:
        assert signal_status(conn, config, "too-big-1")["status"] == "failed"


# -- a table without primary key receiving updates ------------------------------------------------------------------
def test_table_without_primary_key_receiving_updates(database: str, caplog: pytest.LogCaptureFixture) -> None:
    run_sql(database, "CREATE TABLE nopk (msg text, n int)", "INSERT INTO nopk VALUES ('a', 1)")
    config = connector(unique("nopk"), **{"snapshot.mode": "no_data"})
    with caplog.at_level("WARNING"):
        setup(config, database)
    assert any(
        "nopk has no primary key" in r.getMessage() and "REPLICA IDENTITY FULL" in r.getMessage()
        for r in caplog.records
        if r.levelname == "WARNING"
    )
    run_sql(database, "INSERT INTO nopk VALUES ('b', 2)")
    # default identity: PostgreSQL itself refuses the change, so nothing is half-applied
    with pytest.raises(
        psycopg.errors.ObjectNotInPrerequisiteState, match="does not have a replica identity and publishes updates"
    ):
        run_sql(database, "UPDATE nopk SET n = 20 WHERE msg = 'b'")
    with psycopg.connect(database) as conn:
        assert conn.execute("SELECT n FROM nopk WHERE msg = 'b'").fetchone() == (2,)
    # FULL identity: updates and deletes are captured, with a null key and the whole old row in 'before'
    run_sql(
        database,
        "ALTER TABLE nopk REPLICA IDENTITY FULL",
        "UPDATE nopk SET n = 20 WHERE msg = 'b'",
        "DELETE FROM nopk WHERE msg = 'a'",
    )
    stream(config, database)
    records = read_topic(f"{config.topic_prefix}.public.nopk")
    assert [r.op for r in records] == ["c", "u", "d", None]  # a tombstone with a null key, as Debezium sends
    assert all(r.key is None for r in records)
    assert records[1].payload["before"] == {"msg": "b", "n": 2} and records[1].payload["after"] == {"msg": "b", "n": 20}
    assert records[2].payload["before"] == {"msg": "a", "n": 1} and records[2].payload["after"] is None


# -- names with quotes, dots, spaces and non-ASCII characters -------------------------------------------------------
def test_awkward_names_streamed_end_to_end(database: str) -> None:
    schema, table = 'Sch "ë".x y', 'Tåb "le". z'
    key_col, val_col = "Ключ", 'Col "ñ".a b'
    ident = lambda name: '"' + name.replace('"', '""') + '"'  # noqa: E731 - SQL quoting, written out for the test
    qualified = f"{ident(schema)}.{ident(table)}"
    run_sql(
        database,
        f"CREATE SCHEMA {ident(schema)}",
        f"CREATE TABLE {qualified} ({ident(key_col)} int PRIMARY KEY, {ident(val_col)} text)",
    )
    hand_over(database, qualified)
    config = connector(
        unique("names"),
        **{
            "publication.autocreate.mode": "filtered",
            "table.include.list": r"Sch .*\.Tåb .*",
            "snapshot.mode": "no_data",
        },
    )
    setup(config, database)
    run_sql(
        database,
        f"INSERT INTO {qualified} VALUES (1, 'one'), (2, 'two')",
        f"UPDATE {qualified} SET {ident(val_col)} = 'uno' WHERE {ident(key_col)} = 1",
        f"DELETE FROM {qualified} WHERE {ident(key_col)} = 2",
    )
    assert stream(config, database).events == 4
    # Debezium's topic sanitisation: every character outside [A-Za-z0-9._-] becomes '_' (non-ASCII letters too)
    topic = f"{config.topic_prefix}.Sch____.x_y.T_b__le_._z"
    records = read_topic(topic)
    assert [r.op for r in records] == ["c", "c", "u", "d", None]
    create = records[0]
    assert create.key_payload == {key_col: 1}  # field names are kept as they are
    assert create.payload["after"] == {key_col: 1, val_col: "one"}
    assert (create.payload["source"]["schema"], create.payload["source"]["table"]) == (schema, table)
    assert records[2].payload["after"] == {key_col: 1, val_col: "uno"}
    assert [f["field"] for f in create.key["schema"]["fields"]] == [key_col]
