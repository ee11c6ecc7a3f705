"""Builds each connector's DAGs from its YAML file, so DAG files stay one line long."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG
from walflow.airflow.operators import WalflowSetupOperator, WalflowStreamOperator
from walflow.config import ConnectorConfig, load_all

START = datetime(2024, 1, 1)


def setup_dag(config: ConnectorConfig) -> DAG:
    """``<name>__setup``: server checks, publication and slot. Triggered by hand (or by ``make demo``)."""
    with DAG(
        dag_id=f"{config.name}__setup",
        description=f"walflow connector {config.name}: check the server, create publication and slot",
        schedule=None,
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["walflow", config.name],
        doc_md=f"Sets up connector **{config.name}** (topic prefix `{config.topic_prefix}`, slot `{config.slot_name}`).",
    ) as dag:
        WalflowSetupOperator(task_id="setup", connector=config.name)
    return dag


def stream_dag(config: ConnectorConfig) -> DAG:
    """``<name>__stream``: one bounded streaming batch per run, one run at a time."""
    with DAG(
        dag_id=f"{config.name}__stream",
        description=f"walflow connector {config.name}: stream one batch of changes to Kafka",
        schedule=config.walflow_schedule,
        start_date=START,
        catchup=False,
        # One consumer per slot; the advisory lock in the task guards against manual runs as well.
        max_active_runs=1,
        default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
        tags=["walflow", config.name],
        doc_md=f"Streams connector **{config.name}**'s slot `{config.slot_name}` to topics `{config.topic_prefix}.*`.",
    ) as dag:
        WalflowStreamOperator(task_id="stream", connector=config.name)
    return dag


def build_connector_dags(directory: str | None = None) -> dict[str, Any]:
    """Every DAG of every connector in the connectors folder, keyed by DAG id."""
    dags: dict[str, Any] = {}
    for config in load_all(directory):
        for dag in (setup_dag(config), stream_dag(config)):
            dags[dag.dag_id] = dag
    return dags
