"""A read-only connector through Airflow: the factory's setup, stream and snapshot DAGs against a hot standby, with
the state in another server's database (``walflow.state.conn.id``) and the snapshot's signal sent through Kafka."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from sandbox import replicas as pair
from tests.integration.test_standby import PASSWORD, ROLE, _nudge, _on_primary, prepare_primary
from tests.support import pg_dsn, producer, read_topic, replay, run_dag, unique

pytestmark = pytest.mark.timeout(600)


@pytest.fixture()
def read_only_connector(
    tmp_path: Path, kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, pair.Replicas]]:
    """A PostgreSQL 18 pair (:func:`tests.integration.test_standby.prepare_primary`), a state database on the test
    runtime's server, and a connector file whose Connections name the standby (as the role that may write nothing),
    the state database and the broker."""
    name = unique("ro_dags").lower()
    replicas = pair.create()
    state = f"{name}_state"
    with psycopg.connect(pg_dsn(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{state}"')
    try:
        prepare_primary(replicas)
        settings = [
            f"name: {name}", f"topic.prefix: {name}", f"slot.name: {name}", "publication.name: ro_pub",
            "publication.autocreate.mode: disabled", "table.include.list: public.t", "read.only: true",
            f"walflow.state.conn.id: {name}_state", "signal.enabled.channels: kafka",
            "incremental.snapshot.chunk.size: 100", "walflow.lake.enabled: false",
            f"walflow.postgres.conn.id: {name}_pg", f"walflow.kafka.conn.id: {name}_kafka",
            "walflow.snapshot.poke.seconds: 1",
        ]  # fmt: skip
        (tmp_path / f"{name}.yaml").write_text("\n".join(settings))
        source = dict(p.split("=", 1) for p in pg_dsn(state).split())
        connections = {
            "PG": {"conn_type": "postgres", "host": "127.0.0.1", "port": replicas.standby_port, "login": ROLE,
                   "password": PASSWORD, "schema": "postgres"},
            "STATE": {"conn_type": "postgres", "host": source["host"], "port": int(source["port"]),
                      "login": source["user"], "password": source["password"], "schema": state},
            "KAFKA": {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}},
        }  # fmt: skip
        for suffix, value in connections.items():
            monkeypatch.setenv(f"AIRFLOW_CONN_{name.upper()}_{suffix}", json.dumps(value))
        monkeypatch.setenv("WALFLOW_CONNECTORS_DIR", str(tmp_path))
        yield name, replicas
    finally:
        pair.remove(replicas)
        with psycopg.connect(pg_dsn(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{state}" WITH (FORCE)')


def test_setup_stream_and_snapshot_dags_of_a_read_only_connector(
    read_only_connector: tuple[str, pair.Replicas],
) -> None:
    from walflow.airflow.dag_factory import build_connector_dags
    from walflow.capture.stream import StreamBatch
    from walflow.config.files import resolve

    name, replicas = read_only_connector
    done = threading.Event()
    nudger = threading.Thread(target=_nudge, args=(replicas, done), daemon=True)
    nudger.start()
    try:
        run_dag(f"{name}__setup")
    finally:
        done.set()
        nudger.join()
    _on_primary(replicas, "UPDATE t SET v = -v WHERE id <= 10", "DELETE FROM t WHERE id > 495")
    run_dag(f"{name}__stream")
    topic = f"{name}.public.t"
    assert sum(1 for r in read_topic(topic) if r.op in ("u", "d")) == 15

    # the snapshot DAG's signal goes to Kafka; the stream (here in the background, as its schedule would run it)
    # takes it, and the DAG's sensor reads its outcome in the state database
    stop = threading.Event()
    config = resolve(name)
    standby = replicas.dsn("standby", user=ROLE, password=PASSWORD)
    state = pg_dsn(f"{name}_state")

    def stream() -> None:
        while not stop.is_set():
            StreamBatch(config, standby, producer(), state_conninfo=state).run()
            stop.wait(0.5)

    thread = threading.Thread(target=stream, daemon=True)
    thread.start()
    try:
        run = build_connector_dags()[f"{name}__snapshot"].test(run_conf={"data_collections": ["public.t"]})
        assert run.state == "success"
    finally:
        stop.set()
        thread.join(60)
    records = read_topic(topic)
    assert sum(1 for r in records if r.op == "r" and r.payload["source"]["snapshot"] == "incremental") == 495
    with psycopg.connect(replicas.dsn("primary"), autocommit=True) as conn:
        source = {r[0]: (r[1], r[2]) for r in conn.execute("SELECT id, v, note FROM t")}
        assert conn.execute("SELECT count(*) FROM pg_class WHERE relname LIKE 'walflow%%'").fetchone()[0] == 0
    assert {row["id"]: (row["v"], row["note"]) for row in replay(records).values()} == source
