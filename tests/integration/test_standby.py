"""Capture from a hot standby with ``read.only: true``: a role that may write nothing, a slot on the standby, the
state in another server's database, signals through Kafka.

The pair of servers is PostgreSQL 18 (:mod:`sandbox.replicas`: logical decoding on a standby needs 16), the
state database is the test runtime's own server, and the broker is the test runtime's.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from sandbox import replicas as pair
from tests.support import connector, pg_dsn, producer, read_topic, replay, unique
from walflow.admin.reset import reset_connector
from walflow.airflow.status import slot_status
from walflow.capture.kafka_signals import send_kafka_signal
from walflow.capture.setup import ConnectorSetup
from walflow.capture.stream import StreamBatch
from walflow.errors import SourceError
from walflow.source.signals import signal_status

pytestmark = pytest.mark.replicas

ROLE, PASSWORD = "walflow_ro", f"pw-{uuid.uuid4().hex}"


def prepare_primary(replicas: pair.Replicas) -> None:
    """Table ``t`` (500 rows) on the primary, a publication a DBA created, and a connector role that may log in,
    replicate and read ``t``: no write privilege anywhere; the standby has replayed it all."""
    with psycopg.connect(replicas.dsn("primary"), autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL, note text)")
        conn.execute("INSERT INTO t SELECT g, g, 'seed' FROM generate_series(1, 500) g")
        conn.execute("CREATE PUBLICATION ro_pub FOR TABLE t")
        conn.execute(f"CREATE ROLE {ROLE} LOGIN REPLICATION PASSWORD '{PASSWORD}'")
        conn.execute(f"GRANT SELECT ON t TO {ROLE}")
        # what a login may write by default, taken away: temporary tables, objects in public, WAL messages
        conn.execute("REVOKE TEMPORARY ON DATABASE postgres FROM PUBLIC")
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        for (overload,) in conn.execute(
            "SELECT oid::regprocedure::text FROM pg_proc WHERE proname = 'pg_logical_emit_message'"
        ).fetchall():
            conn.execute(f"REVOKE EXECUTE ON FUNCTION {overload} FROM PUBLIC")
    pair.wait_replayed(replicas)


@pytest.fixture(scope="module")
def servers() -> Iterator[pair.Replicas]:
    """A PostgreSQL 18 primary and its streaming standby, prepared by :func:`prepare_primary`."""
    replicas = pair.create()
    try:
        prepare_primary(replicas)
        yield replicas
    finally:
        pair.remove(replicas)


@pytest.fixture()
def state_database() -> Iterator[str]:
    """A database of the test runtime's server (not the pair) for the connector's state."""
    name = unique("state").lower()
    with psycopg.connect(pg_dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield pg_dsn(name)
    finally:
        with psycopg.connect(pg_dsn(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _write_privileges(replicas: pair.Replicas) -> list[str]:
    """Every privilege of the connector role that lets it write (tables, schemas, the database, WAL messages)."""
    with psycopg.connect(replicas.dsn("primary"), autocommit=True) as conn:
        rows = conn.execute(
            """
            SELECT 'table ' || c.relname || ': ' || p FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
                   unnest(ARRAY['INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) p
            WHERE n.nspname = 'public' AND c.relkind = 'r' AND has_table_privilege(%(r)s, c.oid, p)
            UNION ALL SELECT 'schema public: CREATE' WHERE has_schema_privilege(%(r)s, 'public', 'CREATE')
            UNION ALL SELECT 'database: ' || p FROM unnest(ARRAY['CREATE', 'TEMPORARY']) p
                WHERE has_database_privilege(%(r)s, current_database(), p)
            UNION ALL SELECT 'function ' || oid::regprocedure FROM pg_proc
                WHERE proname = 'pg_logical_emit_message' AND has_function_privilege(%(r)s, oid, 'EXECUTE')
            UNION ALL SELECT 'superuser' FROM pg_roles WHERE rolname = %(r)s AND rolsuper
            """,
            {"r": ROLE},
        ).fetchall()
    return [r[0] for r in rows]


def _on_primary(replicas: pair.Replicas, *statements: str) -> None:
    with psycopg.connect(replicas.dsn("primary"), autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement.encode())
    pair.wait_replayed(replicas)


def _nudge(replicas: pair.Replicas, done: threading.Event) -> None:
    """A slot created on a standby waits for the primary to log its running transactions (at its next checkpoint, or
    every 15 s while it is busy); a DBA hurries it with pg_log_standby_snapshot(), as this does until ``done``."""
    with psycopg.connect(replicas.dsn("primary"), autocommit=True) as conn:
        while not done.wait(0.2):
            conn.execute("SELECT pg_log_standby_snapshot()")


def test_read_only_capture_from_a_standby(servers: pair.Replicas, state_database: str) -> None:
    """Initial snapshot, streaming and an incremental snapshot signalled through Kafka, from the standby, as a role
    with no write privilege: the topic replays to the primary's table, and the primary holds nothing of walflow's."""
    assert _write_privileges(servers) == [], "the connector role must not be able to write"
    name = unique("ro")
    config = connector(
        name, **{"read.only": True, "walflow.state.conn.id": "state", "publication.name": "ro_pub",
                 "publication.autocreate.mode": "disabled", "table.include.list": "public.t",
                 "signal.enabled.channels": "kafka", "incremental.snapshot.chunk.size": 100},
    )  # fmt: skip
    standby = servers.dsn("standby", user=ROLE, password=PASSWORD)
    done = threading.Event()
    nudger = threading.Thread(target=_nudge, args=(servers, done), daemon=True)
    nudger.start()
    try:
        report = ConnectorSetup(config, standby, producer, state_conninfo=state_database).run()
    finally:
        done.set()
        nudger.join()
    assert report["slot_created"] and report["snapshot"]["rows"] == 500
    topic = f"{config.topic_prefix}.public.t"

    _on_primary(servers, "UPDATE t SET v = v + 1000, note = 'u' WHERE id <= 20", "DELETE FROM t WHERE id > 490",
                "INSERT INTO t SELECT g, g, 'new' FROM generate_series(501, 520) g")  # fmt: skip
    summary = StreamBatch(config, standby, producer(), state_conninfo=state_database).run()
    assert summary.events == 20 + 10 + 20

    # an incremental snapshot through Kafka; inside the first chunks' windows (between their SELECT and the end of
    # the batch) the primary changes rows of the chunk, which the standby replays before the batch streams on
    signal_id = send_kafka_signal(
        config, producer(), "execute-snapshot", {"data-collections": ["public.t"], "type": "incremental"}
    )
    inside = ["UPDATE t SET v = -v, note = 'in window' WHERE id IN ({})", "DELETE FROM t WHERE id IN ({})"]

    def change_inside(table: str, rows: list[list[Any]]) -> None:
        if inside and rows:
            _on_primary(servers, inside.pop(0).format(", ".join(str(r[0]) for r in rows[:5])))

    dropped = 0
    status: dict[str, Any] | None = None
    for _attempt in range(30):
        summary = StreamBatch(
            config, standby, producer(), state_conninfo=state_database, chunk_hook=change_inside
        ).run()
        dropped += summary.snapshot_rows_dropped
        with psycopg.connect(state_database, autocommit=True) as conn:
            status = signal_status(conn, config, signal_id)
        if status and status.get("status") == "completed":
            break
    assert status and status["status"] == "completed", status
    # the chunks' rows take their place before the changes their snapshot did not see (the rows changed inside the
    # windows are emitted as read, then changed by the streamed events; none had to be dropped as stale)
    assert not inside and dropped == 0
    _on_primary(servers, "INSERT INTO t VALUES (1000, 1, 'late')", "UPDATE t SET note = 'after' WHERE id % 7 = 0")
    pair.wait_replayed(servers)
    StreamBatch(config, standby, producer(), state_conninfo=state_database).run()

    records = read_topic(topic)
    initial = [r for r in records if r.op == "r" and r.payload["source"]["snapshot"] != "incremental"]
    incremental = [r for r in records if r.op == "r" and r.payload["source"]["snapshot"] == "incremental"]
    assert len(initial) == 500 and len(incremental) == status["rows"] == 510
    first = records.index(incremental[0])
    changed = [
        i
        for i, r in enumerate(records)
        if i > first and (r.op == "d" or (r.op == "u" and r.payload["after"]["note"] == "in window"))
    ]
    assert len(changed) == 10
    for index in changed:
        key = records[index].key_payload
        read_at = [i for i, r in enumerate(records) if r in incremental and r.key_payload == key]
        assert read_at and read_at[0] < index, (
            f"{key}: the chunk's row must come before the change its snapshot did not see"
        )
    replayed = {row["id"]: (row["v"], row["note"]) for row in replay(records).values()}
    with psycopg.connect(servers.dsn("primary"), autocommit=True) as conn:
        source = {r[0]: (r[1], r[2]) for r in conn.execute("SELECT id, v, note FROM t")}
        # nothing of walflow's on the primary: no table, no slot but the standby's physical one
        assert conn.execute("SELECT count(*) FROM pg_class WHERE relname LIKE 'walflow%%'").fetchone()[0] == 0
        assert [r[0] for r in conn.execute("SELECT slot_type FROM pg_replication_slots")] == ["physical"]
    assert replayed == source
    with psycopg.connect(servers.dsn("standby"), autocommit=True) as conn:
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]
        assert (
            conn.execute(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (config.slot_name,)
            ).fetchone()[0]
            == 1
        )
    with psycopg.connect(state_database, autocommit=True) as conn:
        keys = {r[0] for r in conn.execute("SELECT key FROM public.walflow_state WHERE connector = %s", (config.name,))}
    assert {"snapshot", "last_batch"} <= keys

    # walflow status and reset find the state where it is
    status_now = slot_status(standby, config.name, config.slot_name, config.state_table, state_conninfo=state_database)
    assert status_now["exists"] and status_now["last_batch"]["advanced_to"] == status_now["confirmed_flush_lsn"]
    report = reset_connector(config, standby, state_conninfo=state_database)
    assert report.slot_dropped and "last_batch" in report.state_keys


def test_read_only_refuses_to_create_what_is_missing(servers: pair.Replicas, state_database: str) -> None:
    """A read-only connector whose publication does not exist stops before anything changes, naming the statement to
    run on the primary."""
    config = connector(
        unique("ro_missing"), **{"read.only": True, "walflow.state.conn.id": "state", "table.include.list": "public.t"}
    )
    standby = servers.dsn("standby", user=ROLE, password=PASSWORD)
    with pytest.raises(SourceError, match=r"create it on the primary .*CREATE PUBLICATION .* FOR TABLE public\.t"):
        ConnectorSetup(config, standby, producer, state_conninfo=state_database).run()
    with psycopg.connect(servers.dsn("standby"), autocommit=True) as conn:
        assert (
            conn.execute(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", (config.slot_name,)
            ).fetchone()[0]
            == 0
        )
