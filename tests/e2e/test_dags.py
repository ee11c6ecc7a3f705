"""End to end through Airflow: the factory's setup and stream DAGs run with dag.test(), records read from Kafka."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psycopg
import pytest

from tests.support import read_topic, unique

pytestmark = pytest.mark.timeout(600)


@pytest.fixture()
def connector_dir(tmp_path: Path, database: str, kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    name = unique("e2e")
    params = dict(p.split("=", 1) for p in database.split())
    pg_conn = f"walflow_{name}_pg"
    kafka_conn = f"walflow_{name}_kafka"
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{pg_conn.upper()}",
        json.dumps({"conn_type": "postgres", "host": params["host"], "port": int(params["port"]), "login": params["user"], "schema": params["dbname"]}),
    )
    monkeypatch.setenv(f"AIRFLOW_CONN_{kafka_conn.upper()}", json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}}))
    (tmp_path / f"{name}.yaml").write_text(
        "\n".join(
            [
                f"name: {name}",
                f"topic.prefix: {name}",
                f"slot.name: {name}",
                f"publication.name: {name}",
                "publication.autocreate.mode: filtered",
                "provide.transaction.metadata: true",
                "skipped.operations: none",
                f"walflow.postgres.conn.id: {pg_conn}",
                f"walflow.kafka.conn.id: {kafka_conn}",
            ]
        )
    )
    monkeypatch.setenv("WALFLOW_CONNECTORS_DIR", str(tmp_path))
    return {"name": name, "dsn": database}


def run_dag(dag_id: str) -> dict:
    from walflow.airflow.dag_factory import build_connector_dags

    dag = build_connector_dags()[dag_id]
    run = dag.test()
    assert run.state == "success", f"{dag_id} ended {run.state}"
    return run


def test_setup_then_stream(connector_dir: dict[str, str]) -> None:
    name, dsn = connector_dir["name"], connector_dir["dsn"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL, qty int)")
        conn.execute("CREATE TABLE nokey (msg text)")
    run_dag(f"{name}__setup")
    run_dag(f"{name}__setup")  # idempotent
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO orders (item, qty) VALUES ('apple', 1), ('pear', 2)")
        conn.execute("UPDATE orders SET qty = 5 WHERE item = 'apple'")
        conn.execute("DELETE FROM orders WHERE item = 'pear'")
        conn.execute("UPDATE orders SET id = 10 WHERE item = 'apple'")
        conn.execute("INSERT INTO nokey VALUES ('x')")
        conn.execute("ALTER TABLE orders ADD COLUMN note text")
        conn.execute("INSERT INTO orders (item, qty, note) VALUES ('plum', 3, 'ripe')")
        conn.execute("TRUNCATE nokey")
    run_dag(f"{name}__stream")
    orders = read_topic(f"{name}.public.orders")
    assert [r.op for r in orders] == ["c", "c", "u", "d", None, "d", None, "c", "c"]
    assert orders[-1].payload["after"] == {"id": 3, "item": "plum", "qty": 3, "note": "ripe"}
    nokey = read_topic(f"{name}.public.nokey")
    assert [r.op for r in nokey] == ["c", "t"] and nokey[0].key is None
    tx = read_topic(f"{name}.transaction")
    assert [r.payload["status"] for r in tx].count("BEGIN") == len(tx) // 2
    # a second stream run with no changes produces nothing
    run_dag(f"{name}__stream")
    assert len(read_topic(f"{name}.public.orders")) == len(orders)


def test_dag_files_import_cleanly() -> None:
    from airflow.dag_processing.dagbag import DagBag

    dags_folder = Path(__file__).resolve().parents[2] / "dags"
    os.environ.pop("WALFLOW_CONNECTORS_DIR", None)
    bag = DagBag(dag_folder=str(dags_folder))
    assert bag.import_errors == {}
    assert {"inventory__setup", "inventory__stream", "example_customers_cdc"} <= set(bag.dag_ids)
    stream = bag.dags["inventory__stream"]
    assert stream.max_active_runs == 1
