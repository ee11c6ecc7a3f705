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
from typing import Any

import psycopg
import pytest

from tests.cluster import standalone_cluster
from tests.support import TEST_SPARK_CONF, airflow_connector, create_database, drop_database, pg_dsn, run_dag, unique
from walflow.lake import JdbcCatalog, LakeSettings, read_lake_table

pytestmark = pytest.mark.timeout(900)
ROOT = Path(__file__).resolve().parents[2]
WORKERS = int(os.environ.get("WALFLOW_CLUSTER_WORKERS", "1"))


@pytest.fixture()
def catalog_database() -> Any:
    name = create_database("lakecat")
    try:
        yield name
    finally:
        drop_database(name)


def test_stream_dag_applies_on_a_standalone_cluster_through_a_jdbc_catalog(
    tmp_path: Path, database: str, kafka_bootstrap: str, catalog_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from walflow.cli import status
    from walflow.connectors import resolve

    params = dict(p.split("=", 1) for p in pg_dsn(catalog_database).split())
    name = unique("clus")
    warehouse = tmp_path / "warehouse"
    env = airflow_connector(
        tmp_path, name, database, kafka_bootstrap, f"walflow.lake.catalog.conn.id: {name}_catalog", f"walflow.lake.warehouse: {warehouse}",
        # the cluster's executors run in JVMs of their own: a small heap each, the tests' quick JIT
        "walflow.lake.spark.conf: " + json.dumps({**TEST_SPARK_CONF, "spark.executor.memory": "700m", "spark.executor.cores": "1"}),
    )
    catalog = {"conn_type": "postgres", "host": params["host"], "port": int(params["port"]), "login": params["user"],
               "password": params.get("password"), "schema": catalog_database}
    env[f"AIRFLOW_CONN_{name.upper()}_CATALOG"] = json.dumps(catalog)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, v text, n numeric(10,2))")
        conn.execute(f"INSERT INTO items SELECT g, 'v' || g, g / 4.0 FROM generate_series(1, {4_000 * WORKERS}) g")
    run_dag(f"{name}__setup")
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("UPDATE items SET v = v || '!' WHERE id % 3 = 0")
        conn.execute("DELETE FROM items WHERE id % 5 = 0")

    with standalone_cluster(workers=WORKERS) as cluster:
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": cluster.master_url, "extra": {"deploy-mode": "client"}}))
        run_dag(f"{name}__stream")
        state = cluster.state()
        assert sum(w["state"] == "ALIVE" for w in state["workers"]) == WORKERS
        # the apply ran on the cluster, its executors in the workers' JVMs, and they read the Kafka slices
        logs = cluster.executor_logs(f"walflow-apply-to-lake-{name}")
        assert len(logs) == WORKERS, logs
        assert all("Running task" in log.read_text() for log in logs), "an executor ran no task"

    # the JDBC catalog in PostgreSQL names the table; pyiceberg's SQL catalog reads it
    with psycopg.connect(pg_dsn(catalog_database)) as conn:
        names = conn.execute("SELECT table_namespace, table_name, iceberg_type FROM iceberg_tables").fetchall()
    assert (name, "public__items", "TABLE") in names
    config = resolve(name)
    jdbc = JdbcCatalog(host=params["host"], port=int(params["port"]), database=catalog_database, user=params["user"], password=params.get("password"))
    table = read_lake_table(LakeSettings.from_config(config), "public__items", jdbc)
    assert table is not None
    lake = {r["id"]: (r["v"], r["n"]) for r in table.scan().to_arrow().to_pylist()}
    with psycopg.connect(database) as conn:
        source = {r[0]: (r[1], r[2]) for r in conn.execute("SELECT id, v, n FROM items").fetchall()}
    assert lake == source

    # `walflow status` and the example consumer read the same catalog
    report = status(name, dsn=database)
    assert "JDBC catalog" in report["lake"]["warehouse"]
    assert {t["table"]: t["rows"] for t in report["lake"]["tables"]}[f"{name}.public__items"] == len(source)
    from airflow.dag_processing.dagbag import DagBag

    consumer = DagBag(dag_folder=str(ROOT / "dags" / "example_lake_consumer.py")).dags["example_lake_consumer"]
    assert consumer.test(run_conf={"connector": name, "table": "public__items"}).state == "success"
