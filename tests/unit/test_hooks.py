"""The lake catalog's Connection: what the ``walflow_iceberg`` form saves becomes Iceberg's catalog properties."""

from __future__ import annotations

import json

import pytest

from walflow.lake.tables import JdbcCatalog, PropertiesCatalog


def test_the_iceberg_form_fields_become_catalog_properties(monkeypatch: pytest.MonkeyPatch) -> None:
    from walflow.airflow.hooks import WalflowIcebergCatalogHook

    extra = {
        # the form's fields, as the UI stores them (prefixed) and as a JSON Connection writes them (plain)
        "extra__walflow_iceberg__catalog_type": "rest",
        "warehouse": "s3://lake/warehouse",
        "s3.endpoint": "http://minio:9000",
        "extra__walflow_iceberg__unused": "",
    }
    conn = {
        "conn_type": "walflow_iceberg",
        "host": "https://catalog.example/api",
        "login": "client",
        "password": "s3cret",
        "extra": extra,
    }
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_CATALOG", json.dumps(conn))
    catalog = WalflowIcebergCatalogHook().get_conn()
    assert isinstance(catalog, PropertiesCatalog)
    assert catalog.properties == {
        "type": "rest", "warehouse": "s3://lake/warehouse", "s3.endpoint": "http://minio:9000",
        "uri": "https://catalog.example/api", "credential": "client:s3cret",
    }  # fmt: skip
    public, secret = catalog.spark_conf("lake", "/unused")
    assert "s3cret" not in json.dumps(public) and secret["spark.sql.catalog.lake.credential"] == "client:s3cret"


def test_a_generic_connection_keeps_its_extras_as_they_are_and_postgres_is_the_jdbc_catalog(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from walflow.airflow.hooks import WalflowIcebergCatalogHook

    generic = {
        "conn_type": "generic",
        "password": "tok",
        "extra": {"type": "hive", "catalog_type": "kept", "uri": "thrift://m:9083"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_HIVE_CATALOG", json.dumps(generic))
    assert WalflowIcebergCatalogHook("hive_catalog").get_conn().properties == {
        "type": "hive",
        "catalog_type": "kept",
        "uri": "thrift://m:9083",
        "token": "tok",
    }
    jdbc = {"conn_type": "postgres", "host": "db", "port": 5433, "schema": "catalogs", "login": "u", "password": "p"}
    monkeypatch.setenv("AIRFLOW_CONN_JDBC_CATALOG", json.dumps(jdbc))
    catalog = WalflowIcebergCatalogHook("jdbc_catalog").get_conn()
    assert isinstance(catalog, JdbcCatalog) and (catalog.host, catalog.port, catalog.database) == (
        "db",
        5433,
        "catalogs",
    )


def test_the_connectors_queue_and_batch_keys_override_the_kafka_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    """Debezium's max.batch.size / max.queue.size / max.queue.size.in.bytes reach the producer the stream operator
    builds, over the Kafka Connection's own librdkafka settings; the Connection's other settings stay."""
    from walflow.airflow.operators import WalflowStreamOperator
    from walflow.config.connector import parse_config

    extra = {"bootstrap.servers": "127.0.0.1:9", "batch.num.messages": 100, "linger.ms": 7}
    monkeypatch.setenv("AIRFLOW_CONN_QUEUES_KAFKA", json.dumps({"conn_type": "kafka", "extra": extra}))
    config = parse_config(
        {
            "name": "queues",
            "topic.prefix": "queues",
            "walflow.kafka.conn.id": "queues_kafka",
            "max.batch.size": 2048,
            "max.queue.size": 8192,
            "max.queue.size.in.bytes": 1 << 20,
        }
    )
    producer = WalflowStreamOperator(task_id="stream", connector="queues")._kafka_hook(config).get_conn
    try:
        settings = producer.settings
        assert settings["batch.num.messages"] == 2048 and settings["queue.buffering.max.messages"] == 8192
        assert settings["queue.buffering.max.kbytes"] == 1024 and settings["linger.ms"] == 7
    finally:
        producer.close()
