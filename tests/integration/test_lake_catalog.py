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

from tests.support import (
    airflow_connector,
    apply_lake,
    assert_items_in_jdbc_lake,
    jdbc_catalog_env,
    setup,
    stream,
    unique,
)
from walflow.lake import JdbcCatalog, LakeSettings

pytestmark = [pytest.mark.timeout(600), pytest.mark.spark]


def test_a_jdbc_catalog_from_an_airflow_connection_holds_the_lake(
    spark: Any,
    database: str,
    kafka_bootstrap: str,
    catalog_database: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from walflow.airflow.hooks import WalflowIcebergCatalogHook
    from walflow.config.files import resolve

    name = unique("jdbc")
    # a catalog name of its own: the session's other tests keep theirs ("lake", a Hadoop catalog)
    env = airflow_connector(
        tmp_path,
        name,
        database,
        kafka_bootstrap,
        f"walflow.lake.catalog.conn.id: {name}_catalog",
        f"walflow.lake.catalog: cat_{name}",
        f"walflow.lake.warehouse: {tmp_path / 'warehouse'}",
    )
    for key, value in {**env, **jdbc_catalog_env(name, catalog_database)}.items():
        monkeypatch.setenv(key, value)
    config = resolve(name)
    settings = LakeSettings.from_config(config)
    catalog = WalflowIcebergCatalogHook(config.walflow_lake_catalog_conn_id).get_conn()
    assert isinstance(catalog, JdbcCatalog), catalog
    public, secret = catalog.spark_conf(settings.catalog, settings.warehouse)
    if catalog.password:
        assert catalog.password not in json.dumps(public), (
            "the catalog's password would be on spark-submit's command line"
        )
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

    # the JDBC catalog in PostgreSQL names the table; pyiceberg's SQL catalog and `walflow status` read it
    assert_items_in_jdbc_lake(name, database, catalog_database)
