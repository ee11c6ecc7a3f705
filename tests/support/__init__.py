"""Helpers shared by the integration and end-to-end tests, one module per service they drive:

==============================  ==================================================================================
:mod:`tests.support.postgres`   the test server's DSNs and build (``xml``, the wheel's PostgreSQL 18), the
                                databases each test gets (created, and dropped with their slots)
:mod:`tests.support.names`      names unique to one test (:func:`unique`) and their record (:data:`NAMES`), whose
                                topics the ``database`` fixture deletes afterwards
:mod:`tests.support.kafka`      the broker's address, a producer, reading topics back (:class:`Record`), replaying
                                change events, deleting a test's topics
:mod:`tests.support.connector`  connector configs and the connector's setup and stream tasks, run as the test
                                database's least-privilege role
:mod:`tests.support.dags`       Airflow: connector files whose Connections come from the environment, running DAGs
:mod:`tests.support.lake`       reading the lake with pyiceberg, the connector's lake settings, the JDBC catalog
:mod:`tests.support.spark`      Spark's test settings, the lake job with spark-submit and in the tests' own session
==============================  ==================================================================================

The public names of all of them are importable from ``tests.support`` itself (``from tests.support import stream,
unique``), as they were when this was one module; bench/ imports its database helpers from here too.
"""

from __future__ import annotations

from tests.support.connector import connector, prepare_source, setup, stream
from tests.support.dags import airflow_connector, jdbc_catalog_env, run_dag
from tests.support.kafka import READ_TO_END, Record, bootstrap, delete_topics_of, producer, read_topic, replay
from tests.support.lake import assert_items_in_jdbc_lake, lake_rows, lake_settings, lake_snapshot_id
from tests.support.names import NAMES, unique
from tests.support.postgres import (
    WHEEL_WITHOUT_POSTGIS,
    create_database,
    drop_database,
    pg_dsn,
    server_has_xml,
    wheel_server,
)
from tests.support.spark import (
    TEST_SPARK_CONF,
    apply_command,
    apply_lake,
    catalog_conf,
    lake_job,
    run_apply,
    run_apply_fault,
    start_spark,
)

__all__ = [
    "NAMES",
    "READ_TO_END",
    "TEST_SPARK_CONF",
    "WHEEL_WITHOUT_POSTGIS",
    "Record",
    "airflow_connector",
    "apply_command",
    "apply_lake",
    "assert_items_in_jdbc_lake",
    "bootstrap",
    "catalog_conf",
    "connector",
    "create_database",
    "delete_topics_of",
    "drop_database",
    "jdbc_catalog_env",
    "lake_job",
    "lake_rows",
    "lake_settings",
    "lake_snapshot_id",
    "pg_dsn",
    "prepare_source",
    "producer",
    "read_topic",
    "replay",
    "run_apply",
    "run_apply_fault",
    "run_dag",
    "server_has_xml",
    "setup",
    "start_spark",
    "stream",
    "unique",
    "wheel_server",
]
