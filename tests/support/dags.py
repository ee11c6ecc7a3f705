"""Airflow in the tests: connector files whose source, broker and catalog come from Airflow Connections defined in
the environment, and running the connector factory's DAGs."""

from __future__ import annotations

from typing import Any

import orjson

from tests.privileges import as_connector, as_reader, publish_all_tables
from tests.support.postgres import pg_dsn
from tests.support.spark import TEST_SPARK_CONF


def airflow_connector(folder: Any, name: str, database: str, kafka_bootstrap: str, *settings: str) -> dict[str, str]:
    """Write ``<folder>/<name>.yaml`` for a connector whose source and broker come from two Airflow Connections
    (``<name>_pg``, ``<name>_kafka``); return the environment that defines those Connections and the folder.

    ``database`` is the test database's superuser DSN: the Postgres Connection logs in as its connector role
    (:func:`tests.privileges.as_connector`), and with publication mode 'all_tables' (the default) the superuser
    creates the publication first, as a DBA would."""
    import json
    from pathlib import Path

    params = dict(p.split("=", 1) for p in as_connector(database).split())
    lines = [f"name: {name}", f"topic.prefix: {name}", f"slot.name: {name}", f"publication.name: {name}", *settings]
    if not any(s.startswith("walflow.lake.spark.conf") for s in settings):
        lines.append(f"walflow.lake.spark.conf: {json.dumps(TEST_SPARK_CONF)}")
    lines += [
        f"walflow.postgres.conn.id: {name}_pg",
        f"walflow.kafka.conn.id: {name}_kafka",
        f"walflow.postgres.reader.conn.id: {name}_reader",
    ]
    (Path(folder) / f"{name}.yaml").write_text("\n".join(lines))
    given = {key.strip(): value.strip() for key, _, value in (s.partition(":") for s in settings)}
    if given.get("publication.autocreate.mode", "all_tables") == "all_tables":
        publish_all_tables(database, name)
    postgres = {
        "conn_type": "postgres",
        "host": params["host"],
        "port": int(params["port"]),
        "login": params["user"],
        "password": params["password"],
        "schema": params["dbname"],
    }
    reader = {**postgres, "login": dict(p.split("=", 1) for p in as_reader(database).split())["user"]}
    return {
        f"AIRFLOW_CONN_{name.upper()}_PG": json.dumps(postgres),
        f"AIRFLOW_CONN_{name.upper()}_READER": json.dumps(reader),
        f"AIRFLOW_CONN_{name.upper()}_KAFKA": json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_bootstrap}}
        ),
        "WALFLOW_CONNECTORS_DIR": str(folder),
    }


def jdbc_catalog_env(name: str, dbname: str) -> dict[str, str]:
    """The environment that defines ``<name>_catalog``, the Airflow Connection of Iceberg's JDBC catalog on the test
    cluster's database ``dbname`` (the ``walflow.lake.catalog.conn.id`` the tests give connector ``name``)."""
    params = dict(p.split("=", 1) for p in pg_dsn(dbname).split())
    connection = {
        "conn_type": "postgres",
        "host": params["host"],
        "port": int(params["port"]),
        "login": params["user"],
        "password": params.get("password"),
        "schema": dbname,
    }
    return {f"AIRFLOW_CONN_{name.upper()}_CATALOG": orjson.dumps(connection).decode()}


def run_dag(dag_id: str) -> Any:
    """Run one of the connector factory's DAGs with ``dag.test()``; it must succeed."""
    from walflow.airflow.dag_factory import build_connector_dags

    run = build_connector_dags()[dag_id].test()
    assert run.state == "success", f"{dag_id} ended {run.state}"
    return run
