"""The stream DAG's Spark task on a real Spark standalone cluster (a master and its workers on loopback, started from
the pyspark installation's own scripts), writing through Iceberg's JDBC catalog on PostgreSQL, configured from an
Airflow Connection; the lake is read back with pyiceberg's SQL catalog, by ``walflow status`` and by the example
consumer DAG.

``make test-cluster`` (which CI runs after ``make test``) starts two workers, whose two executors share the Kafka
slices; ``make test-e2e`` one. ``make test`` leaves it out and writes through the same JDBC catalog in the tests' own
Spark session instead (``tests/integration/test_lake_catalog.py``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import psycopg
import pytest

from tests.cluster import standalone_cluster
from tests.support import (
    TEST_SPARK_CONF,
    airflow_connector,
    assert_items_in_jdbc_lake,
    jdbc_catalog_env,
    run_dag,
    unique,
)

pytestmark = [pytest.mark.timeout(900), pytest.mark.cluster]
ROOT = Path(__file__).resolve().parents[2]
WORKERS = int(os.environ.get("WALFLOW_CLUSTER_WORKERS", "1"))


def test_stream_dag_applies_on_a_standalone_cluster_through_a_jdbc_catalog(
    tmp_path: Path, database: str, kafka_bootstrap: str, catalog_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique("clus")
    warehouse = tmp_path / "warehouse"
    env = airflow_connector(
        tmp_path,
        name,
        database,
        kafka_bootstrap,
        f"walflow.lake.catalog.conn.id: {name}_catalog",
        f"walflow.lake.warehouse: {warehouse}",
        # the cluster's executors run in JVMs of their own: a small heap each, the tests' quick JIT
        "walflow.lake.spark.conf: "
        + json.dumps({**TEST_SPARK_CONF, "spark.executor.memory": "700m", "spark.executor.cores": "1"}),
    )
    for key, value in {**env, **jdbc_catalog_env(name, catalog_database)}.items():
        monkeypatch.setenv(key, value)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, v text, n numeric(10,2))")
        conn.execute(f"INSERT INTO items SELECT g, 'v' || g, g / 4.0 FROM generate_series(1, {4_000 * WORKERS}) g")
    run_dag(f"{name}__setup")
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("UPDATE items SET v = v || '!' WHERE id % 3 = 0")
        conn.execute("DELETE FROM items WHERE id % 5 = 0")

    with standalone_cluster(workers=WORKERS) as cluster:
        monkeypatch.setenv(
            "AIRFLOW_CONN_SPARK_DEFAULT",
            json.dumps({"conn_type": "spark", "host": cluster.master_url, "extra": {"deploy-mode": "client"}}),
        )
        run_dag(f"{name}__stream")
        state = cluster.state()
        assert sum(w["state"] == "ALIVE" for w in state["workers"]) == WORKERS
        # the apply ran on the cluster, its executors in the workers' JVMs, and they read the Kafka slices
        logs = cluster.executor_logs(f"walflow-apply-to-lake-{name}")
        assert len(logs) == WORKERS, logs
        assert all("Running task" in log.read_text() for log in logs), "an executor ran no task"

    # the JDBC catalog in PostgreSQL names the table; pyiceberg's SQL catalog, `walflow status` and the example
    # consumer read it
    assert_items_in_jdbc_lake(name, database, catalog_database)

    from airflow.dag_processing.dagbag import DagBag

    consumer = DagBag(dag_folder=str(ROOT / "dags" / "example_lake_consumer.py")).dags["example_lake_consumer"]
    assert consumer.test(run_conf={"connector": name, "table": "public__items"}).state == "success"
