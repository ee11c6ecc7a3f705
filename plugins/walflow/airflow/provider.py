"""walflow as an Airflow provider: what ``airflow providers list`` and the providers' pages of the UI show of it.

Airflow finds :func:`get_provider_info` through the ``apache_airflow_provider`` entry point of the installed
distribution (``pyproject.toml``), as it finds its own providers'; the timetable comes through the ``airflow.plugins``
entry point (:mod:`walflow.airflow.plugin`), so neither needs a file in Airflow's DAG or plugins folder. The
description names no plugin: Airflow would load it a second time from there and report the copy as a plugin import
error ("already registered"). walflow's hooks use the PostgreSQL and Kafka providers' connection types, so it
registers none of its own.
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
        "operators": [{"integration-name": INTEGRATION, "python-modules": ["walflow.airflow.operators", "walflow.airflow.lake"]}],
        "sensors": [{"integration-name": INTEGRATION, "python-modules": ["walflow.airflow.sensors"]}],
        "triggers": [{"integration-name": INTEGRATION, "python-modules": ["walflow.airflow.triggers"]}],
    }
