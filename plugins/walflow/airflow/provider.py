"""walflow as an Airflow provider: what ``airflow providers list`` and the providers' pages of the UI show of it.

Airflow finds :func:`get_provider_info` through the ``apache_airflow_provider`` entry point of the installed
distribution (``pyproject.toml``), as it finds its own providers'; the timetable comes through the ``airflow.plugins``
entry point (:mod:`walflow.airflow.plugin`), so neither needs a file in Airflow's DAG or plugins folder. The
description names no plugin: Airflow would load it a second time from there and report the copy as a plugin import
error ("already registered"). The source and the broker use the PostgreSQL and Kafka providers' connection types;
walflow registers one of its own, ``walflow_iceberg``, the lake's Iceberg catalog
(:class:`walflow.airflow.hooks.WalflowIcebergCatalogHook`), whose form the UI builds from the fields declared here
without importing the hook.
"""

from __future__ import annotations

from typing import Any

#: the integration every hook, operator, sensor and trigger below belongs to
INTEGRATION = "walflow (PostgreSQL change data capture)"


def get_provider_info() -> dict[str, Any]:
    """The provider's description, in the form of Airflow's ``provider_info.schema.json``."""
    return {
        "package-name": "walflow",
        "name": "walflow",
        "description": "Debezium's PostgreSQL connector rebuilt in Python and orchestrated by Apache Airflow: "
        "logical decoding to Kafka, snapshots, and an Iceberg lake applied by Spark.",
        "integrations": [{"integration-name": INTEGRATION, "tags": ["software"]}],
        "hooks": [{"integration-name": INTEGRATION, "python-modules": ["walflow.airflow.hooks"]}],
        "operators": [
            {"integration-name": INTEGRATION, "python-modules": ["walflow.airflow.operators", "walflow.airflow.lake"]}
        ],
        "sensors": [{"integration-name": INTEGRATION, "python-modules": ["walflow.airflow.sensors"]}],
        "triggers": [{"integration-name": INTEGRATION, "python-modules": ["walflow.airflow.triggers"]}],
        "connection-types": [ICEBERG_CONNECTION],
    }


#: the lake's Iceberg catalog Connection: a REST, Hive, Glue, Nessie or Hadoop catalog by Iceberg's properties (the
#: extras take any other property: s3.endpoint, io-impl...); a JDBC catalog is a plain postgres Connection instead
ICEBERG_CONNECTION: dict[str, Any] = {
    "hook-class-name": "walflow.airflow.hooks.WalflowIcebergCatalogHook",
    "hook-name": "walflow Iceberg catalog",
    "connection-type": "walflow_iceberg",
    "conn-fields": {
        "catalog_type": {
            "label": "Catalog type",
            "schema": {
                "type": ["string", "null"],
                "default": "rest",
                "enum": ["rest", "hive", "glue", "nessie", "hadoop"],
            },
            "description": "Iceberg's catalog 'type' property (for another implementation set 'catalog-impl' in Extra)",
        },
        "warehouse": {
            "label": "Warehouse",
            "schema": {"type": ["string", "null"]},
            "description": (
                "where the tables' files live (s3://bucket/path, hdfs://...), or the REST catalog's warehouse name"
            ),
        },
    },
    "ui-field-behaviour": {
        "hidden-fields": ["schema"],
        "relabeling": {"host": "Catalog URI", "login": "OAuth2 client id", "password": "OAuth2 client secret or token"},
        "placeholders": {
            "host": "https://catalog.example.com/api/catalog (REST), thrift://metastore:9083 (Hive)",
            "login": "the REST catalog's client id; leave empty to send the password as a bearer token",
            "extra": '{"s3.endpoint": "https://s3.example.com", "s3.path-style-access": "true"}',
        },
    },
}
