"""Hooks: the source database and Kafka, configured from Airflow Connections.

They follow Airflow's own providers: :class:`WalflowPostgresHook` is the Postgres provider's hook (same
Connection type and extras, psycopg 3), adding the libpq connection string that walflow's domain code opens
its several connections with; :class:`WalflowKafkaHook` reads the Kafka provider's Connection, whose extras
are librdkafka settings, and returns walflow's idempotent :class:`~walflow.kafka.EventProducer`.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook
from airflow.providers.postgres.hooks.postgres import PostgresHook
from airflow.sdk import BaseHook
from psycopg.conninfo import make_conninfo

from walflow.kafka import EventProducer, producer_settings
from walflow.lake.tables import JdbcCatalog, PropertiesCatalog

#: Connection extras that are PostgresHook options rather than libpq parameters.
_NON_LIBPQ_EXTRAS = {
    "iam",
    "redshift",
    "cursor",
    "cluster-identifier",
    "workgroup-name",
    "aws_conn_id",
    "sqlalchemy_scheme",
    "sqlalchemy_query",
    "azure_conn_id",
    "enable_log_db_messages",
    "log_sql",
}


class WalflowPostgresHook(PostgresHook):
    """The Postgres provider's hook, plus :meth:`get_conninfo` for walflow's own connections.

    :param postgres_conn_id: the Airflow Connection of the source database.
    """

    conn_name_attr = "postgres_conn_id"
    default_conn_name = "postgres_default"
    conn_type = "postgres"
    hook_name = "walflow source (PostgreSQL)"

    def get_conninfo(self, **overrides: str) -> str:
        """libpq connection string of the Connection, with ``overrides`` (TLS settings from the connector)."""
        conn = self.get_connection(self.get_conn_id())
        params: dict[str, Any] = {
            "host": conn.host or None,
            "port": conn.port or None,
            "user": conn.login or None,
            "password": conn.password or None,
            "dbname": self.database or conn.schema or None,
        }
        for key, value in conn.extra_dejson.items():
            if key not in _NON_LIBPQ_EXTRAS:
                params[key] = value
        params.update(overrides)
        return make_conninfo(**{k: v for k, v in params.items() if v is not None})


class WalflowKafkaHook(KafkaBaseHook):
    """Kafka through the Kafka provider's Connection; ``get_conn`` is walflow's idempotent producer.

    :param kafka_config_id: the Airflow Connection whose extras are librdkafka settings.
    :param producer_overrides: librdkafka settings that take precedence over the Connection's (the connector's
        ``max.batch.size`` and ``max.queue.size*``: ``ConnectorConfig.producer_overrides``).
    """

    hook_name = "walflow Kafka producer"

    def __init__(
        self,
        kafka_config_id: str = KafkaBaseHook.default_conn_name,
        topic_partitions: int = 1,
        topic_replication_factor: int = -1,
        producer_overrides: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(kafka_config_id=kafka_config_id)
        self.topic_partitions = topic_partitions
        self.topic_replication_factor = topic_replication_factor
        self.producer_overrides = dict(producer_overrides or {})

    def _get_client(self, config: dict[str, Any]) -> EventProducer:
        settings = producer_settings({**config, **self.producer_overrides})
        return EventProducer(settings, self.topic_partitions, self.topic_replication_factor)


#: the form fields of the ``walflow_iceberg`` Connection type (walflow.airflow.provider), by the Iceberg catalog
#: property each one sets
FORM_PROPERTIES = {"catalog_type": "type", "warehouse": "warehouse"}


def catalog_properties(extras: dict[str, Any], conn_type: str) -> dict[str, str]:
    """Iceberg catalog properties from a Connection's extras: the form's fields (stored plain, or as
    ``extra__<type>__<field>`` by older forms) under the property they stand for; empty fields left out."""
    properties: dict[str, str] = {}
    for key, value in extras.items():
        name = str(key).removeprefix(f"extra__{conn_type}__")
        if value is None or value == "":
            continue
        properties[FORM_PROPERTIES.get(name, name) if conn_type == WalflowIcebergCatalogHook.conn_type else name] = str(
            value
        )
    return properties


class WalflowIcebergCatalogHook(BaseHook):
    """The lake's Iceberg catalog and its credentials, from an Airflow Connection (``walflow.lake.catalog.conn.id``).

    * A ``postgres`` Connection is Iceberg's JDBC catalog on that database (host, port, schema = the database,
      login, password; extras such as ``sslmode`` are passed to both drivers).
    * A ``walflow_iceberg`` Connection (this hook's own type, whose form asks for the catalog's type and warehouse)
      or any other type (``generic``, say) is a catalog given by Iceberg's catalog properties: its extras are the
      properties (``type`` or ``catalog-impl``, ``uri``, ``warehouse``, ``s3.endpoint``...; the form's ``catalog_type``
      is ``type``), its host the ``uri`` when the extras name none, and its password the credential: ``credential``
      as ``<login>:<password>`` (a REST catalog's OAuth2 client) when it has a login, else ``token``.

    Either way the credentials reach the Spark job through its environment, never its command line or the task log.

    :param catalog_conn_id: the catalog's Connection.
    """

    conn_name_attr = "catalog_conn_id"
    default_conn_name = "lake_catalog"
    conn_type = "walflow_iceberg"
    hook_name = "walflow Iceberg catalog"

    def __init__(self, catalog_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.catalog_conn_id = catalog_conn_id

    def get_conn(self) -> JdbcCatalog | PropertiesCatalog:
        conn = self.get_connection(self.catalog_conn_id)
        if (conn.conn_type or "postgres") in ("postgres", "postgresql"):
            options = {k: str(v) for k, v in conn.extra_dejson.items() if k not in _NON_LIBPQ_EXTRAS}
            return JdbcCatalog(
                host=conn.host or "localhost", port=int(conn.port or 5432), database=conn.schema or "postgres",
                user=conn.login or None, password=conn.password or None, options=options,
            )  # fmt: skip
        properties = catalog_properties(conn.extra_dejson, conn.conn_type or "")
        if conn.host and "uri" not in properties:
            properties["uri"] = conn.host if not conn.port else f"{conn.host}:{conn.port}"
        if conn.password:
            properties.setdefault(
                "credential" if conn.login else "token",
                f"{conn.login}:{conn.password}" if conn.login else conn.password,
            )
        return PropertiesCatalog(properties)
