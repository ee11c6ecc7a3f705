"""The lake through Iceberg's JDBC catalog on PostgreSQL, configured from an Airflow Connection
(``walflow.lake.catalog.conn.id``), in the tests' own Spark session: the settings the apply task gives spark-submit
(its catalog hook's shown and secret parts) are given to the session, the lake job writes through them, and
pyiceberg's SQL catalog and ``walflow status`` read the tables back.

The same through the stream DAG's SparkSubmitOperator on a Spark standalone cluster, whose executors are JVMs of
their own, is ``tests/e2e/test_cluster.py`` (``make test-cluster``, which CI runs after ``make test``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support import airflow_connector, apply_lake, create_database, drop_database, pg_dsn, setup, stream, unique
from walflow.lake import JdbcCatalog, LakeSettings, read_lake_table

pytestmark = pytest.mark.timeout(600)


@pytest.fixture()
def catalog_database() -> Any:
    name = create_database("lakecat")
    try:
        yield name
    finally:
        drop_database(name)


def test_a_jdbc_catalog_from_an_airflow_connection_holds_the_lake(
    spark: Any, database: str, kafka_bootstrap: str, catalog_database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from walflow.airflow.hooks import WalflowIcebergCatalogHook
    from walflow.cli import status
    from walflow.connectors import resolve

    params = dict(p.split("=", 1) for p in pg_dsn(catalog_database).split())
    name = unique("jdbc")
    # a catalog name of its own: the session's other tests keep theirs ("lake", a Hadoop catalog)
    env = airflow_connector(
        tmp_path, name, database, kafka_bootstrap, f"walflow.lake.catalog.conn.id: {name}_catalog", f"walflow.lake.catalog: cat_{name}",
        f"walflow.lake.warehouse: {tmp_path / 'warehouse'}",
    )
    env[f"AIRFLOW_CONN_{name.upper()}_CATALOG"] = json.dumps(
        {"conn_type": "postgres", "host": params["host"], "port": int(params["port"]), "login": params["user"],
         "password": params.get("password"), "schema": catalog_database}
    )
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    config = resolve(name)
    settings = LakeSettings.from_config(config)
    catalog = WalflowIcebergCatalogHook(config.walflow_lake_catalog_conn_id).get_conn()
    assert isinstance(catalog, JdbcCatalog), catalog
    public, secret = catalog.spark_conf(settings.catalog, settings.warehouse)
    if params.get("password"):
        assert params["password"] not in json.dumps(public), "the catalog's password would be on spark-submit's command line"
    for key, value in {**public, **secret}.items():
        spark.conf.set(key, value)

    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, v text, n numeric(10,2))")
        conn.execute("INSERT INTO items SELECT g, 'v' || g, g / 4.0 FROM generate_series(1, 300) g")
    setup(config, database)
    apply_lake(spark, config)
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("UPDATE items SET v = v || '!' WHERE id % 3 = 0")
        conn.execute("DELETE FROM items WHERE id % 5 = 0")
    stream(config, database)
    apply_lake(spark, config)

    # the JDBC catalog in PostgreSQL names the table; pyiceberg's SQL catalog reads it
    with psycopg.connect(pg_dsn(catalog_database)) as conn:
        names = conn.execute("SELECT catalog_name, table_namespace, table_name, iceberg_type FROM iceberg_tables").fetchall()
    assert (settings.catalog, name, "public__items", "TABLE") in names, names
    jdbc = JdbcCatalog(host=params["host"], port=int(params["port"]), database=catalog_database, user=params["user"], password=params.get("password"))
    table = read_lake_table(settings, "public__items", jdbc)
    assert table is not None
    lake = {r["id"]: (r["v"], r["n"]) for r in table.scan().to_arrow().to_pylist()}
    with psycopg.connect(database) as conn:
        source = {r[0]: (r[1], r[2]) for r in conn.execute("SELECT id, v, n FROM items").fetchall()}
    assert lake == source

    # `walflow status` reads the same catalog through the Connection
    report = status(name, dsn=database)
    assert "JDBC catalog" in report["lake"]["warehouse"]
    assert {t["table"]: t["rows"] for t in report["lake"]["tables"]}[f"{name}.public__items"] == len(source)
